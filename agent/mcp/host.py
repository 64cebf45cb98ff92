"""MCP servers on one event-loop thread, with a synchronous face for the agent.

The `mcp` SDK is async (anyio); the agent loop is not. `McpHost` runs one asyncio loop on a
daemon thread for all of a session's servers; each `ServerConn` keeps its transport and
`ClientSession` open in one long-lived task (anyio's context managers must be left in the task
that entered them) until `stop()`. Every blocking call (`start`, `call`, `stop`) waits at most
its time limit and then reports an error: a server that does not start, hangs, crashes or
answers garbage never hangs the agent, and its failure comes back as a string, never raised.
A stdio server's stderr goes to a log file (`<spec-agent home>/mcp/NAME.log`), not the terminal.
The SDK starts a stdio server in a session of its own and, on `stop()`, closes its stdin and
then kills its group; the command it is given is the server's under tools/procs.py's launcher
(`contained`: on Linux tools/reaper.py), so the server and everything it starts also end when
the agent dies, and what it leaves behind ends with it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from functools import partial
from typing import Any

from tools import procs

from ..extensions import ServerSpec

STOP_WAIT_S = 8.0  # for a server's transport to close (the SDK waits 2 s, then kills)
PING_S = 2.0  # after a failed call: does the server still answer?


@dataclass
class ToolInfo:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass
class ServerConn:
    """One configured server: its state ("stopped", "starting", "running", "failed", "exited"),
    why it failed, and the tools it listed."""

    spec: ServerSpec
    state: str = "stopped"
    error: str = ""
    tools: list[ToolInfo] = field(default_factory=list)
    session: Any = None
    garbage: str = ""  # the last line the server wrote that was not an MCP message
    ready: Any = None  # threading.Event: set once started or failed
    _task: Any = None
    _stop: Any = None  # asyncio.Event, made on the loop


def _short(e: BaseException) -> str:
    """One line for an exception (an ExceptionGroup is reported by its first leaf)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class McpHost:
    """The event-loop thread and the servers on it."""

    def __init__(self, log_dir: Path | None = None):
        self.log_dir = log_dir
        _quiet_sdk_logs(log_dir)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="mcp-host", daemon=True)
        self._thread.start()
        self.servers: dict[str, ServerConn] = {}

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _submit(self, coro, timeout: float) -> Any:
        """Run `coro` on the loop; raises TimeoutError past `timeout` (the task is cancelled)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError from None

    # ---- starting and stopping ----------------------------------------------------------

    def launch(self, spec: ServerSpec) -> ServerConn:
        """Begin starting `spec`'s server; `wait_started` says how it went."""
        conn = ServerConn(spec, state="starting", ready=threading.Event())
        self.servers[spec.name] = conn
        asyncio.run_coroutine_threadsafe(self._launch(conn, conn.ready), self.loop)
        return conn

    def wait_started(self, conn: ServerConn, deadline: float) -> None:
        """Wait until `conn` runs or failed, or until `deadline` (time.monotonic())."""
        if not conn.ready.wait(max(0.0, deadline - time.monotonic())):
            conn.state = "failed"
            conn.error = f"did not start within {conn.spec.startup_timeout_s:g}s"
            self._cancel(conn)

    async def _launch(self, conn: ServerConn, ready: threading.Event) -> None:
        conn._stop = asyncio.Event()
        conn._task = asyncio.current_task()
        try:
            await self._serve(conn, ready)
        except BaseException as e:  # noqa: BLE001 - any failure of a server is its state
            if conn.state in ("starting", "running"):
                conn.state = "failed" if conn.state == "starting" else "exited"
                said = self._last_log_line(conn.spec.name)
                conn.error = conn.error or _short(e) + (f"; its stderr: {said}" if said else "")
        else:
            if conn.state == "running":
                conn.state = "exited" if not conn._stop.is_set() else "stopped"
        finally:
            conn.session = None
            ready.set()

    async def _serve(self, conn: ServerConn, ready: threading.Event) -> None:
        from mcp import ClientSession

        spec = conn.spec
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport(spec, stack))
            session = await stack.enter_async_context(
                ClientSession(read, write, message_handler=partial(_incoming, conn)))
            await session.initialize()
            conn.tools = await _list_tools(session)
            conn.session, conn.state = session, "running"
            ready.set()
            await conn._stop.wait()
            conn.state = "stopped"

    def _transport(self, spec: ServerSpec, stack: AsyncExitStack):
        if spec.url:
            from mcp.client.streamable_http import streamable_http_client

            return _two(streamable_http_client(spec.url))
        from mcp import StdioServerParameters, stdio_client

        log = stack.enter_context(open(self._log_path(spec.name), "a", encoding="utf-8"))
        command, *args = procs.contained([spec.command, *spec.args])  # the SDK spawns it
        params = StdioServerParameters(command=command, args=args,
                                       env=dict(spec.env) or None, cwd=spec.cwd or None)
        return stdio_client(params, errlog=log)

    def _log_path(self, name: str) -> str:
        import os

        if self.log_dir is None:
            return os.devnull
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return str(self.log_dir / f"{name}.log")

    def _last_log_line(self, name: str) -> str:
        if self.log_dir is None:
            return ""
        try:
            with open(self.log_dir / f"{name}.log", "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 2000))
                lines = f.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].strip()[:200] if lines else ""

    def _cancel(self, conn: ServerConn) -> None:
        task = conn._task
        if task is not None:
            self.loop.call_soon_threadsafe(task.cancel)

    def stop_all(self) -> None:
        """Stop every server (each within STOP_WAIT_S), then the loop thread."""
        for conn in self.servers.values():
            if conn._stop is not None:
                conn.state = "stopping" if conn.state == "running" else conn.state
                self.loop.call_soon_threadsafe(conn._stop.set)
        for conn in self.servers.values():
            if conn._task is not None:
                try:
                    self._submit(_wait_task(conn._task), STOP_WAIT_S)
                except (TimeoutError, concurrent.futures.CancelledError):
                    self._cancel(conn)
            if conn.state == "stopping":
                conn.state = "stopped"
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(STOP_WAIT_S)

    # ---- calls ---------------------------------------------------------------------------

    def call(self, server: str, tool: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
        """(True, CallToolResult) or (False, one line saying what went wrong)."""
        conn = self.servers.get(server)
        if conn is None or conn.state != "running" or conn.session is None:
            why = f" ({conn.error})" if conn is not None and conn.error else ""
            state = {"exited": "has stopped", "failed": "failed to start", "starting": "is still starting"}
            said = state.get(conn.state, f"is {conn.state}") if conn is not None else "is not configured"
            return False, f"MCP server '{server}' {said}{why}"
        limit, session = conn.spec.call_timeout_s, conn.session
        conn.garbage = ""
        try:
            return True, self._submit(session.call_tool(tool, arguments), limit)
        except TimeoutError:
            problem = f"did not answer {tool} within {limit:g}s"
        except Exception as e:  # noqa: BLE001 - a crash or garbage: one line for the model
            problem = f"failed on {tool}: {_short(e)}"
        if conn.garbage:
            problem += f"; it wrote something that is not an MCP message: {conn.garbage[:120]}"
        if not self._alive(conn):
            conn.state, conn.error = "exited", conn.error or "the server stopped answering"
            problem += "; the server has stopped (it is not restarted in this session)"
        return False, f"MCP server '{server}' {problem}"

    def _alive(self, conn: ServerConn) -> bool:
        """Does the server still answer a ping (within PING_S)?"""
        if conn.session is None or conn.state != "running":
            return False
        try:
            self._submit(conn.session.send_ping(), PING_S)
            return True
        except Exception:  # noqa: BLE001 - no answer, whatever the reason
            return False


async def _incoming(conn: ServerConn, message: Any) -> None:
    """The session's handler for what the server sends unasked: keeps note of garbage."""
    if isinstance(message, Exception):
        conn.garbage = _short(message)


async def _wait_task(task) -> None:
    await asyncio.wait({task})


async def _list_tools(session) -> list[ToolInfo]:
    from mcp.types import PaginatedRequestParams

    out: list[ToolInfo] = []
    cursor = None
    for _ in range(50):  # pages: a server that never stops paging is cut off
        result = await session.list_tools(
            params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        out += [ToolInfo(t.name, t.description or "", dict(t.input_schema or {}))
                for t in result.tools]
        cursor = result.next_cursor
        if not cursor:
            break
    return out


class _two:
    """Adapts a transport that yields (read, write, ...) to one yielding (read, write)."""

    def __init__(self, cm):
        self.cm = cm

    async def __aenter__(self):
        streams = await self.cm.__aenter__()
        return streams[0], streams[1]

    async def __aexit__(self, *exc):
        return await self.cm.__aexit__(*exc)


def _quiet_sdk_logs(log_dir: Path | None) -> None:
    """The SDK logs a server's garbage with a traceback; it goes to a file, not the terminal."""
    logger = logging.getLogger("mcp")
    if getattr(logger, "_spec_agent", False):
        return
    logger.propagate = False
    handler: logging.Handler = logging.NullHandler()
    if log_dir is not None:
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(log_dir / "client.log", encoding="utf-8", delay=True)
        except OSError:
            pass
    logger.addHandler(handler)
    logger._spec_agent = True  # type: ignore[attr-defined]

"""`spec-agent acp`: the agent served over the Agent Client Protocol (JSON-RPC on stdio), so
editors and front-ends (Zed, Toad, ...) drive it.

Built on the `agent-client-protocol` SDK (`acp`): `SpecAgent` implements its `Agent`
interface and the SDK's `AgentSideConnection` does the JSON-RPC. One ACP session is one
resumable `Conversation` (its id is the conversation id, so `session/load` resumes a saved
one, replaying it to the client first); a prompt turn streams its events as session updates
(agent/ui/acp_events.py); `session/cancel` sets the turn's `CancelToken`; the conversation's
`Approver` asks the client with `session/request_permission` (allow once / always / reject);
ACP session modes are the approval modes. All model work runs on one engine thread (MLX
keeps per-thread state); the event loop only talks to the client. The protocol owns stdout:
anything else written to file descriptor 1 (a library's print) is sent to stderr, where
logs go. Messages that are not JSON or not objects get a JSON-RPC error and serving goes on.
Not here: slash commands and `!commands` (the TUI's), MCP servers (a client's list is
ignored, with a log line), terminals and file access through the client.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, text_block
from acp._transport import NdjsonTransport
from acp.agent.connection import AgentSideConnection
from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES
from acp.schema import (AgentCapabilities, Implementation, InitializeResponse, ListSessionsResponse,
                        LoadSessionResponse, NewSessionResponse, PromptCapabilities, PromptResponse,
                        SessionCapabilities, SessionInfo, SessionListCapabilities, SessionModeState,
                        SetSessionModeResponse, UserMessageChunk)
from acp.stdio import stdio_streams
from acp.task import MessageSender, TaskSupervisor
from pydantic import ValidationError

from .. import __version__
from ..choices import APPROVAL_MODES as MODES
from ..cancel import CancelToken
from ..core.attach import typed_text
from ..core.callformat import RESULT_OPEN, parse_calls, strip_calls
from ..core.history import HistoryError
from ..events import AgentResult, ApprovalRequest
from ..safe_input import loads
from . import free_mlx_streams, inputs
from .acp_events import (META_KEY, TOOL_KINDS, Translator, answer_of, figures, permission_call,
                         permission_options, prompt_text, prompt_usage, session_modes, tool_title)

log = logging.getLogger("spec-agent.acp")
APPROVAL_POLL_S = 0.1  # how often a waiting approver checks for a cancel
DONE = object()  # the engine thread finished a prompt


@dataclass
class _Session:
    """One ACP session: a conversation in a workspace, and the running prompt's token."""

    id: str
    runtime: Any
    conversation: Any
    cancel: CancelToken | None = None


class SpecAgent:
    """The ACP agent (the SDK's `acp.interfaces.Agent`). `primary` is the Runtime for the
    workspace `spec-agent acp` started in; its engine serves every workspace.
    `open_runtime(cfg, root)` makes the Runtime of another workspace."""

    def __init__(self, primary: Any, flags: dict[str, Any], open_runtime: Callable[[Any, Path], Any]) -> None:
        self.primary, self.flags, self.open_runtime = primary, flags, open_runtime
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spec-agent-engine")
        self.load_job = self.pool.submit(primary.load) if primary.model is None else None
        if self.load_job is not None:
            self.load_job.add_done_callback(_log_load)
        self.runtimes: dict[Path, Any] = {primary.root: primary}
        self.sessions: dict[str, _Session] = {}
        self.conn: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    # ---- lifecycle -------------------------------------------------------------------------

    async def initialize(self, protocol_version: int, client_capabilities: Any = None,
                         client_info: Any = None, **_: Any) -> InitializeResponse:
        self.loop = asyncio.get_running_loop()
        who = getattr(client_info, "name", "") or "a client"
        log.info("initialize from %s (protocol %s)", who, protocol_version)
        caps = AgentCapabilities(
            load_session=True, prompt_capabilities=PromptCapabilities(embedded_context=True),
            session_capabilities=SessionCapabilities(list=SessionListCapabilities()))
        return InitializeResponse(protocol_version=min(protocol_version, PROTOCOL_VERSION),
                                  agent_capabilities=caps, auth_methods=[],
                                  agent_info=Implementation(name="spec-agent", title="spec-agent",
                                                            version=__version__))

    async def authenticate(self, method_id: str, **_: Any) -> None:
        return None  # a local engine: nothing to sign in to

    def _runtime(self, cwd: str) -> Any:
        """The Runtime for workspace `cwd` (one per folder; the config read from there)."""
        from ..config import ConfigError, load_config

        path = Path(cwd)
        if not path.is_absolute() or not path.is_dir():
            raise RequestError.invalid_params({"details": f"cwd {cwd!r}: not an absolute path to a folder"})
        root = path.resolve()
        if root not in self.runtimes:
            try:
                cfg = load_config(root, self.flags)
                self.runtimes[root] = self.open_runtime(cfg, root)
            except ConfigError as e:
                raise RequestError.invalid_params({"details": str(e)}) from None
        return self.runtimes[root]

    async def _start_mcp(self, runtime: Any, servers: list[Any] | None) -> None:
        """Start the user's MCP servers and those the client passed (off the event loop: a
        server may take seconds to start); problems are logged, never fatal."""
        from ..extensions import specs_from_acp

        specs = specs_from_acp(servers, lambda m: log.warning("%s", m))
        await asyncio.get_running_loop().run_in_executor(None, runtime.start_mcp, specs)

    def _modes(self, conversation: Any) -> SessionModeState:
        return SessionModeState(current_mode_id=conversation.cfg.approval_mode,
                                available_modes=session_modes())

    def _open(self, runtime: Any, messages: list[dict[str, str]] | None = None,
              conv_id: str = "") -> _Session:
        conversation = runtime.new_conversation(messages, conv_id)
        session = _Session(conversation.id, runtime, conversation)
        conversation.approver = self._approver(session)
        self.sessions[session.id] = session
        return session

    async def new_session(self, cwd: str, mcp_servers: list[Any] | None = None, **_: Any) -> NewSessionResponse:
        runtime = self._runtime(cwd)
        await self._start_mcp(runtime, mcp_servers)
        session = self._open(runtime)
        log.info("session %s in %s", session.id, session.runtime.root)
        return NewSessionResponse(session_id=session.id, modes=self._modes(session.conversation))

    async def load_session(self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None,
                           **_: Any) -> LoadSessionResponse:
        runtime = self._runtime(cwd)
        await self._start_mcp(runtime, mcp_servers)
        old = self.sessions.get(session_id)
        if old is not None and old.cancel is not None:
            raise RequestError.invalid_request({"details": f"session {session_id} is answering a prompt"})
        try:
            messages = runtime.history.load(session_id)
        except HistoryError as e:
            raise RequestError.invalid_params({"details": str(e)}) from None
        session = self._open(runtime, messages, session_id)
        for update in replay(messages, runtime.root):
            await self.conn.session_update(session_id=session_id, update=update)
        log.info("session %s loaded (%d messages)", session_id, len(messages))
        return LoadSessionResponse(modes=self._modes(session.conversation))

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None,
                            **_: Any) -> ListSessionsResponse:
        runtime = self._runtime(cwd) if cwd else self.primary
        infos = runtime.history.list()
        return ListSessionsResponse(sessions=[
            SessionInfo(session_id=i.id, cwd=str(runtime.root), title=i.first_user_message or None,
                        updated_at=datetime.fromtimestamp(i.modified, timezone.utc).isoformat())
            for i in infos])

    async def set_session_mode(self, session_id: str, mode_id: str, **_: Any) -> SetSessionModeResponse:
        session = self._session(session_id)
        if mode_id not in MODES:
            raise RequestError.invalid_params({"details": f"unknown mode {mode_id!r}; one of {', '.join(MODES)}"})
        conv = session.conversation
        conv.set_config(replace(conv.cfg, approval_mode=mode_id))
        log.info("session %s: approval mode %s", session_id, mode_id)
        return SetSessionModeResponse()

    def _session(self, session_id: str) -> _Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"details": f"unknown session {session_id!r}"})
        return session

    async def cancel(self, session_id: str, **_: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None and session.cancel is not None:
            log.info("session %s: cancel", session_id)
            session.cancel.cancel()

    # ---- a prompt turn ---------------------------------------------------------------------

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        session = self._session(session_id)
        if session.cancel is not None:
            raise RequestError.invalid_request({"details": "this session is already answering a prompt"})
        try:
            text = prompt_text(prompt, session.runtime.root)
        except ValueError as e:
            raise RequestError.invalid_params({"details": str(e)}) from None
        if not text.strip():
            raise RequestError.invalid_params({"details": "the prompt is empty"})
        cancel = session.cancel = CancelToken()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        translator = Translator(session.runtime.root)
        job = loop.run_in_executor(self.pool, self._drive, session, text, cancel, translator,
                                   lambda items: loop.call_soon_threadsafe(queue.put_nowait, items))
        try:
            await self._pump(session_id, queue)
            result = await job
            cancelled = cancel.cancelled  # session/cancel arrived: the turn ends "cancelled"
        except Exception as e:  # noqa: BLE001 - a failed turn answers this request, the server goes on
            if isinstance(e, RequestError):
                raise
            if getattr(e, "exit_code", None) is not None:  # our own errors say what went wrong
                log.error("session %s: %s", session_id, e)
            else:
                log.exception("session %s: the prompt failed", session_id)
            raise RequestError.internal_error({"details": str(e) or type(e).__name__}) from None
        finally:
            cancel.cancel()  # a client gone mid-turn (this task cancelled) stops the engine too
            session.cancel = None
        if result.is_error and result.stop_reason == "error" and not cancelled:
            raise RequestError.internal_error({"details": result.error})
        stop = "cancelled" if cancelled else translator.stop_reason(result)
        return PromptResponse(stop_reason=stop, usage=prompt_usage(result.usage),
                              field_meta={META_KEY: figures(result.usage)})

    def _drive(self, session: _Session, text: str, cancel: CancelToken, translator: Translator,
               put: Callable[[Any], Any]) -> AgentResult:
        """On the engine thread: run the message, translating each event before the
        conversation goes on (an edit's diff is read before the edit is made)."""
        try:
            conv = session.conversation
            conv.set_model(self._model(session.runtime))
            message, _attached = inputs.attach_mentions(text, session.runtime.ctx)
            result = None
            for ev in conv.send(message, cancel, summary=text):
                updates = translator.feed(ev)
                if updates:
                    put(updates)
                if isinstance(ev, AgentResult):
                    result = ev
            if result is None:
                raise RuntimeError("the conversation ended without a result")
            return result
        finally:
            put(DONE)

    def _model(self, runtime: Any) -> Any:
        """The loaded model adapter for `runtime` (on the engine thread, after the load)."""
        if self.load_job is not None:
            self.load_job.result()  # a failed load fails every prompt with its reason
        if runtime is self.primary or runtime.model is not None:
            return _with_tools(runtime)
        model = self.primary.model
        if hasattr(model, "for_workspace"):  # the same engine and caches, this workspace's files
            model = model.for_workspace(runtime.ctx)
        runtime.use_model(model)
        return _with_tools(runtime)

    async def _pump(self, session_id: str, queue: asyncio.Queue) -> None:
        """Send the engine thread's updates in order until it is done; adjacent text chunks
        that queued up meanwhile go as one."""
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            updates = [u for items in batch if items is not DONE for u in items]
            for update in merge_text(updates):
                await self.conn.session_update(session_id=session_id, update=update)
            if DONE in batch:
                return

    def _approver(self, session: _Session) -> Callable[[ApprovalRequest], str]:
        """The conversation's Approver: ask the client, wait (on the engine thread), map the
        answer; a cancelled turn, a client error or a disconnect answer "no"."""

        def approve(request: ApprovalRequest) -> str:
            options = permission_options(request)
            call = permission_call(request, session.runtime.root)
            asked = asyncio.run_coroutine_threadsafe(
                self.conn.request_permission(session_id=session.id, tool_call=call, options=options),
                self.loop)
            while True:
                try:
                    return answer_of(asked.result(timeout=APPROVAL_POLL_S).outcome, options)
                except TimeoutError:
                    if session.cancel is None or session.cancel.cancelled:
                        asked.cancel()
                        return "no"
                except (RequestError, ConnectionError, ValidationError,
                        concurrent.futures.CancelledError) as e:
                    log.warning("permission request failed (%s); not approved", e)
                    return "no"

        return approve

    def close(self) -> None:
        """Cancel running turns and stop the engine thread (MLX streams are freed on it)."""
        for session in self.sessions.values():
            if session.cancel is not None:
                session.cancel.cancel()
        self.pool.submit(free_mlx_streams)
        self.pool.shutdown(wait=True, cancel_futures=False)
        for runtime in {id(r): r for r in (self.primary, *self.runtimes.values())}.values():
            runtime.close()  # the MCP servers


def merge_text(updates: list[Any]) -> list[Any]:
    """Adjacent agent message text chunks joined into one (fewer, larger notifications)."""
    out: list[Any] = []
    for u in updates:
        prev = out[-1] if out else None
        if (getattr(u, "session_update", "") == "agent_message_chunk" and prev is not None
                and getattr(prev, "session_update", "") == "agent_message_chunk"
                and u.content.type == "text" and prev.content.type == "text"):
            out[-1] = prev.model_copy(update={"content": text_block(prev.content.text + u.content.text)})
        else:
            out.append(u)
    return out


def replay(messages: list[dict[str, str]], root: Path) -> list[Any]:
    """A saved conversation as session updates: the user's messages, the agent's text and
    its tool calls (tool results are not shown again)."""
    from acp import start_tool_call, update_agent_message_text

    out: list[Any] = []
    for n, m in enumerate(messages):
        if m["role"] == "user" and not m["content"].startswith(RESULT_OPEN):
            out.append(UserMessageChunk(session_update="user_message_chunk",
                                        content=text_block(typed_text(m["content"]))))
        elif m["role"] == "assistant":
            text = strip_calls(m["content"])
            if text:
                out.append(update_agent_message_text(text))
            for k, call in enumerate(parse_calls(m["content"]), 1):
                out.append(start_tool_call(f"replay_{n}_{k}", tool_title(call.name, call.arguments),
                                           kind=TOOL_KINDS.get(call.name, "other"),
                                           status="failed" if call.error else "completed",
                                           raw_input=call.arguments))
    return out


def _log_load(job: concurrent.futures.Future) -> None:
    error = None if job.cancelled() else job.exception()
    if error is not None:
        log.error("cannot load the model: %s", error)
    elif not job.cancelled():
        log.info("model loaded")


def _with_tools(runtime: Any) -> Any:
    """`runtime`'s model adapter offering the tools registered now (MCP servers' included)."""
    from ..core.prompt import tools_for

    model = runtime.model
    if model is not None and hasattr(model, "tools"):
        model.tools = tools_for(runtime.cfg.edit_format)
    return model


# ---- serving on stdio ------------------------------------------------------------------------


class _Transport(NdjsonTransport):
    """The SDK's newline-delimited JSON transport, answering a line that is not JSON (-32700)
    or not a JSON object (-32600) with a JSON-RPC error instead of skipping it silently."""

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if not line:
                return None
            if not line.strip():
                continue
            try:
                message = loads(line)
            except ValueError as e:  # UnicodeDecodeError included
                log.warning("received a line that is not JSON: %s", e)
                await self.send(_error(RequestError.parse_error({"details": str(e)})))
                continue
            if not isinstance(message, dict):
                log.warning("received JSON that is not a message object")
                await self.send(_error(RequestError.invalid_request(
                    {"details": "a JSON-RPC message must be a JSON object"})))
                continue
            return message


def _error(err: RequestError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": err.to_error_obj()}


def protocol_stdout() -> Any:
    """A file for the protocol on the process's stdout; file descriptor 1 and `sys.stdout`
    then point at stderr, so nothing else can write into the protocol stream."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


async def serve(agent: SpecAgent, out: Any) -> None:
    """Serve `agent` on stdin and `out` until the client closes stdin."""
    saved, sys.stdout = sys.stdout, out  # the SDK's stdio streams open sys.stdin / sys.stdout
    try:
        reader, writer = await stdio_streams(limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    finally:
        sys.stdout = saved
    agent.loop = asyncio.get_running_loop()
    tasks = TaskSupervisor(source="spec-agent.acp")
    conn = AgentSideConnection(agent, _Transport(reader, MessageSender(writer, tasks)), listening=False)
    try:
        await conn.listen()
    finally:
        await asyncio.shield(conn.close())
        await tasks.shutdown()

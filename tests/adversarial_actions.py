"""More actions for the adversarial cases (tests/test_adversarial.py): hostile input at each
boundary (a conversation file, one ACP line, a remote server's stream, run through `-p`),
what each UI shows when it asks for an approval, and children left behind when our process
dies. Each returns the `seen` dict the case's expectations are checked against; an exception
other than the boundary's own clean error is recorded as `crash`, never raised.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
import unicodedata
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from fake_openai import FakeServer, Reply, _chunk, text_reply, tool_reply, usage_chunk

from agent.cli import main

NAMES = {"Reply": Reply, "chunk": _chunk, "text_reply": text_reply, "tool_reply": tool_reply,
         "usage_chunk": usage_chunk, "itertools": itertools, "json": json}


def _value(case: dict, key: str) -> Any:
    return eval(case[key], dict(NAMES))  # noqa: S307 - the test's own case files


def history(repo: Path, case: dict) -> dict[str, Any]:
    """Write a conversation file, then load and list the repository's conversations."""
    from agent.core.history import HistoryError, HistoryStore

    store = HistoryStore(repo)
    path = store.path("adv")
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _value(case, "content_py")
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    seen: dict[str, Any] = {"clean_error": False}
    try:
        store.load("adv")
    except HistoryError:
        seen["clean_error"] = True
    except BaseException as e:  # noqa: BLE001 - what a case looks for
        seen["crash"] = type(e).__name__
    try:
        store.list()
    except BaseException as e:  # noqa: BLE001
        seen["crash"] = type(e).__name__
    return seen


def acp_line(case: dict) -> dict[str, Any]:
    """Feed the ACP server's transport one hostile line, then a valid request: it must answer
    the first with a JSON-RPC error and go on to the second."""
    from agent.ui.acp import _Transport

    sent: list[dict] = []

    class Transport(_Transport):
        async def send(self, payload: dict) -> None:
            sent.append(payload)

    async def go() -> Any:
        reader = asyncio.StreamReader(limit=1 << 26)
        data = _value(case, "line_py")
        reader.feed_data(data if isinstance(data, bytes) else data.encode())
        reader.feed_data(b'\n{"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {}}\n')
        reader.feed_eof()
        return await Transport(reader, None).receive()

    seen: dict[str, Any] = {}
    try:
        message = asyncio.run(asyncio.wait_for(go(), 20))
        seen["answered"] = isinstance(message, dict) and message.get("id") == 7
        seen["errors"] = len([s for s in sent if "error" in s])
    except BaseException as e:  # noqa: BLE001
        seen["crash"] = type(e).__name__
    return seen


def remote(repo: Path, case: dict) -> dict[str, Any]:
    """`spec-agent -p` on a scripted server; stdout is strict UTF-8, as a terminal's."""
    replies = _value(case, "replies_py")
    out, err = io.BytesIO(), io.StringIO()
    text_out = io.TextIOWrapper(out, encoding="utf-8", errors="strict", write_through=True)
    seen: dict[str, Any] = {}
    with FakeServer(replies) as srv:
        argv = ["-p", "go", "--engine", "openai", "--base-url", srv.url, "-C", str(repo), "--yes",
                "--sandbox", "off", *case.get("flags", [])]
        try:
            with redirect_stdout(text_out), redirect_stderr(err):
                seen["exit"] = main(argv)
        except SystemExit as e:
            seen["exit"] = e.code
        except BaseException as e:  # noqa: BLE001
            seen["crash"] = type(e).__name__
        seen["hung_up"] = srv.disconnected.wait(3)  # the server sees it when it next writes
    seen["output"] = out.getvalue().decode("utf-8", "replace") + err.getvalue()
    if "Traceback" in seen["output"]:
        seen["crash"] = "traceback printed"
    return seen


# ---- what an approval shows ---------------------------------------------------------------------

_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}


def raw_controls(text: str) -> list[str]:
    """The characters of `text` a terminal would act on or reorder (newline and tab aside)."""
    return [c for c in text if (c not in "\n\t" and unicodedata.category(c) == "Cc") or c in _BIDI]


def approval(repo: Path, case: dict) -> dict[str, Any]:
    """The texts the REPL, ACP and `-p` show for an approval of `case["command"]`."""
    from agent.core.approvals import decide
    from agent.core.preview import approval_request
    from agent.events import ApprovalRequired, ToolCallStarted
    from agent.ui.acp_events import permission_call
    from agent.ui.render import Renderer
    from agent.ui.repl_text import approval_question, approval_text

    args = {"command": case["command"]}
    reason = decide("suggest", "shell", "run_shell", args, repo).reason
    req = approval_request("c1", "run_shell", "shell", args, reason, repo)
    call = permission_call(req, repo)
    err = io.StringIO()
    r = Renderer("text", io.StringIO(), err)
    r.handle(ToolCallStarted("c1", "run_shell", args))
    r.handle(ApprovalRequired("c1", "run_shell", reason))
    shown = {"repl": approval_text(req) + approval_question(req), "acp": json.dumps(
        call.model_dump(mode="json"), ensure_ascii=False), "print": err.getvalue()}
    seen = {"output": "\n".join(shown.values())}
    acp = call.model_dump(mode="json")
    acp.pop("raw_input", None)  # the arguments as data, for the client; not what it shows
    seen["raw"] = {k: raw_controls(v) for k, v in shown.items() if k != "acp"}
    seen["raw"]["acp"] = raw_controls(_strings(acp))
    seen["shown_clean"] = not any(seen["raw"].values())
    return seen


def _strings(obj: Any) -> str:
    if isinstance(obj, str):
        return obj
    if isinstance(obj, dict):
        return "".join(_strings(v) for v in obj.values())
    if isinstance(obj, list):
        return "".join(_strings(v) for v in obj)
    return ""


# ---- children left behind ---------------------------------------------------------------------

_PARENT = """
import os, sys, threading, time
sys.path.insert(0, {root!r})
from tools import ToolContext, call_tool
ctx = ToolContext(__import__("pathlib").Path({repo!r}), shell_timeout_s=120, sandbox={sandbox!r})
threading.Thread(target=call_tool, args=({name!r}, {arguments!r}, ctx), daemon=True).start()
time.sleep(1.5)
def children(pid):
    out = set()
    try:
        for tid in os.listdir(f"/proc/{{pid}}/task"):
            out |= set(open(f"/proc/{{pid}}/task/{{tid}}/children").read().split())
    except OSError:
        pass
    return out
seen, todo = set(), children(os.getpid())
while todo:  # every process the call started, grandchildren too
    pid = todo.pop()
    seen.add(pid)
    todo |= children(pid) - seen
open({pids!r}, "w").write(" ".join(sorted(seen)))
os._exit(0)
"""


def _alive(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def orphans(repo: Path, case: dict, tmp: Path) -> dict[str, Any]:
    """Start a tool call in a child Python that then exits at once (as if killed): are the
    processes that call started gone soon after? With `agent`, the agent itself runs (see
    `agent_orphans`)."""
    if "agent" in case:
        return agent_orphans(repo, case["agent"], tmp)
    call = case["call"]
    pids = tmp / "pids.txt"
    code = _PARENT.format(root=str(Path(__file__).parents[1]), repo=str(repo), pids=str(pids),
                          name=call["name"], arguments=call["arguments"],
                          sandbox=case.get("config", {}).get("sandbox", "auto"))
    subprocess.run([sys.executable, "-c", code], timeout=60, check=True)
    started = pids.read_text().split()
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and any(_alive(p) for p in started):
        time.sleep(0.1)
    left = [p for p in started if _alive(p)]
    for p in left:  # do not leave them burning a core after the test
        try:
            os.kill(int(p), 9)
        except OSError:
            pass
    return {"started": len(started), "orphans": len(left)}


_SERVER = """
import subprocess, sys
sys.path.insert(0, {tests!r})
subprocess.run(["sh", "-c", {spawn!r}], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
import mcp_fixture_server
mcp_fixture_server.serve()
"""


def _matching(marker: str) -> list[int]:
    """Live processes whose command line contains `marker`."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and _alive(pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    line = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                continue
            if marker in line and "pytest" not in line:
                out.append(int(pid))
    return out


def _logged(path: Path) -> set[int]:
    """The pids the `sleep` shim logged."""
    try:
        return {int(p) for p in path.read_text().split()}
    except (OSError, ValueError):
        return set()


def agent_orphans(repo: Path, spec: dict, tmp: Path) -> dict[str, Any]:
    """`spec-agent -p --yes` (scripted model: one run_shell call) with the user's PreToolUse
    `hook` (a shell command) and an MCP server that first runs `server` (a shell command);
    the agent then ends by itself, or with `kill` is SIGKILLed once `count` processes whose
    command lines hold `marker` run. Returns how many of those are left 5 s later."""
    tests = Path(__file__).parent
    folder = tmp / "xdg" / "spec-agent"
    folder.mkdir(parents=True, exist_ok=True)
    config = ""
    if spec.get("hook"):
        config += f"[[hooks.PreToolUse]]\ncommand = {json.dumps(spec['hook'])}\ntimeout_s = 120\n\n"
    if spec.get("server"):
        code = _SERVER.format(tests=str(tests), spawn=spec["server"])
        config += (f"[mcp.servers.adv]\ncommand = {json.dumps(sys.executable)}\n"
                   f"args = [\"-c\", {json.dumps(code)}]\n")
    (folder / "config.toml").write_text(config)
    from scripted import call as tool_call

    # `sleep` on PATH logs its pid before it becomes the real sleep: a child the agent ends
    # within the 50 ms between two looks at the process table is still seen to have started.
    shims, started_log = tmp / "shims", tmp / "started.txt"
    shims.mkdir(exist_ok=True)
    real_sleep = shutil.which("sleep") or "/bin/sleep"
    (shims / "sleep").write_text(f'#!/bin/sh\necho $$ >> "{started_log}"\nexec {real_sleep} "$@"\n')
    (shims / "sleep").chmod(0o755)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp / "xdg"),
           "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}",
           "SCRIPTED_TURNS": json.dumps([tool_call("run_shell", command="true"), "Done."])}
    proc = subprocess.Popen([sys.executable, str(tests / "scripted_cli.py"), "-p", "go", "--yes",
                             "--sandbox", "off", "-C", str(repo)], env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    seen: dict[str, Any] = {}
    started: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            started |= set(_matching(spec["marker"])) | _logged(started_log)
            if spec.get("kill") and len(started) >= spec.get("count", 1):
                proc.kill()
            time.sleep(0.05)
        proc.wait(5)
    finally:
        proc.kill()
    started |= _logged(started_log)
    deadline = time.monotonic() + 5.0
    while _matching(spec["marker"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _matching(spec["marker"])
    for pid in left:  # do not leave them running after the test
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    seen["started"] = len(started)
    seen["orphans"] = len(left) if started else None  # nothing seen running: the case tests nothing
    return seen

"""Containment of what the agent starts and reads itself (issue 55's held-out classes):

- every child the agent starts (hooks, MCP servers) and everything those start, the ones
  that leave the process group or double-fork included, ends when the agent exits normally
  and when it is SIGKILLed (the agent runs as a program: tests/scripted_cli.py);
- the post-edit checks read only regular files inside the repository, never through a
  symlink, and run ruff sandboxed;
- the git folders of nested repositories (`.git` files with `gitdir:`) are off limits to
  write_file and edit_file;
- grep's time limit is short and the result says the search was cut.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted import SAMPLE, call, make_repo

TESTS = Path(__file__).parent
ROOT = TESTS.parent
LINUX = sys.platform.startswith("linux")

# ---- children of hooks and MCP servers -------------------------------------------------------

# An MCP server that leaves three children: one in its group, one in a session of its own, and
# one that double-forks (its parent exits at once), then serves the fixture's tools.
SERVER = """
import os, subprocess, sys
sys.path.insert(0, {tests!r})
q = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
a = subprocess.Popen(["sleep", "321"], **q)
b = subprocess.Popen(["setsid", "sleep", "322"], **q)
c = subprocess.run(["sh", "-c", "setsid sleep 323 >/dev/null 2>&1 </dev/null & echo $!"],
                   capture_output=True, text=True).stdout.strip()
with open({pids!r}, "a") as f:
    f.write(f"server {{os.getpid()}} {{a.pid}} {{b.pid}} {{c}}\\n")
import mcp_fixture_server
mcp_fixture_server.serve()
"""

# A hook that does the same; with HOLD set it then stays in the foreground (the agent waits in it).
HOOK = """#!/bin/sh
cat >/dev/null
sleep 331 >/dev/null 2>&1 &
a=$!
setsid sleep 332 >/dev/null 2>&1 </dev/null &
b=$!
c=$(sh -c 'setsid sleep 333 >/dev/null 2>&1 </dev/null & echo $!')
echo "hook $$ $a $b $c" >> {pids}
if [ -n "$HOLD" ]; then sleep 334 & echo "hold $!" >> {pids}; wait; fi
exit 0
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                kids = {int(k) for k in Path(f"/proc/{p}/task/{tid}/children").read_text().split()}
                todo += list(kids - out)
                out |= kids
        except OSError:
            continue
    return out


def _recorded(pids: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for line in pids.read_text().splitlines() if pids.exists() else []:
        name, *nums = line.split()
        out.setdefault(name, []).extend(int(n) for n in nums if n.isdigit())
    return out


def _agent(tmp_path: Path, hold: bool) -> tuple[subprocess.Popen, Path]:
    """`spec-agent -p` (scripted model) with a PreToolUse hook and an MCP server that both
    leave children behind."""
    repo = make_repo(tmp_path / "repo", SAMPLE)
    pids = tmp_path / "pids.txt"
    server = tmp_path / "server.py"
    server.write_text(SERVER.format(tests=str(TESTS), pids=str(pids)))
    hook = tmp_path / "hook.sh"
    hook.write_text(HOOK.format(pids=pids))
    hook.chmod(0o755)
    (tmp_path / "xdg" / "spec-agent").mkdir(parents=True)
    (tmp_path / "xdg" / "spec-agent" / "config.toml").write_text(
        f'[[hooks.PreToolUse]]\nmatcher = "run_shell"\ncommand = "{hook}"\ntimeout_s = 120\n\n'
        f"[mcp.servers.fx]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(server))}]\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "SPEC_AGENT_HOME": str(tmp_path / "home"),
           "SCRIPTED_TURNS": json.dumps([call("run_shell", command="true"), "Done."])}
    env.pop("HOLD", None)
    if hold:
        env["HOLD"] = "1"
    proc = subprocess.Popen([sys.executable, str(TESTS / "scripted_cli.py"), "-p", "do it",
                             "--yes", "--sandbox", "off", "-C", str(repo)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    return proc, pids


def _left(started: set[int], seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in started):
        time.sleep(0.1)
    left = sorted(p for p in started if _alive(p))
    for p in left:  # not left burning after the test
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return left


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_children_of_hooks_and_mcp_servers_end_when_the_agent_exits(tmp_path):
    proc, pids = _agent(tmp_path, hold=False)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    seen = _recorded(pids)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert len(seen.get("server", [])) == 4 and len(seen.get("hook", [])) == 4, seen
    started = {p for ps in seen.values() for p in ps}
    assert _left(started) == []


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_children_of_hooks_and_mcp_servers_end_when_the_agent_is_killed(tmp_path):
    proc, pids = _agent(tmp_path, hold=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not {"server", "hold"} <= set(_recorded(pids)):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.1)
        started = _descendants(proc.pid) | {p for ps in _recorded(pids).values() for p in ps}
        assert len(started) >= 10, started
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    assert _left(started) == []

"""Containment of what the agent starts and reads itself:

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


# ---- what the checks read: regular files inside the repo, no symlink followed ----------------

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA-secret\n"


@pytest.fixture
def planted(tmp_path):
    """A repository where a command planted `x.py` and `sub/y.py` (through a linked folder)
    as links to a key outside it, and `pipe.py`, a FIFO."""
    repo = make_repo(tmp_path / "repo", SAMPLE)
    (tmp_path / "ssh").mkdir()
    (tmp_path / "ssh" / "id_rsa").write_text(KEY)
    (tmp_path / "ssh" / "y.py").write_text(KEY)
    (repo / "x.py").symlink_to(tmp_path / "ssh" / "id_rsa")
    (repo / "sub").symlink_to(tmp_path / "ssh")
    os.mkfifo(repo / "pipe.py")
    return repo


def test_the_checks_neither_follow_a_planted_symlink_nor_open_a_fifo(planted):
    from agent.config import Config
    from agent.core import checks
    from tools import ToolContext

    edited = ["x.py", "sub/y.py", "pipe.py", "calc.py"]
    assert checks.python_files(edited, planted) == ["calc.py"]
    cfg = Config(auto_lint=True, auto_test=False)
    t0 = time.monotonic()
    outs = list(checks.run_checks(cfg, edited, ToolContext(planted, sandbox="off")))
    assert time.monotonic() - t0 < 30 and all(o.ok for o in outs), outs
    for p in ("x.py", "sub/y.py", "pipe.py"):  # asked directly: refused, nothing quoted
        out = checks.syntax([p], planted)
        assert not out.ok and "secret" not in out.output and "BEGIN" not in out.output, out
        assert checks.stubs([p], planted).ok
    report = 'File "x.py", line 1\nsub/y.py:1:1: E999\nFile "%s", line 1\n' % (planted.parent / "ssh/id_rsa")
    assert checks._named_lines(report, planted) == ""
    fed = checks.feedback(checks.Outcome("syntax", "c", False, report), planted)
    assert "BEGIN" not in fed and "secret" not in fed


def test_importers_attached_to_a_names_failure_are_never_links(planted):
    import subprocess

    from agent.core import checks
    from tools import ToolContext

    (planted / "real.py").write_text("from shapes import area\n")
    (planted.parent / "ssh" / "use.py").write_text("from shapes import area\n" + KEY)
    (planted / "use.py").symlink_to(planted.parent / "ssh" / "use.py")
    subprocess.run(["git", "add", "real.py", "use.py"], cwd=planted, check=True)
    out = checks.Outcome("names", "", False, "x", importers=("use.py", "real.py"))
    assert list(checks.importer_texts(out, ToolContext(planted, sandbox="off"))) == ["real.py"]


def test_the_names_check_reads_no_link_and_no_fifo(planted):
    from agent.core.pynames import missing_names

    (planted / "shapes.py").write_text("def area():\n    return 1\n")
    (planted.parent / "ssh" / "imp.py").write_text("from shapes import gone\n")
    (planted / "imp.py").symlink_to(planted.parent / "ssh" / "imp.py")
    (planted / "real.py").write_text("from shapes import missing\n")
    t0 = time.monotonic()
    found = missing_names(planted, "shapes.py")
    assert time.monotonic() - t0 < 10
    assert [(m.importer, m.names) for m in found] == [("real.py", ("missing",))]


@pytest.mark.skipif(not LINUX, reason="bubblewrap")
def test_ruff_runs_sandboxed(tmp_path, monkeypatch):
    """A `ruff` that tries to write outside the repository cannot: the check runs it as
    run_shell runs a command."""
    from tools import ToolContext, sandbox

    if not sandbox.available()[0]:
        pytest.skip("no working sandbox")
    from agent.core import checks

    repo = make_repo(tmp_path / "repo", SAMPLE)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    bin_dir = repo / "bin"  # (the sandbox's /tmp is its own)
    bin_dir.mkdir()
    fake = bin_dir / "ruff"
    fake.write_text(f"#!/bin/sh\ntouch {out_dir}/escaped && echo wrote\necho 'calc.py:1:1: F821 x'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    out = checks.ruff(["calc.py"], repo, ctx=ToolContext(repo))
    assert out is not None and not out.ok and "F821" in out.output
    assert not (out_dir / "escaped").exists()


# ---- the git folders of nested repositories ----------------------------------------------------

@pytest.mark.parametrize("path", ["store/config", "store/hooks/pre-commit", "pending/HEAD",
                                  "pending/hooks/post-checkout", "bare.git/hooks/post-update",
                                  "linked/config", "sub/.git"])
def test_write_file_refuses_the_git_folders_of_nested_repositories(tmp_path, path):
    from tools import ToolContext, call_tool

    repo = make_repo(tmp_path / "repo", SAMPLE)
    # `sub` keeps its git folder in `store` (git init --separate-git-dir: a .git file points there)
    subprocess.run(["git", "init", "-q", "--separate-git-dir", str(repo / "store"), str(repo / "sub")],
                   check=True)
    (repo / "other").mkdir()
    (repo / "other" / ".git").write_text("gitdir: ../pending\n")  # not created yet
    subprocess.run(["git", "init", "-q", "--bare", str(repo / "bare.git")], check=True)
    (repo / "lib").mkdir()
    subprocess.run(["git", "init", "-q", str(repo / "real")], check=True)
    (repo / "lib" / ".git").symlink_to(repo / "real" / ".git")
    (repo / "linked").symlink_to(repo / "real" / ".git")
    before = (repo / "store" / "config").read_bytes()
    ctx = ToolContext(repo, sandbox="off")
    r = call_tool("write_file", {"path": path, "content": "[core]\n\tfsmonitor = touch pwned\n"}, ctx)
    assert not r.ok and "git folder" in r.output, r.output
    assert (repo / "store" / "config").read_bytes() == before
    assert not (repo / "pending").exists()
    r = call_tool("edit_file", {"path": path, "edits": [{"old": "[core]", "new": "[x]"}]}, ctx)
    assert not r.ok
    assert call_tool("write_file", {"path": "store.txt", "content": "fine\n"}, ctx).ok


# ---- grep: a short time limit, and a result that says it was cut ------------------------------

def test_grep_is_cut_within_its_short_limit_and_says_so_with_what_it_found(tmp_path):
    from tools import ToolContext, call_tool, grep

    assert grep.TIME_LIMIT_S <= 5
    repo = make_repo(tmp_path / "repo", SAMPLE)
    (repo / "a.txt").write_text("aaab\n")  # found first
    (repo / "b.txt").write_text("a" * 5000 + "\n")  # then the pattern backtracks for hours
    t0 = time.monotonic()
    r = call_tool("grep", {"pattern": "(a+)+b", "glob": "*.txt"}, ToolContext(repo))
    assert time.monotonic() - t0 < grep.TIME_LIMIT_S + 3
    assert not r.ok and f"cut after {grep.TIME_LIMIT_S:g}s" in r.output
    assert "a.txt:1: aaab" in r.output


def test_grep_time_limit_counts_from_the_call(tmp_path, monkeypatch):
    from tools import ToolContext, call_tool, grep

    repo = make_repo(tmp_path / "repo", SAMPLE)
    (repo / "b.txt").write_text("a" * 5000 + "\n")
    picked = grep.select

    def slow_select(*args):  # picking the files takes the whole limit
        time.sleep(grep.TIME_LIMIT_S)
        return picked(*args)

    monkeypatch.setattr(grep, "select", slow_select)
    t0 = time.monotonic()
    r = call_tool("grep", {"pattern": "(a+)+b"}, ToolContext(repo))
    assert not r.ok and "cut after" in r.output
    assert time.monotonic() - t0 < grep.TIME_LIMIT_S + grep.MIN_SEARCH_S + 2


def test_grep_says_which_files_were_too_big_and_stays_quick(tmp_path):
    from tools import ToolContext, call_tool, grep

    repo = make_repo(tmp_path / "repo", SAMPLE)
    with open(repo / "huge.log", "wb") as f:  # sparse: 1 GiB that takes no disk
        f.write(b"needle\n")
        f.truncate(1 << 30)
    t0 = time.monotonic()
    r = call_tool("grep", {"pattern": "needle|def add"}, ToolContext(repo))
    assert r.ok and "calc.py:1:" in r.output
    assert "1 file over" in r.output and "not searched" in r.output
    assert time.monotonic() - t0 < grep.TIME_LIMIT_S

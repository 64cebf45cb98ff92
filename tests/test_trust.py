"""Trust under hostile input and faults, the pieces one at a time: the shared JSON
and TOML reader, the scrubbed environment and redaction, what an approval shows in the TUI,
the REPL and `-p`, the config key a repository may not set, and children that die with us.
The same classes through the whole agent are cases in tests/adversarial/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted import SAMPLE, ScriptedModel, call, make_repo
from test_tui import drive, say, screen_text, scripted_app, until, until_approval

from agent.backends.base import ModelError
from agent.config import Config, ConfigError, load_config
from agent.core.shown import has_controls, shown
from agent.safe_input import MAX_DEPTH, loads, loads_toml, nesting
from tools import environ

# ---- one reader for what comes from outside -------------------------------------------------


def test_nesting_is_refused_as_a_json_error_before_parsing():
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(json.JSONDecodeError, match="nested 65 levels"):
        loads(deep)
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    assert nesting('{"a": "[[[[[[[[", "b": [1, {"c": 2}]}') == 3  # brackets in strings do not count
    with pytest.raises(json.JSONDecodeError):
        loads("[" * 500000)  # no RecursionError, however deep


def test_lone_surrogates_become_replacement_characters():
    obj = loads('{"k\\udc80": ["a\\ud800b", "\\ud83d\\ude00"]}')
    assert obj == {"k\ufffd": ["a\ufffdb", "\U0001F600"]}  # a valid pair stays one character
    json.dumps(obj, ensure_ascii=False).encode("utf-8")  # writable


def test_toml_nesting_is_a_decode_error(tmp_path, monkeypatch):
    import tomllib

    with pytest.raises(tomllib.TOMLDecodeError, match="nested too deeply"):
        loads_toml("a = " + "[" * 100000 + "]" * 100000)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    (tmp_path / ".specrc").write_text("max_turns = " + "{a = " * 20000 + "1" + "}" * 20000)
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(tmp_path)


# ---- secrets -------------------------------------------------------------------------------


def test_environment_is_an_allowlist_without_credentials():
    env = {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "GOPATH": "/g", "SPEC_AGENT_API_KEY": "k1",
           "OPENAI_API_KEY": "k2", "GITHUB_TOKEN": "t", "AWS_SECRET_ACCESS_KEY": "s", "DB_PASSWORD": "p",
           "RANDOM_THING": "r", "NPM_TOKEN": "n", "MY_TOOL_HOME": "m"}
    assert environ.scrubbed(env) == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "GOPATH": "/g"}
    passed = environ.scrubbed(env, environ.parse_passthrough("NPM_TOKEN, MY_TOOL_*"))
    assert passed["NPM_TOKEN"] == "n" and passed["MY_TOOL_HOME"] == "m" and "GITHUB_TOKEN" not in passed
    assert not [n for n in environ.ALLOWED if environ.is_secret_name(n)]


def test_a_repository_may_not_pass_variables_through(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    (tmp_path / ".specrc").write_text('shell_env_passthrough = "*"\n')
    with pytest.raises(ConfigError, match="shell_env_passthrough"):
        load_config(tmp_path)


def test_backend_errors_never_carry_a_key(monkeypatch):
    monkeypatch.setenv("SPEC_AGENT_API_KEY", "sk-live-123456789")
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-abcdef")
    e = ModelError("HTTP 401: bad key Bearer sk-live-123456789 (tok-abcdef)")
    assert "sk-live" not in str(e) and "tok-abc" not in str(e) and str(e).count("[redacted]") == 2


# ---- what an approval shows ------------------------------------------------------------------

SPOOF = "rm -f calc.py\r$ ls -la\x1b[2K \u202e"


def test_shown_escapes_what_a_terminal_acts_on():
    assert shown(SPOOF) == "rm -f calc.py\\r$ ls -la\\x1b[2K \\u202e"
    assert shown("a\n\tb") == "a\n\tb" and shown("a\nb", keep_newlines=False) == "a\\nb"
    assert shown("x\x9by\x7f") == "x\\x9by\\x7f" and not has_controls(shown(SPOOF))


def test_tui_approval_shows_the_command_escaped(tmp_path):
    repo = make_repo(tmp_path / "repo", SAMPLE)
    app = scripted_app(repo, [call("run_shell", command=SPOOF), "Done."], Config(approval_mode="suggest"))

    async def scenario(pilot):
        await say(pilot, "list files", wait=False)
        await until_approval(pilot, app)  # (pushed a few frames before it is first drawn)
        request = app.screen.request
        assert not has_controls(request.preview) and not has_controls(request.reason)
        assert "calc.py\\r$ ls -la\\x1b[2K" in screen_text(app)
        await pilot.press("n")
        await until(pilot, lambda: not app.busy)

    drive(app, scenario)
    assert (repo / "calc.py").exists()


def test_repl_and_print_mode_show_the_command_escaped(tmp_path):
    import io

    from scripted import conversation

    from agent.events import ApprovalRequest
    from agent.ui.render import Renderer
    from agent.ui.repl_text import approval_question, approval_text

    repo = make_repo(tmp_path / "repo", SAMPLE)
    asked: list[ApprovalRequest] = []
    model = ScriptedModel([call("run_shell", command=SPOOF), "Done."])
    conv = conversation(repo, model, Config(approval_mode="suggest"),
                        approver=lambda req: asked.append(req) or "no")
    list(conv.send("list files"))
    repl = approval_text(asked[0]) + approval_question(asked[0])
    assert not has_controls(repl) and "calc.py\\r$ ls -la" in repl
    err = io.StringIO()  # -p: nobody to ask
    renderer = Renderer("text", io.StringIO(), err)
    model = ScriptedModel([call("run_shell", command=SPOOF), "Done."])
    for ev in conversation(repo, model, Config(approval_mode="suggest")).send("list files"):
        renderer.handle(ev)
    assert "approval required" in err.getvalue() and not has_controls(err.getvalue())
    assert (repo / "calc.py").exists()


# ---- children that outlive their call ----------------------------------------------------------


def test_grep_worker_dies_when_its_parent_is_killed(tmp_path):
    """The grep worker on a catastrophic regex, its parent SIGKILLed mid-search: gone soon."""
    (tmp_path / "long.txt").write_text("a" * 5000 + "b\n")
    pids = tmp_path / "pids"
    code = (f"import sys, threading, time, os; sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
            "from tools import ToolContext, call_tool\n"
            f"threading.Thread(target=call_tool, args=('grep', {{'pattern': '(a+)+$'}}, ToolContext("
            f"__import__('pathlib').Path({str(tmp_path)!r}))), daemon=True).start()\n"
            "time.sleep(1.0)\n"
            "kids = open(f'/proc/self/task/{threading.get_native_id()}/children').read()\n"
            "kids += ' '.join(open(f'/proc/self/task/{t}/children').read() for t in os.listdir('/proc/self/task'))\n"
            f"open({str(pids)!r}, 'w').write(kids)\n"
            "time.sleep(60)\n")
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        while not (pids.exists() and pids.read_text().split()) and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = set(pids.read_text().split())
        assert workers, "the search did not start"
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 3
    while any(Path(f"/proc/{p}").exists() for p in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in workers if Path(f"/proc/{p}").exists()]
    for p in left:
        os.kill(int(p), 9)
    assert not left, f"grep worker(s) {left} outlived their parent"


@pytest.mark.parametrize("command, timeout_s", [("setsid sleep 317 & echo started", 20),
                                                ("setsid sleep 317 & sleep 30", 1)])
def test_unsandboxed_command_leaves_nothing_behind(tmp_path, command, timeout_s):
    """What a command started in the background, even in a session of its own, dies when the
    command ends or times out."""
    from tools import ToolContext, call_tool

    if not sys.platform.startswith("linux"):
        pytest.skip("the subreaper is Linux's")
    marker = f"{command} # {os.getpid()}-{timeout_s}"
    call_tool("run_shell", {"command": marker, "timeout_s": timeout_s}, ToolContext(tmp_path, sandbox="off"))
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and _running("sleep 317"):
        time.sleep(0.05)
    assert not _running("sleep 317")


def _running(text: str) -> list[int]:
    out = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and "pytest" not in cmd:
            out.append(int(pid))
    return out

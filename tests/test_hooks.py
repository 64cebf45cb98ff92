"""Hooks from the user's config, run the way Claude Code runs them (JSON on stdin, exit 2
blocks), in `-p` runs with a scripted model: PreToolUse blocking run_shell with a reason the
model reads, or approving; a hook past its time limit killed with its process group;
PostToolUse, UserPromptSubmit and Stop; a repository's .specrc may not add hooks."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import SimpleNamespace

import pytest
from scripted import SAMPLE, ScriptedModel, call, full_auto, make_repo

from agent.config import Config
from agent.exit_codes import for_stop_reason


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo", SAMPLE)


def user_hooks(tmp_path: Path, monkeypatch, toml: str) -> None:
    folder = tmp_path / "xdg" / "spec-agent"
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text(toml)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def run_p(repo: Path, turns: list[str], cfg: Config, task: str = "do it"):
    """`-p` with a scripted model: (exit code, stdout, stderr, the model)."""
    from agent.commands import run_task

    model, out, err = ScriptedModel(turns), io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = run_task(task, SimpleNamespace(repo=repo, output_format="text", stats=False),
                        cfg, model=model)
    return code, out.getvalue(), err.getvalue(), model


def test_pre_tool_use_blocks_run_shell_with_a_reason_the_model_reads(repo, tmp_path, monkeypatch):
    seen = tmp_path / "seen.json"
    guard = script(tmp_path, "guard.sh", f'cat > {seen}\necho "no shell in this repo: use read_file" >&2\nexit 2\n')
    user_hooks(tmp_path, monkeypatch, f'[[hooks.PreToolUse]]\nmatcher = "run_shell"\ncommand = "{guard}"\n')
    turns = [call("read_file", path="calc.py"), call("run_shell", command="touch made.txt"), "Done."]
    code, out, err, model = run_p(repo, turns, full_auto())
    assert code == 0 and out.strip() == "Done."
    assert not (repo / "made.txt").exists()
    result = model.seen[2][-1]["content"]
    assert 'name="run_shell" status="error"' in result
    assert "a PreToolUse hook blocked this call: no shell in this repo: use read_file" in result
    assert "PreToolUse hook" in err and "blocked: no shell in this repo" in err  # shown as an event
    payload = json.loads(seen.read_text())  # only the matching call ran the hook
    assert payload["hook_event_name"] == "PreToolUse" and payload["tool_name"] == "run_shell"
    assert payload["tool_input"] == {"command": "touch made.txt"}
    assert payload["cwd"] == str(repo.resolve()) and payload["session_id"]


def test_pre_tool_use_json_approves_a_call_the_mode_would_ask_for(repo, tmp_path, monkeypatch):
    ok = script(tmp_path, "ok.sh", 'cat >/dev/null\necho \'{"hookSpecificOutput": {"hookEventName": '
                '"PreToolUse", "permissionDecision": "allow", "permissionDecisionReason": "tests may run"}}\'\n')
    user_hooks(tmp_path, monkeypatch, f'[[hooks.PreToolUse]]\nmatcher = "run_shell|edit_file"\ncommand = "{ok}"\n')
    cfg = Config(approval_mode="suggest", attach_mentioned=False, sandbox="off")
    code, out, err, model = run_p(repo, [call("run_shell", command="echo hi"), "Done."], cfg)
    assert code == 0 and "approved: tests may run" in err
    assert 'name="run_shell" status="ok"' in model.seen[1][-1]["content"]
    # a destructive command still asks, whatever a hook says: no one to ask in -p
    code, *_ = run_p(repo, [call("run_shell", command="rm -rf /"), "Done."], cfg)
    assert code == for_stop_reason("approval_required")


def test_a_hook_past_its_time_limit_is_killed_with_its_process_group(repo, tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    slow = script(tmp_path, "slow.sh", f"sleep 30 &\necho $! > {pids}\nwait\n")
    user_hooks(tmp_path, monkeypatch, f'[[hooks.PreToolUse]]\ncommand = "{slow}"\ntimeout_s = 1\n')
    t0 = time.monotonic()
    code, out, err, model = run_p(repo, [call("read_file", path="calc.py"), "Done."], full_auto())
    assert time.monotonic() - t0 < 10
    assert code == 0 and "timed out after 1s and was killed; ignored" in err
    assert 'name="read_file" status="ok"' in model.seen[1][-1]["content"]  # the call went on
    assert not alive(int(pids.read_text()))  # the hook's own child was killed too


def alive(pid: int) -> bool:
    """Is `pid` running (a zombie left for a parent that does not reap is not)?"""
    time.sleep(0.2)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_post_tool_use_sees_the_response_and_can_tell_the_model(repo, tmp_path, monkeypatch):
    seen = tmp_path / "post.json"
    post = script(tmp_path, "post.sh", f'cat > {seen}\necho "remember to run the tests" >&2\nexit 2\n')
    user_hooks(tmp_path, monkeypatch, f'[[hooks.PostToolUse]]\ncommand = "{post}"\n')
    code, out, err, model = run_p(repo, [call("read_file", path="calc.py"), "Done."], full_auto())
    payload = json.loads(seen.read_text())
    assert payload["hook_event_name"] == "PostToolUse" and payload["tool_response"]["ok"] is True
    assert "def add" in payload["tool_response"]["output"]
    assert "[PostToolUse hook] remember to run the tests" in model.seen[1][-1]["content"]


def test_user_prompt_submit_adds_context_or_blocks(repo, tmp_path, monkeypatch):
    ctx = script(tmp_path, "ctx.sh", 'cat >/dev/null\necho "The sprint ends Friday."\n')
    user_hooks(tmp_path, monkeypatch, f'[[hooks.UserPromptSubmit]]\ncommand = "{ctx}"\n')
    code, out, err, model = run_p(repo, ["Noted."], full_auto(), task="plan the week")
    assert code == 0 and model.seen[0][-1]["content"] == "plan the week\n\nThe sprint ends Friday."

    no = script(tmp_path, "no.sh", 'grep -q secret && { echo "no secrets in prompts" >&2; exit 2; }\nexit 0\n')
    (tmp_path / "xdg" / "spec-agent" / "config.toml").write_text(
        f'[[hooks.UserPromptSubmit]]\ncommand = "{no}"\n')
    code, out, err, model = run_p(repo, ["Noted."], full_auto(), task="the secret is 42")
    assert code == 1 and model.seen == []  # never reached the model
    assert "a UserPromptSubmit hook blocked the message: no secrets in prompts" in err


def test_stop_hook_sends_the_model_back_once(repo, tmp_path, monkeypatch):
    mark = tmp_path / "stopped-once"
    stop = script(tmp_path, "stop.sh", f'cat >/dev/null\n[ -e {mark} ] && exit 0\ntouch {mark}\n'
                  'echo \'{"decision": "block", "reason": "run the tests first"}\'\n')
    user_hooks(tmp_path, monkeypatch, f'[[hooks.Stop]]\ncommand = "{stop}"\n')
    code, out, err, model = run_p(repo, ["All done.", "Tests pass. Done."], full_auto())
    assert code == 0 and out.strip() == "Tests pass. Done."
    assert model.seen[1][-1]["content"] == "[Stop hook] run the tests first"


def test_bad_hook_config_is_one_error(tmp_path):
    xdg = tmp_path / "xdg" / "spec-agent"
    xdg.mkdir(parents=True)
    (xdg / "config.toml").write_text('[[hooks.BeforeLunch]]\ncommand = "true"\n')
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    r = subprocess.run([sys.executable, "-m", "agent.cli", "-p", "hi", "--repo", str(tmp_path)],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2
    assert r.stderr.strip() == (f"spec-agent: error: {xdg / 'config.toml'}: unknown hook event "
                                "'BeforeLunch' (one of PreToolUse, PostToolUse, UserPromptSubmit, Stop)")


def test_pre_tool_use_can_ask_for_approval_the_mode_would_skip(repo, tmp_path, monkeypatch):
    ask = script(tmp_path, "ask.sh", 'cat >/dev/null\necho \'{"hookSpecificOutput": '
                 '{"permissionDecision": "ask", "permissionDecisionReason": "reads are audited"}}\'\n')
    user_hooks(tmp_path, monkeypatch, f'[[hooks.PreToolUse]]\nmatcher = "read_file"\ncommand = "{ask}"\n')
    code, out, err, model = run_p(repo, [call("read_file", path="calc.py"), "Done."], full_auto())
    assert code == for_stop_reason("approval_required")  # -p has no one to ask
    assert "approval required for read_file: a PreToolUse hook asks for approval" in err

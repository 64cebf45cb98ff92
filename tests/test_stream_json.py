"""`--output-format stream-json` lines are Claude Code's: claude-agent-sdk's own parser
(`parse_message`) reads them into its message types; `--input-format stream-json` runs user
messages line by line in one conversation; `-c`/`--resume` continue a saved conversation."""

from __future__ import annotations

import io
import json
import sys
from types import SimpleNamespace

import pytest
from scripted import INTERRUPT, ScriptedModel, call, full_auto, git_repo  # noqa: F401

from agent.config import Config
from agent.headless import run_headless

sdk = pytest.importorskip("claude_agent_sdk")
from claude_agent_sdk import (AssistantMessage, ResultMessage, SystemMessage,  # noqa: E402
                              TextBlock, ToolResultBlock, ToolUseBlock, UserMessage)
from claude_agent_sdk._internal.message_parser import parse_message  # noqa: E402

READ = call("read_file", path="calc.py")
EDIT = call("edit_file", path="calc.py", edits=[{"old": "return a + b", "new": "return b + a"}])


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path / "home"))


def headless(root, model, cfg, capsys, task="swap", stdin=None, **flags):
    args = SimpleNamespace(repo=root, output_format="stream-json", stats=False,
                           input_format="stream-json" if stdin is not None else "text", **flags)
    code = run_headless(task, args, cfg, model=model,
                        stdin=io.StringIO(stdin) if stdin is not None else None)
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    return code, lines, [parse_message(x) for x in lines]


def test_a_run_with_tool_calls_parses_into_the_sdk_types(git_repo, capsys):
    model = ScriptedModel(["Let me look.\n" + READ, EDIT, "Swapped them."])
    code, lines, msgs = headless(git_repo, model, full_auto(edit_format="tool"), capsys)
    assert code == 0
    assert isinstance(msgs[0], SystemMessage) and msgs[0].subtype == "init"
    init = msgs[0].data
    assert init["cwd"] == str(git_repo) and "read_file" in init["tools"] and init["model"]
    assert isinstance(msgs[-1], ResultMessage)
    uses = [b for m in msgs if isinstance(m, AssistantMessage) for b in m.content
            if isinstance(b, ToolUseBlock)]
    results = [b for m in msgs if isinstance(m, UserMessage) for b in m.content
               if isinstance(b, ToolResultBlock)]
    assert [u.name for u in uses] == ["read_file", "edit_file"]
    assert uses[0].input == {"path": "calc.py"}
    assert [r.tool_use_id for r in results] == [u.id for u in uses]
    assert all(r.is_error is False for r in results) and "return a + b" in results[0].content
    texts = [b.text for m in msgs if isinstance(m, AssistantMessage) for b in m.content
             if isinstance(b, TextBlock)]
    assert texts == ["Let me look.", "Swapped them."]
    res = msgs[-1]
    assert (res.subtype, res.is_error, res.num_turns, res.result) == ("success", False, 3, "Swapped them.")
    assert res.session_id == init["session_id"] and res.duration_ms >= 0
    assert res.usage["output_tokens"] > 0 and res.usage["cache_read_input_tokens"] > 0
    ours = lines[-1]["spec_agent"]
    assert ours["stop_reason"] == "answered" and ours["usage"]["decode_tps"] > 0
    assert "acceptance_rate" in ours["usage"] and "cache_hit_rate" in ours["usage"]
    turn = next(x for x in lines if x["type"] == "assistant" and "spec_agent" in x)
    assert turn["spec_agent"]["decode_tps"] > 0 and "acceptance_rate" in turn["spec_agent"]


def test_an_error_parses_as_an_error_result(git_repo, capsys):
    from test_exit_codes import EndingModel

    code, _, msgs = headless(git_repo, EndingModel([READ, "x"], "error"), full_auto(), capsys)
    res = msgs[-1]
    assert code == 1 and isinstance(res, ResultMessage)
    assert (res.subtype, res.is_error) == ("error_during_execution", True)
    assert "server went away" in res.errors[0]


def test_a_cancel_parses_as_an_error_result(git_repo, capsys):
    code, lines, msgs = headless(git_repo, ScriptedModel([READ, INTERRUPT]), full_auto(), capsys)
    res = msgs[-1]
    assert code == 130 and isinstance(res, ResultMessage) and res.is_error
    assert res.subtype == "error_during_execution" and lines[-1]["spec_agent"]["stop_reason"] == "cancelled"


def test_a_run_that_changed_nothing_asked_to_is_not_a_success(git_repo, capsys):
    code, lines, msgs = headless(git_repo, ScriptedModel(["The code is already correct."]),
                                 full_auto(), capsys, task="Fix the add function in calc.py.")
    res = msgs[-1]
    assert code == 5 and isinstance(res, ResultMessage) and res.is_error
    assert res.subtype == "error_during_execution"
    assert lines[-1]["spec_agent"]["stop_reason"] == "no_change"


def test_max_turns_and_denied_approval_in_claude_terms(git_repo, capsys):
    code, _, msgs = headless(git_repo, ScriptedModel([READ] * 3), full_auto(max_turns=2), capsys)
    assert code == 3 and msgs[-1].subtype == "error_max_turns" and msgs[-1].num_turns == 2
    cfg = Config(approval_mode="suggest", edit_format="tool", attach_mentioned=False)
    code, _, msgs = headless(git_repo, ScriptedModel([EDIT]), cfg, capsys)
    denied = msgs[-1].permission_denials
    assert code == 4 and denied[0]["tool_name"] == "edit_file" and denied[0]["tool_input"]["path"] == "calc.py"
    results = [b for m in msgs if isinstance(m, UserMessage) for b in m.content]
    assert results[-1].is_error and "not approved" in results[-1].content


def user_line(text: str) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": text},
                       "parent_tool_use_id": None, "session_id": ""}) + "\n"


def test_two_messages_on_stdin_are_one_conversation(git_repo, capsys):
    model = ScriptedModel([READ, "It adds.", "It subtracts too."])
    stdin = ('{"type": "control_request", "request_id": "r1", "request": {"subtype": "initialize"}}\n'
             + user_line("what does add do?") + user_line("and sub?"))
    code, lines, msgs = headless(git_repo, model, full_auto(), capsys, task=None, stdin=stdin)
    assert code == 0
    assert lines[0] == {"type": "control_response",
                        "response": {"subtype": "success", "request_id": "r1",
                                     "response": {"commands": [], "models": []}}}
    results = [m for m in msgs if isinstance(m, ResultMessage)]
    assert [r.result for r in results] == ["It adds.", "It subtracts too."]
    assert results[0].session_id == results[1].session_id
    second = model.seen[-1]  # the second message's turn saw the first one's history
    assert [m["content"] for m in second if m["role"] == "user"][:1] == ["what does add do?"]
    assert second[-1]["content"] == "and sub?"


@pytest.mark.parametrize("stdin,why", [
    ("not json\n", "stdin line 1: not JSON"),
    ('{"type": "user", "message": {"content": [{"type": "image"}]}}\n', "only text content"),
    ('{"type": "assistant"}\n', "unknown message type 'assistant'"),
    ('{"type": "user", "message": {"content": "  "}}\n', "a non-empty string"),
    ("", "no user message on stdin"),
])
def test_bad_stdin_is_one_error_and_exit_2(git_repo, capsys, stdin, why):
    args = SimpleNamespace(repo=git_repo, output_format="stream-json", stats=False,
                           input_format="stream-json")
    assert run_headless(None, args, full_auto(), model=ScriptedModel([]), stdin=io.StringIO(stdin)) == 2
    out, err = capsys.readouterr()
    assert why in err and err.count("\n") == 1
    last = json.loads(out.splitlines()[-1])  # a client waiting for a result gets one
    assert last["type"] == "result" and last["is_error"] and last["subtype"] == "error_during_execution"
    assert why in last["errors"][0]


def test_continue_and_resume_pick_up_the_saved_conversation(git_repo, capsys):
    first = ScriptedModel(["Noted: the number is 7."])
    code, lines, _ = headless(git_repo, first, full_auto(), capsys, task="remember 7")
    sid = lines[-1]["session_id"]
    again = ScriptedModel(["It was 7."])
    code, lines, _ = headless(git_repo, again, full_auto(), capsys, task="which number?",
                              continue_last=True)
    assert code == 0 and lines[-1]["session_id"] == sid
    users = [m["content"] for m in again.seen[0] if m["role"] == "user"]
    assert users == ["remember 7", "which number?"]
    third = ScriptedModel(["Still 7."])
    headless(git_repo, third, full_auto(), capsys, task="sure?", resume=sid)
    assert [m["content"] for m in third.seen[0] if m["role"] == "user"][-3:] == \
        ["remember 7", "which number?", "sure?"]


def test_cli_refuses_mixed_resume_flags_and_task_with_stream_input(tmp_path):
    import subprocess

    for argv, why in ((["-p", "x", "-c", "--resume", "a"], "either -c/--continue or --resume"),
                      (["-p", "x", "--input-format", "stream-json"], "give no TASK to -p"),
                      (["-p", "x", "--system-prompt", "be terse"], "--system-prompt")):
        r = subprocess.run([sys.executable, "-m", "agent.cli", "-C", str(tmp_path), *argv],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and why in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_the_sdk_drives_spec_agent_as_its_cli(git_repo, tmp_path):
    """claude-agent-sdk's query() with cli_path = spec-agent: its flags, its initialize
    control request, one user message on stdin, our stream-json lines back, a clean exit."""
    import os
    from pathlib import Path

    import anyio
    from claude_agent_sdk import ClaudeAgentOptions, query

    tests = Path(__file__).parent
    cli = tmp_path / "spec-agent"
    cli.write_text(f"#!/bin/sh\nexec {sys.executable} {tests / 'scripted_cli.py'} \"$@\"\n")
    cli.chmod(0o755)
    env = {"SPEC_AGENT_HOME": str(tmp_path / "home"),
           "SCRIPTED_TURNS": json.dumps([READ, "calc.py adds and subtracts."]),
           "PYTHONPATH": os.pathsep.join([str(tests.parent), os.environ.get("PYTHONPATH", "")])}
    opts = ClaudeAgentOptions(cli_path=str(cli), cwd=str(git_repo), env=env, max_turns=5,
                              permission_mode="bypassPermissions")

    async def collect():
        return [m async for m in query(prompt="what is in calc.py?", options=opts)]

    msgs = anyio.run(collect)
    listed = [m for m in msgs if getattr(m, "subtype", "") == "context_attached"]
    assert len(listed) == 1 and "file listing" in listed[0].data["message"]  # with its size
    msgs = [m for m in msgs if m not in listed]
    kinds = [type(m).__name__ for m in msgs]
    assert kinds == ["SystemMessage", "AssistantMessage", "UserMessage", "AssistantMessage",
                     "ResultMessage"], kinds
    assert msgs[0].data["permissionMode"] == "full-auto" and msgs[0].data["cwd"] == str(git_repo)
    assert msgs[1].content[0].name == "read_file" and "def add" in msgs[2].content[0].content
    assert msgs[-1].result == "calc.py adds and subtracts." and msgs[-1].subtype == "success"


def test_an_interrupt_control_request_cancels_the_running_message(git_repo, capsys):
    """The SDK's interrupt(): a control_request on stdin while a message runs cancels it."""
    import os
    import time
    from dataclasses import replace

    from scripted import fake_stats

    from agent.events import TextDelta

    read_fd, write_fd = os.pipe()
    writer = os.fdopen(write_fd, "w")
    writer.write(user_line("count to a million"))
    writer.flush()

    class Waits(ScriptedModel):
        def generate(self, messages, cancel=None):
            self.seen.append(messages)
            writer.write(json.dumps({"type": "control_request", "request_id": "int1",
                                     "request": {"subtype": "interrupt"}}) + "\n")
            writer.close()  # then end of input
            yield TextDelta("1, 2, 3", ())
            end = time.monotonic() + 10
            while not cancel.cancelled and time.monotonic() < end:
                time.sleep(0.01)
            yield replace(fake_stats(), finish_reason="cancelled" if cancel.cancelled else "stop")

    args = SimpleNamespace(repo=git_repo, output_format="stream-json", stats=False,
                           input_format="stream-json")
    with os.fdopen(read_fd) as stdin:
        code = run_headless(None, args, full_auto(), model=Waits([]), stdin=stdin)
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert code == 130
    assert {"type": "control_response", "response": {"subtype": "success", "request_id": "int1",
                                                     "response": {}}} in lines
    res = parse_message(lines[-1])
    assert isinstance(res, ResultMessage) and res.is_error
    assert lines[-1]["spec_agent"]["stop_reason"] == "cancelled"

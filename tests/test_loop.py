"""The conversation with a scripted model: turns, tool results as data, approvals, outputs."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from scripted import (INTERRUPT, ScriptedModel, call, conversation, full_auto, git, git_repo,  # noqa: F401
                      plain_dir)

from tools.denylist import denylisted
from agent.config import Config
from agent.events import (AgentResult, ApprovalRequired, AssistantMessage, RunStopped,
                          ToolCallFinished, ToolCallStarted, TurnStats)
from agent.core.callformat import parse_calls, strip_calls
from agent.core.prompt import system_prompt
from agent.ui.render import Renderer

READ = call("read_file", path="calc.py")
EDIT = call("edit_file", path="calc.py", edits=[{"old": "return a + b", "new": "return b + a"}])


def run(root, turns, cfg=None, approver=None):
    model = ScriptedModel(turns)
    conv = conversation(root, model, cfg, approver)
    return list(conv.send("swap the operands in add")), model


def finished(events):
    return [e for e in events if isinstance(e, ToolCallFinished)]


def test_read_edit_answer(git_repo):
    events, model = run(git_repo, ["Let me look.\n" + READ, EDIT, "Swapped them."])
    result = events[-1]
    assert isinstance(result, AgentResult) and not result.is_error
    assert result.result == "Swapped them." and result.num_turns == 3
    assert [e.name for e in events if isinstance(e, ToolCallStarted)] == ["read_file", "edit_file"]
    assert all(e.ok for e in finished(events))
    assert "return b + a" in (git_repo / "calc.py").read_text()
    # the file content reached the model, inside a tool result
    assert "def add(a, b):" in model.seen[1][-1]["content"]
    assert [e.text for e in events if isinstance(e, AssistantMessage)][0] == "Let me look."


def test_conversation_is_append_only(git_repo):
    _, model = run(git_repo, [READ, EDIT, "ok"])
    for earlier, later in zip(model.seen, model.seen[1:]):
        assert later[: len(earlier)] == earlier and len(later) == len(earlier) + 2


def test_tool_errors_are_data_for_the_model(git_repo):
    bad_edit = call("edit_file", path="calc.py", edits=[{"old": "return a+b", "new": "x"}])
    events, model = run(git_repo, [bad_edit, "<tool_call>{not json</tool_call>", call("nope"), "I give up."])
    assert [e.ok for e in finished(events)] == [False, False, False]
    results = [m[-1]["content"] for m in model.seen[1:]]
    assert "not found" in results[0] and "closest text" in results[0]
    assert "not valid JSON" in results[1]
    assert "unknown tool 'nope'" in results[2]
    # (the message asked for a change and the only edit failed: the work is not done)
    assert events[-1].is_error and events[-1].result == "I give up."
    assert events[-1].stop_reason == "edit_failed" and "not found in calc.py" in events[-1].error


def test_max_turns_stops_the_run(git_repo):
    events, _ = run(git_repo, [READ] * 5, full_auto(max_turns=2))
    stop = next(e for e in events if isinstance(e, RunStopped))
    assert stop.reason == "max_turns" and events[-1].num_turns == 2 and events[-1].is_error  # did not finish


def test_suggest_mode_without_approver_stops_before_editing(git_repo):
    before = (git_repo / "calc.py").read_text()
    events, _ = run(git_repo, [READ, EDIT, "done"], Config(approval_mode="suggest"))
    assert any(isinstance(e, ApprovalRequired) and e.name == "edit_file" for e in events)
    assert events[-1].is_error and "--yes" in events[-1].error
    assert (git_repo / "calc.py").read_text() == before


def test_auto_edit_mode_edits_but_asks_for_shell(git_repo):
    events, _ = run(git_repo, [EDIT, call("run_shell", command="touch ran.txt"), "done"],
                    Config(approval_mode="auto-edit"))
    assert "return b + a" in (git_repo / "calc.py").read_text()
    assert any(isinstance(e, ApprovalRequired) and e.name == "run_shell" for e in events)
    assert not (git_repo / "ran.txt").exists()


@pytest.mark.parametrize("command", ["rm -rf / ; touch ran.txt", "git push --force; touch ran.txt",
                                     "echo x > /tmp/outside-spec-agent.txt; touch ran.txt"])
def test_denylisted_command_blocked_even_in_full_auto(git_repo, command):
    events, _ = run(git_repo, [call("run_shell", command=command), "done"])
    ask = [e for e in events if isinstance(e, ApprovalRequired)]
    assert ask and ask[0].reason.startswith("destructive")
    assert events[-1].is_error and not (git_repo / "ran.txt").exists()


DESTRUCTIVE = [
    "git checkout .", "git restore .", "git restore src/", "git checkout -- calc.py",
    "git checkout calc.py", "git checkout HEAD~1 -- calc.py", "git checkout -f main",
    "git reset --hard", "git reset HEAD --hard", "git -C . reset --hard HEAD~1",
    "git stash", "git stash -u", "git stash push -m wip", "git stash drop", "git stash clear",
    "git clean -fd", "git clean -xdf", "git clean -d -f", "git push -f", "git push origin +main",
    "rm -rf /", "rm -rf ..", "rm -rf '/'", 'rm -rf "$HOME"', "rm -fr ~", "rm -r -f /",
    "rm -rf .", "rm -rf ./", "rm -rf *", "rm -rf .git", 'rm -rf "$DIR"', "/bin/rm -rf /",
    "env X=1 rm -rf /", "echo $(rm -rf /)", 'bash -c "rm -rf /"', "cd /tmp && rm -rf x",
    "cp x /etc/passwd", "mv calc.py /tmp/", "tee -a /etc/hosts < x", "echo hi >> ~/.bashrc",
    "cp a b && cp x /etc/passwd", "find / -name x -delete", "sudo ls",
]
HARMLESS = [
    "git status", "git diff", "git log --oneline", "git checkout main", "git checkout -b new",
    "git restore --staged calc.py", "git stash list", "git stash pop", "git clean -n",
    "git push origin main", "git commit -am wip", "rm build/tmp.txt", "rm -rf build", "rm *.pyc",
    "cp calc.py calc2.py", "mv a b", "echo x > out.txt", "echo x 2>&1 | tail -1",
    "python -m pytest -q 2>/dev/null", "find . -name '*.pyc' -delete", "cd sub && rm x.txt",
    "grep -rn foo .", "rm .git/index.lock",
]


@pytest.mark.parametrize("command", DESTRUCTIVE)
def test_denylist_catches_work_destroying_commands(git_repo, command):
    assert denylisted(command, git_repo), command


@pytest.mark.parametrize("command", HARMLESS)
def test_denylist_lets_everyday_commands_through(git_repo, command):
    (git_repo / "build").mkdir(exist_ok=True)
    assert denylisted(command, git_repo) == ""


def test_full_auto_runs_shell(git_repo):
    events, _ = run(git_repo, [call("run_shell", command="touch ran.txt"), "done"])
    assert (git_repo / "ran.txt").exists() and finished(events)[0].ok


def test_approver_can_deny(git_repo):
    asked = []
    events, model = run(git_repo, [EDIT, "fine"], Config(approval_mode="suggest"),
                        approver=lambda req: asked.append(req.name) or "no")
    assert asked == ["edit_file"] and "did not approve" in model.seen[1][-1]["content"]
    assert "return a + b" in (git_repo / "calc.py").read_text()
    assert events[-1].stop_reason == "no_change" and events[-1].is_error  # (nothing was done)


def test_system_prompt_lists_tools_and_agents_md(git_repo):
    (git_repo / "AGENTS.md").write_text("Always use tabs.\n")
    prompt = system_prompt(git_repo)
    for name in ("read_file", "edit_file", "run_shell", "git_diff"):
        assert f"- {name}:" in prompt
    assert '"old":{"type":"string"' in prompt and "Always use tabs." in prompt


def test_parse_calls_is_forgiving():
    text = ('a <tool_call>\n{"name": "read_file", "parameters": {"path": "x"}}\n</tool_call> b '
            '<tool_call>{"name":"grep","arguments":"{\\"pattern\\": \\"y\\"}"}')
    calls = parse_calls(text)
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("read_file", {"path": "x"}, ""), ("grep", {"pattern": "y"}, "")]
    assert strip_calls(text) == "a  b"
    assert "invalid arguments" in parse_calls(call("read_file", line=3))[0].error


# ---- -p outputs -------------------------------------------------------------------------------


def render(events, fmt):
    out, err = io.StringIO(), io.StringIO()
    r = Renderer(fmt, out, err, stats=True)
    for ev in events:
        r.handle(ev)
    return out.getvalue(), err.getvalue()


def test_json_output_is_one_object_with_usage(git_repo):
    events, _ = run(git_repo, [READ, EDIT, "Swapped."])
    out, _ = render(events, "json")
    obj = json.loads(out)
    assert obj["type"] == "result" and obj["is_error"] is False and obj["num_turns"] == 3
    assert obj["result"] == "Swapped." and obj["stop_reason"] == "answered"
    u = obj["usage"]
    assert u["output_tokens"] > 0 and u["decode_tps"] > 0 and u["tool_calls"] == 2
    assert u["acceptance_rate"] == pytest.approx(0.5) and u["cache_hit_rate"] == pytest.approx(0.8)


def test_stream_json_lines_carry_each_step(git_repo):
    events, _ = run(git_repo, [READ, "done"])
    out, _ = render(events, "events")
    lines = [json.loads(x) for x in out.splitlines()]
    types = [x["type"] for x in lines]
    for t in ("assistant_message", "tool_call_started", "tool_call_finished", "turn_stats", "result"):
        assert t in types
    assert types[-1] == "result" and lines[-1]["num_turns"] == 2
    stats = next(x for x in lines if x["type"] == "turn_stats")
    for key in ("decode_tps", "prefill_tps", "acceptance_rate", "cache_hit_rate", "generated_tokens"):
        assert key in stats
    call_line = next(x for x in lines if x["type"] == "tool_call_started")
    assert call_line["name"] == "read_file" and call_line["arguments"] == {"path": "calc.py"}


def test_text_output_prints_answer_and_progress(git_repo):
    events, _ = run(git_repo, [READ, "All good."])
    out, err = render(events, "text")
    assert out == "All good.\n" and "→ read_file" in err and "decode" in err


# ---- run_task exit codes (scripted model instead of the engine) -------------------------------


@pytest.fixture
def scripted_run_task():
    def go(root, turns, cfg, fmt="json"):
        from agent.commands import run_task

        args = SimpleNamespace(repo=root, output_format=fmt, stats=False)
        return run_task("swap", args, cfg, model=ScriptedModel(turns))
    return go


def test_run_task_exit_codes(git_repo, scripted_run_task, capsys):
    assert scripted_run_task(git_repo, [READ, "ok"], full_auto()) == 0
    assert json.loads(capsys.readouterr().out)["is_error"] is False
    assert scripted_run_task(git_repo, [EDIT, "ok"], Config(approval_mode="suggest")) == 4
    obj = json.loads(capsys.readouterr().out)
    assert obj["is_error"] and obj["stop_reason"] == "approval_required"
    assert scripted_run_task(git_repo, [READ, INTERRUPT], full_auto()) == 130
    obj = json.loads(capsys.readouterr().out)
    assert obj["is_error"] and obj["stop_reason"] == "cancelled"

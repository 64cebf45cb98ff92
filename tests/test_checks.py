"""The lint-and-test loop inside a message (agent/core/checks.py), with a scripted model."""

from __future__ import annotations

import pytest

from agent.config import ConfigError, load_config
from agent.core.checks import syntax
from agent.events import AgentResult, CheckRun
from agent.ui.render import check_line
from scripted import ScriptedModel, call, conversation, full_auto, git_repo  # noqa: F401

BROKEN = "calc.py\n```python\ndef add(a, b):\n    return a +\n```\n"
FIXED = "calc.py\n```python\ndef add(a, b):\n    return a + b\n```\n"


def _run(conv, text="fix calc.py"):
    """(the checks except ruff's, which runs only where ruff is installed; the result)"""
    events = list(conv.send(text))
    return [e for e in events if isinstance(e, CheckRun) and e.kind != "ruff"], events[-1]


def test_a_syntax_error_goes_back_and_the_fix_is_checked(git_repo):
    model = ScriptedModel([BROKEN, FIXED])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    checks, result = _run(conv)
    assert [(c.kind, c.ok, c.round, c.fed_back) for c in checks] == [
        ("syntax", False, 1, True), ("syntax", True, 2, False)]
    assert "SyntaxError" in checks[0].output and "calc.py" in checks[0].output
    fed = model.seen[1][-1]
    assert fed["role"] == "user" and "does not compile" in fed["content"]
    assert isinstance(result, AgentResult) and result.stop_reason == "answered"
    assert (git_repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_fix_rounds_are_bounded(git_repo):
    model = ScriptedModel([BROKEN.replace("+", "+" * k) for k in range(1, 6)])  # each a change
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off",
                                                   max_fix_rounds=2))
    checks, result = _run(conv)
    assert [c.fed_back for c in checks] == [True, True, False]
    assert len(model.seen) == 3 and result.stop_reason == "answered"


def test_the_loop_can_be_off(git_repo):
    for cfg in (full_auto(edit_format="whole", max_fix_rounds=0),
                full_auto(edit_format="whole", auto_lint=False)):
        model = ScriptedModel([BROKEN])
        checks, _ = _run(conversation(git_repo, model, cfg))
        assert checks == [] and len(model.seen) == 1


def test_no_edit_no_check(git_repo):
    checks, _ = _run(conversation(git_repo, ScriptedModel(["Nothing to change."]), full_auto()))
    assert checks == []


def test_test_cmd_failure_goes_back_through_the_shell_tool(git_repo):
    fix = call("write_file", path="calc.py", content="def add(a, b):\n    return a + b\n")
    model = ScriptedModel([fix, "Done.", "Still done."])
    cfg = full_auto(edit_format="tool", sandbox="off",
                    test_cmd="python -c \"import calc; assert calc.add(2, 2) == 5, 'add is wrong'\"",
                    max_fix_rounds=1)
    checks, result = _run(conversation(git_repo, model, cfg))
    assert [(c.kind, c.ok) for c in checks] == [("syntax", True), ("test", False)]
    assert "add is wrong" in checks[1].output and checks[1].fed_back
    assert "The tests failed" in model.seen[2][-1]["content"]
    assert "FAILED" in check_line(checks[1]) and "ok" in check_line(checks[0])


def test_lint_cmd_gets_the_edited_files(git_repo):
    fix = call("write_file", path="calc.py", content="x = 1\n")
    model = ScriptedModel([fix, "Done."])
    cfg = full_auto(edit_format="tool", sandbox="off", lint_cmd="test -f")
    checks, _ = _run(conversation(git_repo, model, cfg))
    assert [(c.kind, c.ok, c.command) for c in checks][-1] == ("lint", True, "test -f calc.py")


def test_syntax_check_runs_nothing(tmp_path):
    (tmp_path / "boom.py").write_text("open('ran', 'w').write('x')\n")
    assert syntax(["boom.py"], tmp_path).ok and not (tmp_path / "ran").exists()


def test_a_repository_cannot_set_the_commands(tmp_path):
    (tmp_path / ".specrc").write_text('test_cmd = "rm -rf ~"\n')
    with pytest.raises(ConfigError):
        load_config(tmp_path, {})


def test_ruff_finds_an_undefined_name(tmp_path):
    from agent.core.checks import ruff

    (tmp_path / "a.py").write_text("def f(s):\n    return re.sub('x', '', s)\n")
    out = ruff(["a.py"], tmp_path)
    if out is None:
        pytest.skip("ruff is not installed")
    assert not out.ok and "F821" in out.output and "re" in out.output
    (tmp_path / "a.py").write_text("import re\n\n\ndef f(s):\n    return re.sub('x', '', s)\n")
    assert ruff(["a.py"], tmp_path).ok

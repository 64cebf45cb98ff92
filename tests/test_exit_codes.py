"""Each row of the exit-code table (agent/exit_codes.py) is what a run that ends that way exits
with, and `--output-format json` carries the stop_reason; --help and docs/configuration.md show the
table."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from scripted import (INTERRUPT, SAMPLE, ScriptedModel, call, fake_stats, full_auto,  # noqa: F401
                      git_repo)

from agent import exit_codes
from agent.backends.base import ModelError
from agent.config import Config
from agent.events import TextDelta

READ = call("read_file", path="calc.py")
EDIT = call("edit_file", path="calc.py", edits=[{"old": "return a + b", "new": "return b + a"}])
ROOT = Path(__file__).parents[1]


class EndingModel(ScriptedModel):
    """A scripted model whose last turn ends with `finish` ("length", "repetition") or, with
    finish="error", raises the ModelError a failing backend raises."""

    def __init__(self, turns, finish):
        super().__init__(turns)
        self.finish = finish

    def generate(self, messages, cancel=None):
        if len(self.turns) > 1:
            yield from super().generate(messages, cancel)
            return
        if self.finish == "error":
            raise ModelError("the server went away")
        text = self.turns.pop(0)
        yield TextDelta(text, ())
        yield replace(fake_stats(generated=4), finish_reason=self.finish)


def run_json(root, model, cfg, capsys, task: str = "swap") -> tuple[int, dict]:
    from agent.commands import run_task

    args = SimpleNamespace(repo=root, output_format="json", stats=False)
    code = run_task(task, args, cfg, model=model)
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path / "home"))  # saved conversations


def test_row_finished(git_repo, capsys):
    code, obj = run_json(git_repo, ScriptedModel([READ, "All good."]), full_auto(), capsys)
    assert (code, obj["stop_reason"], obj["is_error"], obj["result"]) == (0, "answered", False, "All good.")


def test_row_error(git_repo, capsys):
    code, obj = run_json(git_repo, EndingModel([READ, "x"], "error"), full_auto(), capsys)
    assert (code, obj["stop_reason"], obj["is_error"]) == (1, "error", True)
    assert "server went away" in obj["error"]


def test_row_usage():
    r = subprocess.run([sys.executable, "-m", "agent.cli", "--max-turns", "0", "-p", "hi"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "'max_turns' must be >= 1" in r.stderr and not r.stdout


def test_row_did_not_finish_max_turns(git_repo, capsys):
    code, obj = run_json(git_repo, ScriptedModel([READ] * 5), full_auto(max_turns=2), capsys)
    assert (code, obj["stop_reason"], obj["num_turns"], obj["is_error"]) == (3, "max_turns", 2, True)
    assert "2 turns" in obj["error"]


def test_row_did_not_finish_max_tokens(git_repo, capsys):
    model = EndingModel([READ, "The answer is cut he"], "length")
    code, obj = run_json(git_repo, model, full_auto(max_tokens=4), capsys)
    assert (code, obj["stop_reason"], obj["is_error"]) == (3, "max_tokens", True)
    assert "max_tokens (4)" in obj["error"]


def test_row_did_not_finish_repetition(git_repo, capsys):
    model = EndingModel(["ab ab ab ab"], "repetition")
    code, obj = run_json(git_repo, model, full_auto(), capsys)
    assert (code, obj["stop_reason"], obj["is_error"]) == (3, "repetition", True)


def test_row_needs_approval(git_repo, capsys):
    model = ScriptedModel([EDIT, "ok"])
    code, obj = run_json(git_repo, model, Config(approval_mode="suggest", edit_format="tool"), capsys)
    assert (code, obj["stop_reason"], obj["is_error"]) == (4, "approval_required", True)


FIX = "Fix the add function in calc.py."


def test_row_not_done_no_change(git_repo, capsys):
    code, obj = run_json(git_repo, ScriptedModel(["The code is already correct."]), full_auto(),
                         capsys, FIX)
    assert (code, obj["stop_reason"], obj["is_error"]) == (5, "no_change", True)
    assert "no file changed" in obj["error"]


def test_row_not_done_no_change_is_not_said_of_a_question(git_repo, capsys):
    code, obj = run_json(git_repo, ScriptedModel(["It adds."]), full_auto(), capsys,
                         "What does add in calc.py do?")
    assert (code, obj["stop_reason"], obj["is_error"]) == (0, "answered", False)


def test_row_not_done_edit_failed(git_repo, capsys):
    broken = ("calc.py\n```python\ndef add(a, b):\n    return (a + b\n\n\n"
              "def sub(a, b):\n    return a - b\n```\n")
    before = (git_repo / "calc.py").read_text()
    code, obj = run_json(git_repo, ScriptedModel([broken, "Done."]), full_auto(), capsys, FIX)
    assert (code, obj["stop_reason"], obj["is_error"]) == (5, "edit_failed", True)
    assert "does not parse" in obj["error"]
    assert (git_repo / "calc.py").read_text() == before


def test_row_not_done_edit_failed_where_the_os_refuses_the_write(git_repo, capsys, monkeypatch):
    """A file the OS will not let us replace (e.g. `chattr +i`): the failure is the run's."""
    import errno

    import tools.write_file as wf

    def refuse(full, content, root):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(wf, "atomic_write", refuse)
    fixed = "calc.py\n```python\n" + SAMPLE["calc.py"].replace("a + b", "b + a") + "```\n"
    code, obj = run_json(git_repo, ScriptedModel([fixed, "Done."]), full_auto(), capsys, FIX)
    assert (code, obj["stop_reason"], obj["is_error"]) == (5, "edit_failed", True)
    assert "Operation not permitted" in obj["error"]
    assert (git_repo / "calc.py").read_text() == SAMPLE["calc.py"]


def test_row_not_done_checks_failed(git_repo, capsys):
    fix = call("write_file", path="calc.py", content=SAMPLE["calc.py"].replace("a + b", "b + a"))
    cfg = full_auto(edit_format="tool", sandbox="off", max_fix_rounds=1,
                    test_cmd="python -c \"import calc; assert calc.add(2, 2) == 5, 'wrong'\"")
    code, obj = run_json(git_repo, ScriptedModel([fix, "Done.", "Still done."]), cfg, capsys, FIX)
    assert (code, obj["stop_reason"], obj["is_error"]) == (5, "checks_failed", True)
    assert "test" in obj["error"]


def test_row_cancelled(git_repo, capsys):
    code, obj = run_json(git_repo, ScriptedModel([READ, INTERRUPT]), full_auto(), capsys)
    assert (code, obj["stop_reason"], obj["is_error"]) == (130, "cancelled", True)


def test_row_output_closed(monkeypatch):
    from agent import cli

    class Closed(io.StringIO):
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert cli.main(["models", "list"]) == 141


def test_every_row_has_a_test_and_every_stop_reason_is_documented():
    from agent.events import RunStopped

    names = [n for n in globals() if n.startswith("test_row_")]
    for row in exit_codes.TABLE:
        assert any(n.startswith("test_row_" + "_".join(row.name.split())) for n in names), row
    assert all(f"`{r}`" in RunStopped.__doc__ for r in exit_codes.STOP_REASONS)


def test_help_and_the_docs_show_the_table():
    r = subprocess.run([sys.executable, "-m", "agent.cli", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0
    for row in exit_codes.TABLE:
        assert f"  {row.code:<4} {row.name}:" in r.stdout
    assert exit_codes.markdown() in (ROOT / "docs" / "configuration.md").read_text()

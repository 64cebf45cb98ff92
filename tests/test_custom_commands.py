"""Custom slash commands from Markdown files: front matter, `$ARGUMENTS` and `$1`, the
repository's over the user's, built-in names kept; the REPL sends their text and completes
their names."""

from __future__ import annotations

from pathlib import Path

import pytest
from prompt_toolkit.document import Document
from scripted import SAMPLE, ScriptedModel, make_repo
from test_repl import make, repls  # noqa: F401

from agent.ui import slash
from agent.ui.custom_commands import load, parse_file
from agent.ui.repl import ReplCompleter


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    root = make_repo(tmp_path / "repo", SAMPLE)
    project = root / ".spec-agent" / "commands"
    (project / "git").mkdir(parents=True)
    (project / "review.md").write_text("---\ndescription: Review a file\nargument-hint: [file]\n"
                                       "---\nReview $ARGUMENTS carefully.\n")
    (project / "git" / "log.md").write_text("Summarise the last $1 commits of $2.\n")
    (project / "help.md").write_text("A file may not replace /help.\n")
    user = tmp_path / "xdg" / "spec-agent" / "commands"
    user.mkdir(parents=True)
    (user / "review.md").write_text("the user's review, shadowed by the project's\n")
    (user / "todo.md").write_text("# List the TODOs\nList every TODO in the repository.\n")
    return root


def test_files_become_commands(repo):
    found = load(repo, set(slash.COMMANDS))
    assert sorted(found) == ["git:log", "review", "todo"]
    assert found["review"].expand("calc.py") == "Review calc.py carefully."
    assert found["review"].description == "Review a file (project)" and found["review"].hint == "[file]"
    assert found["git:log"].expand("3 main") == "Summarise the last 3 commits of main."
    assert found["todo"].description == "List the TODOs (user)"
    assert found["todo"].expand("in tools/") == ("# List the TODOs\nList every TODO in the "
                                                 "repository.\n\nin tools/")
    assert parse_file("no front matter") == ({}, "no front matter")


def test_repl_sends_a_custom_command_and_completes_it(repo, repls):
    model = ScriptedModel(["Reviewed."])
    repl = make(repo, [], model=model)
    repls.append(repl)
    assert repl.handle_line("/review calc.py")
    assert model.seen[-1][-1]["content"] == "Review calc.py carefully."
    assert "Reviewed." in repl.out.getvalue()
    names = [c.text for c in ReplCompleter(repl.rt.ctx).get_completions(Document("/re"), None)]
    assert names == ["/review"]
    assert repl.handle_line("/help") and "/git:log" in repl.out.getvalue()

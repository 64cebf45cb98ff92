"""Git safety with a scripted model in temp repos: dirty work kept, auto-commit, undo."""

from __future__ import annotations

import pytest
from scripted import ScriptedModel, call, conversation, full_auto, git, git_repo, plain_dir  # noqa: F401

from agent.events import AgentResult, GitAction, ToolCallFinished, Warning
from agent.core.git import TRAILER, GitGuard, GitSafetyError, is_agent_commit

EDIT = call("edit_file", path="calc.py", edits=[{"old": "return a + b", "new": "return b + a"}])


def run_agent(root, turns, **cfg):
    agent = conversation(root, ScriptedModel(turns), full_auto(**cfg))
    return list(agent.send("swap the operands in add"))


def head(root) -> str:
    return git(root, "rev-parse", "HEAD").strip()


def test_auto_commit_marks_the_agent_and_undo_restores(git_repo):
    before, text = head(git_repo), (git_repo / "calc.py").read_text()
    events = run_agent(git_repo, [EDIT, "Done."])
    commits = [e for e in events if isinstance(e, GitAction) and e.action == "commit"]
    assert len(commits) == 1 and commits[0].files == ("calc.py",)
    msg = git(git_repo, "log", "-1", "--format=%B")
    assert TRAILER in msg and msg.startswith("spec-agent: swap the operands")
    assert git(git_repo, "status", "--porcelain") == ""
    out = GitGuard.open(git_repo).undo()
    assert "undid" in out and head(git_repo) == before
    assert (git_repo / "calc.py").read_text() == text


def test_dirty_user_file_is_committed_as_the_users_own(git_repo):
    (git_repo / "calc.py").write_text((git_repo / "calc.py").read_text() + "# my work\n")
    events = run_agent(git_repo, [EDIT, "Done."])
    assert any(isinstance(e, GitAction) and e.action == "protect" for e in events)
    subjects = git(git_repo, "log", "--format=%s", "-3").splitlines()
    assert subjects[1].startswith("Save uncommitted changes to calc.py")
    assert git(git_repo, "log", "-1", "--format=%an", "HEAD~1").strip() == "Test User"
    assert not is_agent_commit(git(git_repo, "log", "-1", "--format=%B", "HEAD~1"))
    assert "# my work" in git(git_repo, "show", "HEAD~1:calc.py")
    GitGuard.open(git_repo).undo()
    text = (git_repo / "calc.py").read_text()
    assert "# my work" in text and "return a + b" in text


def test_dirty_file_stash_mode(git_repo):
    (git_repo / "calc.py").write_text("# my rewrite\ndef add(a, b):\n    return a + b\n")
    run_agent(git_repo, [EDIT, "Done."], dirty_files="stash")
    assert "spec-agent: your changes to calc.py" in git(git_repo, "stash", "list")
    assert "# my rewrite" in git(git_repo, "stash", "show", "-p")


def test_dirty_file_refuse_mode(git_repo):
    dirty = "def add(a, b):\n    return a + b  # mine\n"
    (git_repo / "calc.py").write_text(dirty)
    events = run_agent(git_repo, [EDIT, "Done."], dirty_files="refuse")
    done = [e for e in events if isinstance(e, ToolCallFinished)]
    assert not done[0].ok and "uncommitted changes" in done[0].output
    assert (git_repo / "calc.py").read_text() == dirty
    assert git(git_repo, "log", "--format=%s").strip() == "initial"


def test_undo_refuses_when_the_user_committed_on_top(git_repo):
    run_agent(git_repo, [EDIT, "Done."])
    (git_repo / "README.md").write_text("# mine\n")
    git(git_repo, "commit", "-qam", "user work")
    top = head(git_repo)
    with pytest.raises(GitSafetyError, match="not spec-agent's"):
        GitGuard.open(git_repo).undo()
    assert head(git_repo) == top


def test_undo_refuses_a_user_commit(git_repo):
    with pytest.raises(GitSafetyError, match="not spec-agent's"):
        GitGuard.open(git_repo).undo()


def test_undo_keeps_unrelated_uncommitted_work(git_repo):
    run_agent(git_repo, [EDIT, "Done."])
    (git_repo / "README.md").write_text("# unsaved\n")
    GitGuard.open(git_repo).undo()
    assert (git_repo / "README.md").read_text() == "# unsaved\n"
    assert "return a + b" in (git_repo / "calc.py").read_text()


def test_undo_refuses_when_the_agents_files_changed_since(git_repo):
    run_agent(git_repo, [EDIT, "Done."])
    (git_repo / "calc.py").write_text("user edit after the agent\n")
    with pytest.raises(GitSafetyError, match="uncommitted changes"):
        GitGuard.open(git_repo).undo()
    assert (git_repo / "calc.py").read_text() == "user edit after the agent\n"


def test_auto_commit_off_leaves_edits_uncommitted(git_repo):
    run_agent(git_repo, [EDIT, "Done."], auto_commit=False)
    assert "calc.py" in git(git_repo, "status", "--porcelain")
    assert git(git_repo, "log", "--format=%s").strip() == "initial"


def test_outside_git_features_are_off_with_one_warning(plain_dir):
    back = call("edit_file", path="calc.py", edits=[{"old": "return b + a", "new": "return a + b"}])
    events = run_agent(plain_dir, [EDIT, back, "Done."])
    warnings = [e for e in events if isinstance(e, Warning)]
    assert len(warnings) == 1 and "not in a git repository" in warnings[0].message
    assert not any(isinstance(e, GitAction) for e in events)
    assert events[-1] == next(e for e in events if isinstance(e, AgentResult))
    assert "return a + b" in (plain_dir / "calc.py").read_text()
    with pytest.raises(GitSafetyError):
        GitGuard.open(plain_dir).undo()


def _ignore_env(root) -> None:
    (root / ".gitignore").write_text((root / ".gitignore").read_text() + ".env\n")
    git(root, "commit", "-qam", "ignore .env")
    (root / ".env").write_text("API_KEY=mine\n")


def test_ignored_user_file_is_refused_and_the_turn_still_commits(git_repo):
    _ignore_env(git_repo)
    both = call("write_file", path=".env", content="API_KEY=\n") + EDIT
    events = run_agent(git_repo, [both, "Done."])
    done = [e for e in events if isinstance(e, ToolCallFinished)]
    assert not done[0].ok and "ignored by git" in done[0].output and done[1].ok
    assert (git_repo / ".env").read_text() == "API_KEY=mine\n"
    assert not [e for e in events if isinstance(e, Warning)]
    assert git(git_repo, "show", "--name-only", "--format=", "HEAD").split() == ["calc.py"]


def test_new_file_in_ignored_folder_is_created_but_not_committed(git_repo):
    new = call("write_file", path="build/out.txt", content="1\n")
    again = call("write_file", path="build/out.txt", content="2\n")
    events = run_agent(git_repo, [new + EDIT, again, "Done."])
    assert all(e.ok for e in events if isinstance(e, ToolCallFinished))
    assert not [e for e in events if isinstance(e, Warning)]
    assert (git_repo / "build/out.txt").read_text() == "2\n"
    assert git(git_repo, "show", "--name-only", "--format=", "HEAD").split() == ["calc.py"]
    assert git(git_repo, "status", "--porcelain") == ""


def test_untracked_file_is_protected_whatever_show_untracked_files_says(git_repo):
    git(git_repo, "config", "status.showUntrackedFiles", "no")
    (git_repo / "notes.txt").write_text("my notes\n")
    run_agent(git_repo, [call("write_file", path="notes.txt", content="agent\n"), "Done."])
    assert git(git_repo, "show", "HEAD~1:notes.txt") == "my notes\n"
    assert (git_repo / "notes.txt").read_text() == "agent\n"


# ---- hygiene of the agent's own git commands ---------------------------------------------------


def _hook(path, marker) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch '{marker}'\n")
    path.chmod(0o755)


def test_no_hook_runs_for_the_agents_commits(git_repo, tmp_path):
    marker = tmp_path / "hooked"
    for name in ("pre-commit", "commit-msg", "post-commit", "reference-transaction"):
        _hook(git_repo / ".git/hooks" / name, marker)
    _hook(git_repo / "myhooks/post-commit", marker)
    (git_repo / "calc.py").write_text((git_repo / "calc.py").read_text() + "# dirty\n")  # protect commits too
    run_agent(git_repo, [EDIT, "Done."])
    git(git_repo, "config", "core.hooksPath", "myhooks")
    run_agent(git_repo, [call("write_file", path="new.txt", content="x\n"), "Done."])
    assert git(git_repo, "log", "--format=%s").count("\n") == 4  # save, edit, new.txt, initial
    assert not marker.exists()


def test_pathspecs_are_literal(git_repo):
    (git_repo / "f[1].py").write_text("agent's\n")
    (git_repo / "f1.py").write_text("user's\n")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "two files")
    (git_repo / "f1.py").write_text("user's uncommitted edit\n")
    (git_repo / "f[1].py").write_text("also dirty\n")
    run_agent(git_repo, [call("write_file", path="f[1].py", content="new\n"), "Done."])
    for rev in ("HEAD", "HEAD~1"):  # the agent's commit and the save of the user's f[1].py
        assert git(git_repo, "show", "--name-only", "--format=", rev).split() == ["f[1].py"]
    assert (git_repo / "f1.py").read_text() == "user's uncommitted edit\n"


def test_agent_commit_needs_a_parsed_trailer_and_a_record(git_repo):
    assert is_agent_commit(f"x\n\n{TRAILER}\n")
    assert not is_agent_commit(f"x\n\nquoting {TRAILER} in prose\n")
    assert not is_agent_commit(f"{TRAILER}\n")  # a subject line is not a trailer
    (git_repo / "README.md").write_text("# squashed\n")
    git(git_repo, "commit", "-qam", f"Squash of the agent's work\n\n{TRAILER}")
    guard = GitGuard.open(git_repo)
    assert not guard.is_agent_commit_id("HEAD")  # trailer, but the agent never recorded it
    with pytest.raises(GitSafetyError, match="not spec-agent's"):
        guard.undo()
    assert (git_repo / "README.md").read_text() == "# squashed\n"

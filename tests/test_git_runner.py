"""Every git process we start is hardened (tools/git.py): a repository whose config or hooks
were planted by a sandboxed command runs none of its programs when our own tools run git."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.core.git import GitGuard
from tools import ToolContext, git
from tools.git_diff import git_diff
from tools.git_status import git_status
from tools.list_files import list_files


def _sh(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A repository whose config names a program in every place git may run one."""
    repo, marks = tmp_path / "repo", tmp_path / "marks"
    repo.mkdir()
    marks.mkdir()
    _sh(repo, "init", "-q")
    _sh(repo, "config", "user.name", "u")
    _sh(repo, "config", "user.email", "u@x")
    (repo / "a.txt").write_text("one\n")
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n")
    _sh(repo, "add", "-A")
    _sh(repo, "commit", "-qm", "base")
    evil = repo / "evil.sh"  # a program inside the work tree, as a sandboxed command could write
    evil.write_text(f"#!/bin/sh\ntouch {marks}/$1\ncat\n")
    evil.chmod(0o755)
    hooks = repo / "hooks"
    hooks.mkdir()
    for hook in ("pre-commit", "post-commit", "post-checkout", "reference-transaction", "post-index-change"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marks}/{hook}\n")
        (hooks / hook).chmod(0o755)
    for key, value in (("core.hooksPath", str(hooks)), ("core.fsmonitor", f"{evil} fsmonitor"),
                       ("filter.evil.clean", f"{evil} clean"), ("filter.evil.smudge", f"{evil} smudge"),
                       ("filter.evil.process", f"{evil} process"), ("diff.evil.textconv", f"{evil} textconv"),
                       ("diff.evil.command", f"{evil} extdiff"), ("core.pager", f"{evil} pager"),
                       ("commit.gpgSign", "true"), ("gpg.program", f"{evil} gpg")):
        _sh(repo, "config", key, value)
    (repo / "a.txt").write_text("two\n")
    return repo, marks


def test_our_git_runs_nothing_a_repository_planted(planted):
    repo, marks = planted
    ctx = ToolContext(repo, in_git=True)
    assert git_status(ctx).ok and "a.txt" in git_status(ctx).output
    diff = git_diff(ctx)
    assert diff.ok and "-one" in diff.output and "+two" in diff.output
    assert "a.txt" in list_files(ctx).output
    guard = GitGuard.open(repo)
    assert guard.enabled and guard.is_dirty("a.txt")
    assert guard.protect("a.txt") == ""  # commits the user's change: hooks, signing, clean filter
    assert guard.commit_turn(["a.txt"], "t", 1) == ""  # nothing new to commit
    git.run(repo, "checkout", "-q", "HEAD~1", "--", "a.txt")  # smudge filter
    assert sorted(p.name for p in marks.iterdir()) == []


def test_the_same_repository_does_run_them_under_plain_git(planted):
    """The check above can fail: plain git in that repository runs the planted programs."""
    repo, marks = planted
    subprocess.run(["git", "status"], cwd=repo, capture_output=True)
    subprocess.run(["git", "diff"], cwd=repo, capture_output=True)
    assert {"fsmonitor", "clean"} & {p.name for p in marks.iterdir()}


def test_failures_and_timeouts_are_one_error(tmp_path):
    with pytest.raises(git.GitCommandError):
        git.run(tmp_path, "rev-parse", "HEAD")
    assert git.run(tmp_path / "missing", "status", check=False).returncode != 0
    assert git.toplevel(tmp_path) is None


def test_the_empty_hooks_folder_is_removed_when_the_process_exits(tmp_path):
    """Every process that runs git makes one empty folder for core.hooksPath; it must not
    stay behind in the temp dir (a CI job running the agent many times would collect them)."""
    code = "from tools import git; p = git.no_hooks_dir(); import os; print(p, os.path.isdir(p))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.split()
    assert out[1] == "True"
    assert not Path(out[0]).exists()

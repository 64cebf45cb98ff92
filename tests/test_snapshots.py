"""Snapshots before every action and `spec-agent undo`: end to end in full-auto (a scripted model
driving the real Conversation, tools and sandbox), then the real CLI entry restoring every
byte; plus what taking a snapshot must never touch, the branch rules and pruning."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from scripted import ScriptedModel, call, conversation, full_auto, git, git_repo  # noqa: F401

from agent.cli import main
from agent.core.snapshots import SnapshotError, SnapshotStore
from agent.events import ToolCallFinished
from tools import sandbox

BWRAP_OK, BWRAP_WHY = sandbox.available() if sys.platform.startswith("linux") else (False, "not Linux")
needs_bwrap = pytest.mark.skipif(not BWRAP_OK, reason=f"no working bubblewrap: {BWRAP_WHY}")


def tree_bytes(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file outside .git: content and mode (symlinks: their target)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel == ".git" or rel.startswith(".git/") or p.is_dir() and not p.is_symlink():
            continue
        data = str(p.readlink()).encode() if p.is_symlink() else p.read_bytes()
        out[rel] = (data, p.lstat().st_mode)
    return out


def state(root: Path) -> tuple:
    """What a user would compare: files, staged diff, HEAD, branch, stash list."""
    return (tree_bytes(root), git(root, "diff", "--cached"), git(root, "rev-parse", "HEAD"),
            git(root, "symbolic-ref", "HEAD"), git(root, "stash", "list"))


def uncommitted_work(root: Path) -> None:
    """Modified, staged, untracked, executable, nested, ignored-small and binary files."""
    (root / "calc.py").write_text("def add(a, b):\n    return a + b  # staged\n")
    git(root, "add", "calc.py")
    (root / "calc.py").write_text("def add(a, b):\n    return a + b  # staged, then more\n")
    (root / "notes").mkdir()
    (root / "notes/todo.txt").write_text("my untracked notes\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (root / ".env").write_text("API_KEY=mine\n")
    (root / ".gitignore").write_text("build/\n*.log\n.env\n")


def undo_cli(root: Path, *args: str) -> int:
    return main(["-C", str(root), "undo", *args])


DESTROY = {
    "reset": "git reset --hard",
    "rm": "rm -rf ./* .env .gitignore",  # everything but .git
    "clean": "git clean -fdx",
    "checkout": "git checkout .",
}


def run_destroyer(root: Path, command: str, sandbox_setting: str) -> list:
    """One full-auto message whose shell call runs `command`; the user approves whatever the
    denylist asks (a careless "yes")."""
    model = ScriptedModel([call("run_shell", command=command), "Done."])
    agent = conversation(root, model, full_auto(sandbox=sandbox_setting), approver=lambda req: "yes")
    return list(agent.send("tidy up"))


@pytest.mark.parametrize("kind", sorted(DESTROY))
def test_undo_restores_what_an_unsandboxed_command_destroyed(git_repo, kind, capsys):
    uncommitted_work(git_repo)
    before = state(git_repo)
    events = run_destroyer(git_repo, DESTROY[kind], "off")
    assert [e.ok for e in events if isinstance(e, ToolCallFinished)] == [True]
    assert state(git_repo) != before  # the command really destroyed something
    assert undo_cli(git_repo) == 0
    assert "restored the work tree" in capsys.readouterr().out
    assert state(git_repo) == before


# In the sandbox .git is read-only: `rm -rf "$(pwd)"` removes all else, reset/checkout fail.
SANDBOXED = {"rm": DESTROY["rm"], "clean": DESTROY["clean"], "rm-pwd": "rm -rf \"$(pwd)\""}


@needs_bwrap
@pytest.mark.parametrize("kind", sorted(SANDBOXED))
def test_undo_restores_what_a_sandboxed_command_destroyed(git_repo, kind):
    uncommitted_work(git_repo)
    before = state(git_repo)
    run_destroyer(git_repo, SANDBOXED[kind], "auto")
    assert tree_bytes(git_repo) != before[0]
    assert undo_cli(git_repo) == 0
    assert state(git_repo) == before


@needs_bwrap
def test_sandboxed_git_reset_cannot_even_start(git_repo, capsys):
    uncommitted_work(git_repo)
    before = state(git_repo)
    events = run_destroyer(git_repo, "git reset --hard", "auto")
    done = [e for e in events if isinstance(e, ToolCallFinished)]
    assert not done[0].ok and "Read-only file system" in done[0].output
    assert state(git_repo) == before
    assert undo_cli(git_repo) == 0 and "nothing to undo" in capsys.readouterr().out
    assert state(git_repo) == before


def test_undo_takes_back_the_agents_commit_and_keeps_the_users_saved_work(git_repo):
    (git_repo / "calc.py").write_text((git_repo / "calc.py").read_text() + "# my work\n")
    before = state(git_repo)
    edit = call("edit_file", path="calc.py", edits=[{"old": "return a + b", "new": "return b + a"}])
    list(conversation(git_repo, ScriptedModel([edit, "Done."])).send("swap"))
    assert git(git_repo, "rev-list", "--count", "HEAD").strip() == "3"  # save + agent commit
    assert undo_cli(git_repo) == 0
    assert state(git_repo) == before  # both commits gone, "# my work" uncommitted again


def test_two_undos_walk_back_two_actions_and_undo_id_redoes(git_repo, capsys):
    one = call("write_file", path="a.txt", content="1\n")
    two = call("write_file", path="b.txt", content="2\n")
    list(conversation(git_repo, ScriptedModel([one, two, "Done."]), full_auto(auto_commit=False)).send("x"))
    assert undo_cli(git_repo) == 0 and not (git_repo / "b.txt").exists() and (git_repo / "a.txt").exists()
    assert undo_cli(git_repo) == 0 and not (git_repo / "a.txt").exists()
    out = capsys.readouterr().out
    saved = out.strip().splitlines()[0].rsplit("spec-agent undo ", 1)[1].rstrip(")")
    assert undo_cli(git_repo, saved) == 0  # the state before the first undo
    assert (git_repo / "a.txt").read_text() == "1\n" and (git_repo / "b.txt").read_text() == "2\n"
    assert undo_cli(git_repo, "--list") == 0
    listing = capsys.readouterr().out
    assert "before write_file b.txt" in listing and "undone" in listing and "before undo" in listing


def test_taking_a_snapshot_touches_nothing_of_the_users(git_repo):
    uncommitted_work(git_repo)
    git(git_repo, "stash", "list")
    index = (git_repo / ".git/index").read_bytes()
    before = state(git_repo)
    refs = git(git_repo, "for-each-ref", "refs/heads", "refs/tags", "refs/stash")
    snap = SnapshotStore.open(git_repo).take("test", "c1")
    assert snap is not None and snap.kind == "action"
    assert state(git_repo) == before and (git_repo / ".git/index").read_bytes() == index
    assert git(git_repo, "for-each-ref", "refs/heads", "refs/tags", "refs/stash") == refs
    assert SnapshotStore.open(git_repo).take("again", "c1").sha == snap.sha  # unchanged: reused


def test_undo_refuses_to_drop_a_users_commit(git_repo):
    store = SnapshotStore.open(git_repo)
    store.take("x")
    (git_repo / "README.md").write_text("# mine\n")
    git(git_repo, "commit", "-qam", "user work")
    top = git(git_repo, "rev-parse", "HEAD")
    with pytest.raises(SnapshotError, match="not spec-agent's"):
        store.undo()
    assert git(git_repo, "rev-parse", "HEAD") == top and (git_repo / "README.md").read_text() == "# mine\n"


def test_undo_refuses_a_squash_that_quotes_the_trailer(git_repo):
    store = SnapshotStore.open(git_repo)
    store.take("x")
    (git_repo / "README.md").write_text("# squashed\n")
    git(git_repo, "commit", "-qam", "Squash of agent work\n\nAgent: spec-agent")
    with pytest.raises(SnapshotError, match="not spec-agent's"):
        store.undo()
    assert (git_repo / "README.md").read_text() == "# squashed\n"


def test_undo_moves_a_rewound_branch_forward_again(git_repo):
    (git_repo / "README.md").write_text("# second\n")
    git(git_repo, "commit", "-qam", "second")
    before = state(git_repo)
    SnapshotStore.open(git_repo).take("reset")
    git(git_repo, "reset", "-q", "--hard", "HEAD~1")
    assert undo_cli(git_repo) == 0 and state(git_repo) == before


def test_pruning_keeps_the_live_conversations_snapshots(git_repo):
    store = SnapshotStore(SnapshotStore.open(git_repo).top, max_count=2)
    mine = store.take("first", "live")
    for i in range(4):
        (git_repo / f"f{i}.txt").write_text(str(i))
        store.take(f"other {i}")
    kept = [s.sha for s in store.list()]
    assert len(kept) == 3 and mine.sha in kept
    store.keep.clear()
    store.prune()
    assert len(store.list()) == 2 and mine.sha not in [s.sha for s in store.list()]


def test_undo_outside_git_is_one_error(tmp_path, capsys):
    assert undo_cli(tmp_path) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not in a git repository" in err


def test_snapshots_taken_in_a_row_are_each_kept(git_repo):
    """A snapshot before every action: five in a row are five snapshots, newest first. (How
    long one takes is not asserted here: a wall-time bound fails on a loaded machine.)"""
    store = SnapshotStore.open(git_repo)
    taken = []
    for i in range(5):
        (git_repo / "calc.py").write_text(f"# {i}\n")
        taken.append(store.take(f"edit {i}"))
    assert all(s is not None for s in taken) and len({s.sha for s in taken}) == 5
    assert [s.sha for s in store.list()][:5] == [s.sha for s in reversed(taken)]


def test_large_untracked_files_are_left_alone(git_repo, monkeypatch):
    import agent.core.snapshots as snapshots

    monkeypatch.setattr(snapshots, "UNTRACKED_FILE_MAX", 1000)
    (git_repo / "dump.bin").write_bytes(b"x" * 5000)
    store = SnapshotStore.open(git_repo)
    snap = store.take("before")
    assert "dump.bin" not in git(git_repo, "ls-tree", "-r", "--name-only", snap.sha)
    (git_repo / "calc.py").write_text("changed\n")
    store.undo()
    assert (git_repo / "dump.bin").read_bytes() == b"x" * 5000  # neither saved nor deleted
    assert (git_repo / "calc.py").read_text() != "changed\n"


def test_snapshots_are_never_signed(git_repo):
    git(git_repo, "config", "commit.gpgsign", "true")
    git(git_repo, "config", "gpg.program", "false")  # signing would fail
    assert SnapshotStore.open(git_repo).take("signed?") is not None


def test_repository_without_commits(tmp_path):
    root = tmp_path / "new"
    root.mkdir()
    git(root, "init", "-q")
    (root / "a.txt").write_text("untracked\n")
    store = SnapshotStore.open(root)
    store.take("first action")
    (root / "a.txt").unlink()
    (root / "b.txt").write_text("created\n")
    store.undo()
    assert sorted(p.name for p in root.iterdir()) == [".git", "a.txt"]
    assert git(root, "status", "--porcelain") == "?? a.txt\n"  # untracked again, not staged


def test_pruning_by_age_drops_old_snapshots_and_commit_records(git_repo):
    edit = call("write_file", path="new.txt", content="x\n")
    list(conversation(git_repo, ScriptedModel([edit, "Done."])).send("add"))
    assert git(git_repo, "for-each-ref", "refs/spec-agent/commits/").strip()
    store = SnapshotStore(SnapshotStore.open(git_repo).top, max_age_days=1e-9)
    assert store.prune() >= 1
    assert store.list() == [] and git(git_repo, "for-each-ref", "refs/spec-agent/").strip() == ""


@pytest.mark.parametrize("line", ["snapshot_max_count = 1", "snapshot_max_age_days = 0.0001"])
def test_a_repository_cannot_shorten_its_snapshots(tmp_path, monkeypatch, line):
    from agent.config import ConfigError, load_config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    (tmp_path / ".specrc").write_text(line + "\n")  # e.g. written by the agent itself
    with pytest.raises(ConfigError, match="may not be set by a repository's .specrc"):
        load_config(tmp_path)

"""Git safety for the agent (GitPython): the user's uncommitted work is never lost.

- Before the agent first edits a file with uncommitted changes, `protect()` commits that
  file as the user's own work (or stashes it, or refuses), per `Config.dirty_files`. An
  existing file that git ignores (`.env`) cannot be saved that way, so editing it is refused;
  a new file in an ignored place may be created (and edited again in the same run).
- `commit_turn()` commits the files the agent changed in one turn with a generated message
  and the trailer `Agent: spec-agent`; ignored files among them are left out.
- Every commit the agent makes (its own, and the saves of the user's work) is recorded under
  `refs/spec-agent/commits/<sha>`. An agent commit is one that is recorded there *and*
  whose message git itself parses (`git interpret-trailers --parse`) to hold the trailer, so
  a user's squash of agent commits, or a message quoting the trailer, is never taken for one.
- `undo()` reverts the agent's last commit only: it refuses when HEAD is not an agent commit
  (e.g. the user committed on top) and keeps unrelated uncommitted changes (`reset --keep`).
  (`spec-agent undo` restores snapshots, agent/core/snapshots.py; this is its fallback.)
The agent's git commands run through tools/git.py (hooks, fsmonitor, filters, pagers and the
rest of what would run a program off; literal pathspecs: a file named `*.py` is that file
only); commits are made with `commit-tree` (no hooks) and recorded before the branch moves. Outside a git repository every method is a no-op and
`warning` says so once. Does not push, pull, branch or touch files other than those named.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tools.git import GitCommandError, run as run_git, toplevel, trailers

TRAILER = "Agent: spec-agent"
SAVED_TRAILER = "Agent-Saved: spec-agent"  # the agent saved the user's own changes (protect)
COMMITS_REF = "refs/spec-agent/commits/"
_FALLBACK_IDENTITY = {"GIT_AUTHOR_NAME": "spec-agent user", "GIT_AUTHOR_EMAIL": "spec-agent@localhost",
                      "GIT_COMMITTER_NAME": "spec-agent user", "GIT_COMMITTER_EMAIL": "spec-agent@localhost"}


class GitSafetyError(Exception):
    """An operation refused to protect the user's work; the message says why."""

    exit_code = 1


def is_agent_commit(message: str) -> bool:
    """The message carries the agent's trailer, parsed by git (not a substring match). Alone it
    does not make a commit the agent's: see `GitGuard.is_agent_commit_id`."""
    return TRAILER in trailers(message)


@dataclass
class GitGuard:
    """Per-run git state: which files were already protected, which the agent changed."""

    root: Path
    dirty_mode: str = "commit"  # commit | stash | refuse
    auto_commit: bool = True
    top: Path | None = None  # the work tree; None outside git
    warning: str = ""
    protected: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)  # what protect() did, for the UI

    @classmethod
    def open(cls, root: Path, dirty_mode: str = "commit", auto_commit: bool = True) -> "GitGuard":
        top = toplevel(root) if root.is_dir() else None
        guard = cls(root.resolve(), dirty_mode, auto_commit, top)
        if top is None:
            guard.warning = (f"{root} is not in a git repository: dirty-work protection, "
                             "auto-commit and undo are off")
        return guard

    @property
    def enabled(self) -> bool:
        return self.top is not None

    # ---- helpers ------------------------------------------------------------------------

    def _rel(self, path: Path | str) -> str:
        """A path relative to the repository's working tree (what git commands take)."""
        full = (self.root / path).resolve()
        return full.relative_to(self.top.resolve()).as_posix()

    def _git(self, *args: str) -> str:
        """Run git (hooks off, literal pathspecs) in the work tree; returns stdout."""
        env = {} if self._has_identity() else _FALLBACK_IDENTITY
        return run_git(self.top, *args, env=env).stdout.rstrip("\n")

    def record(self, sha: str) -> None:
        """Remember that the agent made commit `sha` (what `is_agent_commit_id` checks)."""
        self._git("update-ref", COMMITS_REF + sha, sha)

    def _commit_recorded(self, rels: list[str], message: str) -> str:
        """Commit the work tree's `rels` on HEAD as `git commit -- RELS` would (other staged
        changes stay staged, not committed); '' when that changes nothing. The commit is
        recorded before HEAD moves to it: killed in between, the agent leaves a recorded
        commit nothing points to, never a commit on the branch that undo cannot tell is its."""
        env = {} if self._has_identity() else dict(_FALLBACK_IDENTITY)
        head = run_git(self.top, "rev-parse", "-q", "--verify", "HEAD", check=False).stdout.strip()
        with tempfile.TemporaryDirectory(prefix="spec-agent-commit-") as scratch:
            index = {**env, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
            run_git(self.top, "read-tree", *([head] if head else ["--empty"]), env=index)
            run_git(self.top, "add", "-A", "--", *rels, env=index)
            tree = run_git(self.top, "write-tree", env=index).stdout.strip()
        if head and tree == self._git("rev-parse", f"{head}^{{tree}}"):
            return ""
        parents = ["-p", head] if head else []
        sha = run_git(self.top, "commit-tree", "--no-gpg-sign", tree, *parents, input=message,
                      env=env).stdout.strip()
        self.record(sha)
        self._git("update-ref", "-m", "commit: " + message.splitlines()[0], "HEAD", sha, head)
        self._git("add", "-A", "--", *rels)  # the index as `git commit -- RELS` leaves it
        return sha

    def is_agent_commit_id(self, sha: str, accept: tuple[str, ...] = (TRAILER,)) -> bool:
        """`sha` is a commit the agent recorded and git parses one of `accept` among its
        message's trailers."""
        if not self.enabled:
            return False
        full = run_git(self.top, "rev-parse", "-q", "--verify", f"{sha}^{{commit}}", check=False).stdout.strip()
        if not full or run_git(self.top, "rev-parse", "-q", "--verify", COMMITS_REF + full, check=False).returncode:
            return False
        found = trailers(run_git(self.top, "cat-file", "commit", full).stdout.split("\n\n", 1)[-1])
        return any(t in found for t in accept)

    def _has_identity(self) -> bool:
        return all(run_git(self.top, "config", key, check=False).stdout.strip() for key in ("user.name", "user.email"))

    def has_head(self) -> bool:
        return run_git(self.top, "rev-parse", "-q", "--verify", "HEAD^{commit}", check=False).returncode == 0

    def head(self) -> tuple[str, str, int]:
        """HEAD's (sha, summary, number of parents)."""
        sha, parents, summary = run_git(self.top, "log", "-1", "--format=%H%n%P%n%s", "HEAD").stdout.split("\n", 2)
        return sha, summary.rstrip("\n"), len(parents.split())

    def is_dirty(self, rel: str) -> bool:
        """True when `rel` has uncommitted changes (worktree or index) or is untracked.
        `--untracked-files=all`: the user's `status.showUntrackedFiles = no` must not hide
        an untracked file from protection."""
        if not (self.top / rel).exists() and not self.has_head():
            return False
        out = self._git("status", "--porcelain", "--untracked-files=all", "--", rel)
        return bool(out.strip())

    def ignored(self, rels: list[str]) -> set[str]:
        """Which of `rels` git ignores (.gitignore, info/exclude); tracked files never are."""
        if not rels:
            return set()
        proc = run_git(self.top, "check-ignore", "--stdin", "-z", input="\0".join(rels) + "\0", check=False,
                       literal=False)
        if proc.returncode not in (0, 1):  # 1 = none ignored
            raise GitCommandError(["git", "check-ignore"], proc.returncode, proc.stderr)
        out = proc.stdout
        return {p for p in out.split("\0") if p}

    # ---- the three operations ------------------------------------------------------------

    def protect(self, path: str) -> str:
        """Call before the agent edits repo-relative `path`. Returns '' to go ahead, or an
        error text (refuse mode, or git failed) for the model."""
        if not self.enabled:
            return ""
        rel = self._rel(path)
        if rel in self.protected or not (self.top / rel).exists():
            self.protected.add(rel)
            return ""
        try:
            if self.ignored([rel]):
                # git cannot back it up or undo the edit, and the user's file (.env, a local
                # config) is often not recoverable any other way: refuse.
                return (f"{path} is ignored by git (.gitignore), so spec-agent cannot back it up "
                        "or undo an edit to it; refusing to change it. Ask the user to edit it.")
            if not self.is_dirty(rel):
                self.protected.add(rel)
                return ""
            if self.dirty_mode == "refuse":
                return (f"{path} has uncommitted changes by the user; refusing to edit it "
                        "(dirty_files = refuse). Ask the user to commit first.")
            if self.dirty_mode == "stash":
                self._git("stash", "push", "--include-untracked", "-m", f"spec-agent: your changes to {rel}", "--", rel)
                self.notes.append(f"stashed your uncommitted changes to {rel} (git stash list)")
            else:
                self._commit_recorded([rel], f"Save uncommitted changes to {rel} before "
                                      f"spec-agent edits\n\n{SAVED_TRAILER}\n")
                self.notes.append(f"committed your uncommitted changes to {rel} first")
        except GitCommandError as e:
            return f"could not protect your uncommitted changes to {path}: {e.stderr.strip() or e}; not editing it"
        self.protected.add(rel)
        return ""

    def commit_turn(self, paths: list[str], task: str, turn: int) -> str:
        """Commit the agent's changes to `paths`; returns the new commit's short sha or ''."""
        if not (self.enabled and self.auto_commit and paths):
            return ""
        rels = sorted({self._rel(p) for p in paths})
        try:
            rels = [r for r in rels if r not in self.ignored(rels)]  # `git add` refuses them
        except GitCommandError as e:
            raise GitSafetyError(f"auto-commit failed: {e.stderr.strip() or e}") from None
        if not rels:
            return ""
        summary = " ".join(task.split())
        summary = summary if len(summary) <= 60 else summary[:57] + "..."
        message = f"spec-agent: {summary}\n\nTurn {turn} edited: {', '.join(rels)}\n\n{TRAILER}\n"
        try:
            sha = self._commit_recorded(rels, message)
            if not sha:
                return ""
        except GitCommandError as e:
            raise GitSafetyError(f"auto-commit failed: {e.stderr.strip() or e}") from None
        return sha[:8]

    def undo(self) -> str:
        """Revert the agent's last commit; returns a description or raises GitSafetyError."""
        if not self.enabled:
            raise GitSafetyError(self.warning or "not a git repository")
        if not self.has_head():
            raise GitSafetyError("the repository has no commits")
        sha, summary, parents = self.head()
        if not self.is_agent_commit_id(sha):
            raise GitSafetyError(
                f"the last commit ({sha[:8]} \"{summary}\") is not spec-agent's; "
                "refusing to undo (did you commit on top of it?)"
            )
        if not parents:
            raise GitSafetyError("the agent's commit is the repository's first commit; not undoing it")
        try:
            self._git("reset", "-q", "--keep", "HEAD~1")
        except GitCommandError as e:
            raise GitSafetyError(
                f"cannot undo: files of that commit have uncommitted changes ({e.stderr.strip() or e})"
            ) from None
        return f"undid {sha[:8]} \"{summary}\"; HEAD is now {self.head()[0][:8]}"

"""Snapshots of the working tree before each of the agent's actions, and undo from them.

Before every edit and shell command the conversation calls `SnapshotStore.take()`. When the
working tree (tracked and untracked files; not ignored ones), the staged state or HEAD
differ from the newest snapshot, it is recorded as a commit object under
`refs/spec-agent/snapshots/<time>`, built the way `git stash create` builds one (a commit of
the work tree whose parents are HEAD and a commit of the index) but with untracked files,
through a temporary index file: the user's index, branch, stash list and work tree are
never touched by taking one.

`undo()` restores the newest snapshot that differs from the present, i.e. the tree as it was
before the agent's last action that changed anything, whatever that action did inside the
repository (`git reset --hard`, `rm -rf`, `git clean -fdx`, `git checkout .`): files come
back byte for byte with their modes, files created since are deleted, the index gets its
staged state back. The branch moves back too when only the agent's own recorded commits
(agent/core/git.py) lie on top of the snapshot's HEAD, or when it was rewound; commits of the
user's on top make undo refuse. The state just before an undo is itself saved as a snapshot
(kind "undo"), so `undo <id>` can bring it back. Ignored files are saved when small, inside
ignored folders too except those that are rebuilt (`.env` and `secrets/prod.env` yes,
`build/` and `.venv/` no; agent/core/snapshot_files.py), untracked files when under 64 MiB;
the others are neither saved nor deleted (the sandbox keeps the large untracked ones
read-only, and undo names them when they are gone). Permission bits git does not record
(0600, 0400, ...) are kept in the snapshot's message and restored; a detached HEAD comes
back detached.

Snapshots are pruned by age and count, except those the live conversation took. Outside a
git repository the store is disabled. Nothing here asks or renders.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.git import GitCommandError

from . import snapshot_files as extra
from .git import COMMITS_REF, SAVED_TRAILER, TRAILER, GitGuard, run_git

SNAP_REF = "refs/spec-agent/snapshots/"
UNDONE_REF = "refs/spec-agent/undone/"
UNTRACKED_FILE_MAX = 64 << 20  # untracked files larger than this are not saved
IGNORED_FILE_MAX = 1 << 20  # ignored files saved in a snapshot: each at most 1 MiB ...
IGNORED_TOTAL_MAX = 16 << 20  # ... and 16 MiB together
_EMPTY_TREE = "4b825dc642cb6eb9a060c64bf1d69d2b4e4a4bb3"  # git's empty tree (SHA-1 repositories)
_IDENTITY = {"GIT_AUTHOR_NAME": "spec-agent", "GIT_AUTHOR_EMAIL": "spec-agent@localhost",
             "GIT_COMMITTER_NAME": "spec-agent", "GIT_COMMITTER_EMAIL": "spec-agent@localhost"}
_FIELDS = ("Spec-Agent-Kind", "Spec-Agent-Head", "Spec-Agent-Branch", "Spec-Agent-Index",
           "Spec-Agent-Conversation")


class SnapshotError(Exception):
    """A snapshot could not be taken or restored; the message says why."""

    exit_code = 1


@dataclass(frozen=True)
class Snapshot:
    ref: str  # full ref name
    sha: str  # the work-tree commit
    tree: str  # its tree
    index_tree: str  # the staged tree ('' when the index had conflicts)
    head: str  # HEAD then ('' in a repository without commits)
    branch: str  # HEAD's symbolic ref then ('' when detached)
    kind: str  # "action" (before an agent action) | "undo" (before an undo)
    label: str
    conversation: str
    time: float
    modes: dict[str, int] = field(default_factory=dict)  # permission bits git does not keep
    unsaved: tuple[str, ...] = ()  # untracked files over the size cap, not in the snapshot

    @property
    def id(self) -> str:
        return self.sha[:10]

    @property
    def undone(self) -> bool:
        return self.ref.startswith(UNDONE_REF)


@dataclass(frozen=True)
class _State:
    tree: str
    index_tree: str
    head: str
    branch: str
    modes: dict[str, int] = field(default_factory=dict)
    unsaved: tuple[str, ...] = ()


class SnapshotStore:
    """Snapshots of one repository's work tree. `keep`: ids the live conversation took."""

    def __init__(self, top: Path | None, max_count: int = 100, max_age_days: float = 14.0,
                 warning: str = ""):
        self.top, self.max_count, self.max_age_days = top, max_count, max_age_days
        self.warning = warning
        self.keep: set[str] = set()

    @classmethod
    def open(cls, root: Path, max_count: int = 100, max_age_days: float = 14.0) -> "SnapshotStore":
        proc = run_git(root, "rev-parse", "--show-toplevel", check=False)
        if proc.returncode != 0 or not proc.stdout.strip():
            return cls(None, max_count, max_age_days,
                       f"{root} is not in a git repository: snapshots and undo are off")
        return cls(Path(proc.stdout.strip()), max_count, max_age_days)

    @property
    def enabled(self) -> bool:
        return self.top is not None

    def _git(self, *args: str, env: dict[str, str] | None = None, input: str | None = None) -> str:
        return run_git(self.top, *args, env={**_IDENTITY, **(env or {})}, input=input).stdout.strip()

    def _try(self, *args: str) -> str:
        """stdout of a git query, '' when it fails (no HEAD, no such ref)."""
        proc = run_git(self.top, *args, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    # ---- reading the present --------------------------------------------------------------

    def _state(self, scratch: Path) -> _State:
        """Trees of the work tree and the index now, through a copy of the index in `scratch`."""
        index = scratch / "index"
        real = Path(self._git("rev-parse", "--path-format=absolute", "--git-path", "index"))
        if real.is_file():
            shutil.copyfile(real, index)  # its stat cache spares re-hashing unchanged files
        env = {"GIT_INDEX_FILE": str(index)}
        proc = run_git(self.top, "write-tree", env=env, check=False)  # no index file: empty tree
        head = self._try("rev-parse", "-q", "--verify", "HEAD")
        if proc.returncode == 0:
            index_tree = proc.stdout.strip()
        else:  # unmerged entries: keep HEAD's tree as the staged state (contents are in `tree`)
            index_tree = self._try("rev-parse", f"{head}^{{tree}}") if head else _EMPTY_TREE
        # --ignore-errors: an unreadable file must not stop the rest from being saved.
        run_git(self.top, "add", "-u", "--ignore-errors", "--", ".", env=env, check=False)
        untracked, unsaved = self._untracked()
        added = untracked + self._small_ignored()
        if added:
            run_git(self.top, "add", "-f", "--ignore-errors", "--pathspec-from-file=-",
                    "--pathspec-file-nul", env=env, input="\0".join(added) + "\0", check=False)
        tree = self._git("write-tree", env=env)
        paths = [p for p in self._git("ls-tree", "-r", "-z", "--name-only", tree).split("\0") if p]
        return _State(tree, index_tree, head, self._try("symbolic-ref", "-q", "HEAD"),
                      extra.odd_modes(self.top, paths), tuple(unsaved))

    def _untracked(self) -> tuple[list[str], list[str]]:
        """Untracked files git does not ignore, but none over UNTRACKED_FILE_MAX bytes (a data
        dump or a build artefact would make every snapshot copy it into .git); and those left
        out for their size."""
        out = run_git(self.top, "ls-files", "-z", "--others", "--exclude-standard", check=False).stdout
        files, unsaved = [], []
        for rel in (p for p in out.split("\0") if p):
            try:
                small = (self.top / rel).lstat().st_size <= UNTRACKED_FILE_MAX
            except OSError:
                continue
            (files if small else unsaved).append(rel)
        return files, unsaved[:extra.MAX_UNSAVED]

    def _small_ignored(self) -> list[str]:
        """Ignored files outside ignored folders, each at most IGNORED_FILE_MAX bytes (a `.env`,
        a local config): `git clean -fdx` deletes them too. Ignored folders (build/, .venv/)
        are left out: they are large and can be rebuilt."""
        out = run_git(self.top, "ls-files", "-z", "--others", "--ignored", "--exclude-standard",
                      "--directory", "--no-empty-directory", check=False).stdout
        listed = [p for p in out.split("\0") if p]
        inside = extra.ignored_inside(self.top, [p for p in listed if p.endswith("/")], IGNORED_FILE_MAX)
        files, total = [], 0
        for rel in [p for p in listed if not p.endswith("/")] + inside:
            try:
                size = (self.top / rel).lstat().st_size
            except OSError:
                continue
            if size <= IGNORED_FILE_MAX and total + size <= IGNORED_TOTAL_MAX and len(files) < 1000:
                files.append(rel)
                total += size
        return files

    # ---- taking ---------------------------------------------------------------------------

    def take(self, label: str, conversation: str = "", kind: str = "action") -> Snapshot | None:
        """Record the work tree unless the newest snapshot already holds this state; returns
        the snapshot that holds it (None when disabled). SnapshotError when git fails."""
        if not self.enabled:
            return None
        try:
            with tempfile.TemporaryDirectory(prefix="spec-agent-snap-") as scratch:
                state = self._state(Path(scratch))
            newest = next((s for s in self.list() if s.kind == "action" and not s.undone), None)
            if kind == "action" and newest is not None and _same(newest, state):
                return newest
            snap = self._record(state, label, conversation, kind)
        except (GitCommandError, OSError) as e:
            raise SnapshotError(f"could not snapshot the work tree: {_why(e)}") from None
        if conversation:
            self.keep.add(snap.sha)
        self.prune()
        return snap

    def _record(self, state: _State, label: str, conversation: str, kind: str) -> Snapshot:
        heads = ["-p", state.head] if state.head else []
        index_commit = self._git("commit-tree", "--no-gpg-sign", state.index_tree, *heads,
                                 "-m", "spec-agent snapshot: index")
        label = " ".join(label.split())[:100]
        body = "\n".join(f"{k}: {v}" for k, v in zip(_FIELDS, (
            kind, state.head or "none", state.branch or "detached", state.index_tree,
            conversation or "none")))
        body += f"\nSpec-Agent-Modes: {extra.encode(state.modes)}"
        body += f"\nSpec-Agent-Unsaved: {extra.encode(list(state.unsaved))}"
        message = f"spec-agent snapshot: before {label}\n\n{body}\n"
        sha = self._git("commit-tree", "--no-gpg-sign", state.tree, *heads, "-p", index_commit,
                        input=message)
        ref = f"{SNAP_REF}{time.time_ns():020d}"
        self._git("update-ref", ref, sha, "")  # "": the ref must not exist yet
        return Snapshot(ref, sha, state.tree, state.index_tree, state.head, state.branch, kind,
                        label, conversation, time.time(), dict(state.modes), state.unsaved)

    # ---- listing and pruning ---------------------------------------------------------------

    def list(self) -> list[Snapshot]:
        """Every snapshot, newest first (undone ones included)."""
        if not self.enabled:
            return []
        fmt = "%(refname)%00%(objectname)%00%(tree)%00%(committerdate:unix)%00%(contents)%00%00"
        out = run_git(self.top, "for-each-ref", f"--format={fmt}", SNAP_REF, UNDONE_REF).stdout
        snaps = [s for s in (_parse(rec) for rec in out.split("\0\0\n")) if s is not None]
        return sorted(snaps, key=lambda s: s.ref.rsplit("/", 1)[-1], reverse=True)

    def find(self, ident: str) -> Snapshot:
        """The snapshot whose id (a sha prefix, at least 4 characters) is `ident`."""
        hits = [s for s in self.list() if len(ident) >= 4 and s.sha.startswith(ident.lower())]
        if len(hits) != 1:
            raise SnapshotError(f"no snapshot {ident!r} (spec-agent undo --list shows them)" if not hits
                                else f"snapshot id {ident!r} is ambiguous; give more characters")
        return hits[0]

    def listing(self) -> str:
        """`spec-agent undo --list`: one line per snapshot, newest first."""
        snaps = self.list() if self.enabled else None
        if snaps is None:
            raise SnapshotError(self.warning)
        if not snaps:
            return "no snapshots yet"
        rows = []
        for snap in snaps:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snap.time))
            state = "undone" if snap.undone else ("before undo" if snap.kind == "undo" else "")
            rows.append(f"{snap.id}  {when}  {state:11}  before {snap.label}")
        return "\n".join(rows)

    def prune(self) -> int:
        """Delete snapshots beyond `max_count` or older than `max_age_days`, except those the
        live conversation took; returns how many went."""
        cutoff = time.time() - self.max_age_days * 86400
        gone = [s for i, s in enumerate(self.list())
                if (i >= self.max_count or s.time < cutoff) and s.sha not in self.keep]
        out = run_git(self.top, "for-each-ref", "--format=%(refname) %(committerdate:unix)", COMMITS_REF).stdout
        records = [ref for ref, _, when in (line.partition(" ") for line in out.splitlines())
                   if when and float(when) < cutoff]  # the agent's commits, as old as pruned snapshots
        refs = [s.ref for s in gone] + records
        if refs:
            self._git("update-ref", "--stdin", input="".join(f"delete {ref}\n" for ref in refs))
        return len(gone)

    # ---- undo -----------------------------------------------------------------------------

    def undo(self, ident: str = "") -> str:
        """Restore snapshot `ident`, or the newest one that differs from the present; returns
        what was done ("nothing to undo" when no snapshot differs from the present).
        SnapshotError when it would drop a commit of the user's, or git fails."""
        if not self.enabled:
            raise SnapshotError(self.warning)
        try:
            with tempfile.TemporaryDirectory(prefix="spec-agent-snap-") as scratch:
                now = self._state(Path(scratch))
            target = self.find(ident) if ident else self._newest_different(now)
            if target is None:
                return ("nothing to undo: the work tree is as it was before the agent's last "
                        "action (spec-agent undo --list shows the snapshots)" + self._lost())
            guard = GitGuard.open(self.top)
            self._check_branch(target, guard)
            saved = self._record(now, f"undo to {target.id}", "", "undo")
            self._move_branch(target, now)
            self._restore_files(target, now)
            if target.kind == "action" and not target.undone:
                name = target.ref.rsplit("/", 1)[-1]
                self._git("update-ref", "--stdin", input=f"create {UNDONE_REF}{name} {target.sha}\n"
                          f"delete {target.ref} {target.sha}\n")
        except (GitCommandError, OSError) as e:
            raise SnapshotError(f"undo failed: {_why(e)}") from None
        return (f"restored the work tree to snapshot {target.id} (before {target.label}); "
                f"the state before this undo is snapshot {saved.id} (spec-agent undo {saved.id})")

    def _lost(self) -> str:
        """A note naming the files the newest snapshot could not hold (over the size cap)
        that are gone now: undo cannot bring them back ('' when none)."""
        newest = next((s for s in self.list() if s.kind == "action"), None)
        gone = [p for p in (newest.unsaved if newest else ()) if not (self.top / p).exists()]
        if not gone:
            return ""
        return (f"; but {len(gone)} file(s) over the snapshot size limit ({UNTRACKED_FILE_MAX >> 20} "
                f"MiB) were never saved and are gone: {', '.join(gone[:5])}")

    def _newest_different(self, now: _State) -> Snapshot | None:
        """The newest not-undone action snapshot whose state differs from `now`; the ones
        equal to it on the way are marked undone (nothing of them is left to undo)."""
        for snap in self.list():
            if snap.kind != "action" or snap.undone:
                continue
            if not _same(snap, now):
                return snap
            name = snap.ref.rsplit("/", 1)[-1]
            self._git("update-ref", "--stdin", input=f"create {UNDONE_REF}{name} {snap.sha}\n"
                      f"delete {snap.ref} {snap.sha}\n")
        return None

    def _check_branch(self, target: Snapshot, guard: GitGuard) -> None:
        """Refuse when moving the snapshot's branch back would drop commits not the agent's."""
        tip = self._try("rev-parse", "-q", "--verify", target.branch or "HEAD")
        if not target.head or not tip or tip == target.head or self._is_ancestor(tip, target.head):
            return  # unchanged, or rewound since (the snapshot's parent keeps those commits)
        if not self._is_ancestor(target.head, tip):
            raise SnapshotError(f"{target.branch or 'HEAD'} ({tip[:8]}) no longer contains snapshot "
                                f"{target.id}'s HEAD ({target.head[:8]}); refusing to move it")
        accept = (TRAILER, SAVED_TRAILER)
        for sha in self._git("rev-list", f"{target.head}..{tip}").split():
            if not guard.is_agent_commit_id(sha, accept):
                subject = self._git("log", "-1", "--format=%s", sha)
                raise SnapshotError(f"commit {sha[:8]} \"{subject}\" on top of snapshot {target.id} is "
                                    "not spec-agent's; refusing to undo past it (nothing was changed)")

    def _is_ancestor(self, a: str, b: str) -> bool:
        return run_git(self.top, "merge-base", "--is-ancestor", a, b, check=False).returncode == 0

    def _move_branch(self, target: Snapshot, now: _State) -> None:
        """Put HEAD (and its branch) back where the snapshot found it."""
        if not target.head:
            return
        if target.branch and target.branch != now.branch:
            self._git("symbolic-ref", "HEAD", target.branch)
        if not target.branch and now.branch:  # it was detached: detach it again
            self._git("update-ref", "--no-deref", "-m", f"spec-agent undo to snapshot {target.id}",
                      "HEAD", target.head)
            return
        ref = target.branch or "HEAD"
        current = self._try("rev-parse", "-q", "--verify", ref)
        if current != target.head:
            deref = [] if target.branch else ["--no-deref"]
            self._git("update-ref", *deref, "-m", f"spec-agent undo to snapshot {target.id}", ref, target.head)

    def _restore_files(self, target: Snapshot, now: _State) -> None:
        """Make the work tree hold exactly `target`'s files (ignored ones aside), then give the
        index its staged state back."""
        changes = self._git("diff-tree", "-r", "-z", "--no-renames", "--name-status", now.tree, target.tree)
        parts = [p for p in changes.split("\0") if p]
        write = []
        for status, path in zip(parts[0::2], parts[1::2]):
            if status == "D":
                _remove(self.top, path)
            else:
                write.append(path)
        if write:
            with tempfile.TemporaryDirectory(prefix="spec-agent-snap-") as scratch:
                env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
                self._git("read-tree", target.tree, env=env)
                self._git("checkout-index", "-f", "-z", "--stdin", env=env, input="\0".join(write) + "\0")
        extra.restore_modes(self.top, target.modes, now.modes)
        self._git("read-tree", target.index_tree)
        run_git(self.top, "update-index", "-q", "--refresh", check=False)


def undo_text(store: SnapshotStore, ident: str = "") -> str:
    """What `spec-agent undo [ID]` and `/undo` do: restore a snapshot; in a repository with no
    snapshot yet (older spec-agent), revert the agent's last commit instead."""
    from .git import GitSafetyError

    if ident or not store.enabled or any(s.kind == "action" for s in store.list()):
        return store.undo(ident)
    try:
        return GitGuard.open(store.top).undo()
    except GitSafetyError as e:
        raise SnapshotError(f"no snapshot to restore, and {e}") from None


def _same(snap: Snapshot, state: _State) -> bool:
    return (snap.tree, snap.index_tree, snap.head, snap.branch, snap.modes) == (
        state.tree, state.index_tree, state.head, state.branch, state.modes)


def _remove(top: Path, rel: str) -> None:
    """Delete a file created since the snapshot, then the folders it leaves empty."""
    path = top / rel
    if path.is_symlink() or path.is_file():
        path.unlink()
    parent = path.parent
    while parent != top and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


def _parse(record: str) -> Snapshot | None:
    fields = record.lstrip("\n").split("\0")
    if len(fields) < 5:
        return None
    ref, sha, tree, when, message = fields[:5]
    meta = dict(line.split(": ", 1) for line in message.splitlines() if line.startswith("Spec-Agent-"))
    if set(_FIELDS) - set(meta):
        return None  # not a commit this module recorded
    head = meta["Spec-Agent-Head"]
    return Snapshot(
        ref, sha, tree, meta.get("Spec-Agent-Index", tree), "" if head == "none" else head,
        "" if meta.get("Spec-Agent-Branch") in (None, "detached") else meta["Spec-Agent-Branch"],
        meta.get("Spec-Agent-Kind", "action"),
        message.splitlines()[0].removeprefix("spec-agent snapshot: before ") if message else "",
        "" if meta.get("Spec-Agent-Conversation") == "none" else meta.get("Spec-Agent-Conversation", ""),
        float(when or 0), extra.decode(meta.get("Spec-Agent-Modes"), {}),
        tuple(extra.decode(meta.get("Spec-Agent-Unsaved"), [])))


def _why(e: Exception) -> str:
    return (getattr(e, "stderr", "") or str(e)).strip().splitlines()[-1] if str(e) else type(e).__name__


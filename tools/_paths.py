"""Repo confinement shared by every tool: a model-given path → a real path inside the root.

Refused: absolute paths, `..` segments, anything whose resolved location (symlinks
followed) lies outside the root, and the repository's git folder however it is spelled: any
part that a case-insensitive or normalising filesystem (macOS, Windows) would take for `.git`
(`.GIT`, `.git.`, `GIT~1`), and anything resolving into the git folder itself, wherever a
`.git` file (worktrees, `--separate-git-dir`) points. Does no I/O beyond resolving the path
and finding the git folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

# Code points HFS+ ignores in names (git's is_hfs_dotgit list): `.g\u200cit` is `.git` there.
_IGNORABLE = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")


class PathError(ValueError):
    """A path the agent may not touch; the message is meant for the model."""


def confine(root: Path, path: str) -> Path:
    """The absolute path for repo-relative `path`, or PathError when it escapes `root`."""
    if not isinstance(path, str) or not path.strip():
        raise PathError("path is empty")
    if "\x00" in path:
        raise PathError("path contains a NUL byte")
    p = PurePosixPath(path.replace("\\", "/"))
    if p.is_absolute() or Path(path).is_absolute() or path.startswith("~"):
        raise PathError(f"{path}: absolute paths are not allowed; use a path relative to the repo root")
    if ".." in p.parts:
        raise PathError(f"{path}: '..' is not allowed; paths must stay inside the repo")
    try:
        root = root.resolve()
        full = (root / Path(*p.parts)).resolve()  # follows symlinks, also for missing tails
    except (RuntimeError, OSError) as e:  # 3.11 raises RuntimeError for a symlink loop
        raise PathError(f"{path}: cannot resolve ({e}); a symlink loop?") from None
    check_resolved(root, full, path, p.parts)
    return full


def check_resolved(root: Path, full: Path, shown: str, given: tuple[str, ...] = ()) -> None:
    """PathError unless the resolved `full` lies inside the resolved `root`, outside its git
    folder (`given`: the parts the model wrote, checked for `.git` spellings too)."""
    if full != root and root not in full.parents:
        raise PathError(f"{shown}: resolves outside the repo (symlink?); refused")
    if any(_is_dotgit(part) for part in (*given, *full.relative_to(root).parts)) or any(
            _within(full, d) for d in git_dirs(root)):
        raise PathError(f"{shown}: the .git folder is off limits")


def _is_dotgit(part: str) -> bool:
    """`part` names `.git` on some filesystem: any case, trailing dots/spaces, 8.3 name."""
    name = _IGNORABLE.sub("", part).rstrip(". ").casefold()
    return name in (".git", "git~1")


def git_dirs(root: Path) -> list[Path]:
    """The real folders holding the repository's git data for a workspace at `root`."""
    for base in (root, *root.parents):
        dot = base / ".git"
        if dot.is_dir():
            return [dot.resolve()]
        if not dot.is_file():
            continue
        try:
            text = dot.read_text(errors="replace").strip()
            if not text.startswith("gitdir:"):
                return []
            gitdir = (base / text[len("gitdir:"):].strip()).resolve()
            common = gitdir / "commondir"  # a worktree's shared git folder
            dirs = [gitdir] + ([(gitdir / common.read_text().strip()).resolve()] if common.is_file() else [])
        except OSError:
            return []
        return dirs
    return []


def _within(full: Path, folder: Path) -> bool:
    """`full` is `folder` or inside it; compared by inode too (case-insensitive filesystems)."""
    if full == folder or folder in full.parents:
        return True
    for p in (full, *full.parents):
        try:
            if os.path.samefile(p, folder):
                return True
        except OSError:
            continue
    return False


def relative(root: Path, full: Path) -> str:
    """`full` as a repo-relative POSIX path."""
    return full.relative_to(root.resolve()).as_posix()


NESTED_WALK_BUDGET = 20000  # folders looked at when finding nested git folders
_NOT_WALKED = frozenset({"node_modules", ".venv", "venv", "__pycache__", ".tox", ".mypy_cache",
                         ".pytest_cache", "target", ".gradle"})


def nested_git_dirs(root: Path) -> list[Path]:
    """`.git` folders and files below `root` (vendored clones, submodules, repositories a
    command `git init`ed), not the top one; the walk looks at NESTED_WALK_BUDGET folders at
    most and skips package and cache folders."""
    out, seen = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        seen += 1
        if seen > NESTED_WALK_BUDGET:
            break
        here = Path(dirpath)
        if here != root and (".git" in dirnames or ".git" in filenames):
            out.append(here / ".git")
        dirnames[:] = [d for d in dirnames if d != ".git" and d not in _NOT_WALKED
                       and not os.path.islink(os.path.join(dirpath, d))]
    return out

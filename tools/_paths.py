"""Repo confinement shared by every tool: a model-given path → a real path inside the root.

Refused: absolute paths, `..` segments, anything whose resolved location (symlinks
followed) lies outside the root, and the repository's git folder however it is spelled: any
part that a case-insensitive or normalising filesystem (macOS, Windows) would take for `.git`
(`.GIT`, `.git.`, `GIT~1`), anything resolving into the git folder itself, wherever a
`.git` file (worktrees, `--separate-git-dir`) points, and anything inside a folder shaped
like a git folder (HEAD, objects/, refs/: a bare or separate git folder under any name).
A write (`check_resolved(..., write=True)`, which tools/write_file.py's one write path
calls) is also refused in the folders that the `.git` files and links of nested
repositories point to (found by a bounded walk). Does no I/O beyond resolving the path and
finding git folders.

`open_inside` / `read_inside` are for what the agent reads on its own account (the post-edit
checks): a regular file inside the root, reached one folder at a time with no symlink
followed at all, never a FIFO or a device.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path, PurePosixPath
from typing import BinaryIO

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


def check_resolved(root: Path, full: Path, shown: str, given: tuple[str, ...] = (),
                   write: bool = False) -> None:
    """PathError unless the resolved `full` lies inside the resolved `root`, outside its git
    folder and any folder shaped like one (`given`: the parts the model wrote, checked for
    `.git` spellings too); with `write`, also outside the git folders of nested repositories."""
    if full != root and root not in full.parents:
        raise PathError(f"{shown}: resolves outside the repo (symlink?); refused")
    if any(_is_dotgit(part) for part in (*given, *full.relative_to(root).parts)) or any(
            _within(full, d) for d in git_dirs(root)):
        raise PathError(f"{shown}: the .git folder is off limits")
    if any(_git_shaped(d) for d in (full, *full.parents) if d != root and root in d.parents):
        raise PathError(f"{shown}: inside a git folder (HEAD, objects/, refs/); off limits")
    if write and any(_within(full, d) for d in nested_git_data(root)):
        raise PathError(f"{shown}: inside the git folder of a nested repository (a .git file "
                        "points there); off limits")


def _git_shaped(folder: Path) -> bool:
    """`folder` holds what git takes for a git folder: HEAD, objects/ and refs/."""
    try:
        return (os.path.isfile(folder / "HEAD") and os.path.isdir(folder / "objects")
                and os.path.isdir(folder / "refs"))
    except (OSError, ValueError):
        return False


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
        if dot.is_file():
            return _pointed(dot)
    return []


def _pointed(dot: Path) -> list[Path]:
    """The git folders a `.git` file names (`gitdir: PATH`, and a worktree's commondir)."""
    try:
        with open(dot, "rb") as f:
            text = f.read(4096).decode("utf-8", "replace").strip()
        if not text.startswith("gitdir:"):
            return []
        gitdir = (dot.parent / text[len("gitdir:"):].strip()).resolve()
        common = gitdir / "commondir"  # a worktree's shared git folder
        return [gitdir] + ([(gitdir / common.read_text().strip()).resolve()] if common.is_file() else [])
    except (OSError, RuntimeError, ValueError):
        return []


def nested_git_data(root: Path) -> list[Path]:
    """The real folders holding the git data of the repositories nested below `root`: their
    `.git` folders, and where their `.git` files and links point."""
    out: list[Path] = []
    for dot in nested_git_dirs(root):
        try:
            if dot.is_symlink() or dot.is_dir():
                out.append(dot.resolve())
            elif dot.is_file():
                out += _pointed(dot)
        except (OSError, RuntimeError):
            continue
    return list(dict.fromkeys(out))


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


MAX_READ_BYTES = 8 << 20  # what read_inside reads at most
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_inside(root: Path, path: str) -> BinaryIO:
    """Repo-relative `path` opened for binary reading when it is a regular file inside `root`
    (confine's rules), reached from the root one folder at a time without following a
    symlink, the file itself included; PathError otherwise. A FIFO, socket or device is
    refused from its lstat, before anything opens it, and the open does not block."""
    confine(root, path)
    parts = [p for p in PurePosixPath(path.replace("\\", "/")).parts if p not in (".", "")]
    if not parts:
        raise PathError(f"{path}: not a file")
    fd = os.open(root.resolve(), _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            nxt = _open_no_follow(part, _DIR_FLAGS | _NOFOLLOW, fd, path)
            os.close(fd)
            fd = nxt
        st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            raise PathError(f"{path}: {kind}; not read")
        flags = os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        ffd = _open_no_follow(parts[-1], flags, fd, path)
    finally:
        os.close(fd)
    try:
        if not stat.S_ISREG(os.fstat(ffd).st_mode):  # swapped since the lstat
            raise PathError(f"{path}: not a regular file; not read")
        os.set_blocking(ffd, True)
        return os.fdopen(ffd, "rb")
    except BaseException:
        os.close(ffd)
        raise


def _open_no_follow(name: str, flags: int, dir_fd: int, shown: str) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise PathError(f"{shown}: no such file") from None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):  # a symlink on the way
            raise PathError(f"{shown}: a symlink or not a folder on the way; not read") from None
        raise


def read_inside(root: Path, path: str, limit: int = MAX_READ_BYTES) -> str:
    """The UTF-8 text of `path` read through `open_inside`; PathError when it may not be
    read, is over `limit` bytes or is not UTF-8. OSError for the rest (permissions...)."""
    with open_inside(root, path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise PathError(f"{path}: over {limit} bytes; not read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PathError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def is_regular_inside(root: Path, path: str) -> bool:
    """Whether `open_inside` would open `path` (checked without opening it)."""
    try:
        confine(root, path)
        parts = [p for p in PurePosixPath(path.replace("\\", "/")).parts if p not in (".", "")]
        here = root.resolve()
        for part in parts:
            here = here / part
            st = os.lstat(here)
            if stat.S_ISLNK(st.st_mode):
                return False
        return bool(parts) and stat.S_ISREG(st.st_mode)
    except (PathError, OSError):
        return False

"""Repo confinement shared by every tool: a model-given path → a real path inside the root.

Refused: absolute paths, `..` segments, and anything whose resolved location (symlinks
followed) lies outside the root. Does no I/O beyond resolving the path.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath


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
    root = root.resolve()
    full = (root / Path(*p.parts)).resolve()  # follows symlinks, also for missing tails
    if full != root and root not in full.parents:
        raise PathError(f"{path}: resolves outside the repo (symlink?); refused")
    if ".git" in full.relative_to(root).parts:
        raise PathError(f"{path}: the .git folder is off limits")
    return full


def relative(root: Path, full: Path) -> str:
    """`full` as a repo-relative POSIX path."""
    return full.relative_to(root.resolve()).as_posix()

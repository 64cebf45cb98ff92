"""`write_file`: create or replace a file atomically (temp file + rename).

An existing file keeps its mode; a new one gets what `open()` would give it (0o666 less the
umask), not the 0o600 of the temp file. The folders are opened one by one from the repo root
without following symlinks (missing ones are created that way too), and every later step
goes through the last handle; after the temp file is created there, the folder actually held
is checked again (inside the repo, not its .git). A parent swapped for a symlink between the
path check and the write therefore cannot redirect the write. Before any folder is made, the
path is checked as a write (tools/_paths.check_resolved with `write`: not in the git folder
of a nested repository either).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from ._base import ToolContext, ToolResult
from ._paths import PathError, check_resolved, confine, relative

MAX_CONTENT = 200_000

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "maxLength": 200, "description": "path relative to the repo root"},
        "content": {"type": "string", "maxLength": MAX_CONTENT, "description": "the whole new content"},
    },
    "required": ["path", "content"],
    "additionalProperties": False,
}
DESCRIPTION = "Create a file, or replace a whole file: `content` is the complete new file."


def _umask() -> int:
    """The process umask. Linux reports it in /proc; elsewhere set-and-restore is the only way
    (racy against threads creating files at that instant, hence the /proc path first)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _held_folder(dfd: int, parent: Path) -> Path:
    """Where the folder open as `dfd` really is now."""
    proc = f"/proc/self/fd/{dfd}"
    if os.path.exists(proc):
        return Path(os.readlink(proc))
    real = Path(os.path.realpath(parent))  # elsewhere: the path must still lead to that folder
    here, there = os.fstat(dfd), os.stat(real)
    if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino):
        raise PathError(f"{parent.name}: the folder changed while writing; refused")
    return real


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def _open_folder(root: Path, parent: Path) -> int:
    """A handle on `parent` (resolved, inside `root`), reached from `root` one folder at a
    time without following a symlink; missing folders are created on the way."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parent.relative_to(root).parts:
            try:
                os.mkdir(part, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                nxt = os.open(part, _DIR_FLAGS | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
            except (NotADirectoryError, OSError) as e:
                if isinstance(e, NotADirectoryError) or e.errno == errno.ELOOP:  # a symlink now
                    raise PathError(f"{part}: not a folder, or swapped for a symlink; refused") from None
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def atomic_write(full: Path, content: str, root: Path) -> None:
    """Write through a temp file in the same folder and rename over `full`; keeps the mode.
    PathError when the folder is found outside `root` (or in .git) once the temp file exists."""
    root = root.resolve()
    check_resolved(root, full, full.name, write=True)  # before any folder is made
    dfd = _open_folder(root, full.parent)
    try:
        try:
            mode = stat.S_IMODE(os.stat(full.name, dir_fd=dfd).st_mode)
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        tmp = f".{full.name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o600, dir_fd=dfd)
        try:
            check_resolved(root, _held_folder(dfd, full.parent) / full.name, full.name)
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.write(content)
                os.fchmod(f.fileno(), mode)
            os.replace(tmp, full.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            raise
    finally:
        os.close(dfd)


def write_file(ctx: ToolContext, path: str, content: str) -> ToolResult:
    try:
        full = confine(ctx.root, path)
        if full.is_dir():
            return ToolResult.error(f"{path} is a directory")
        existed = full.exists()
        atomic_write(full, content, ctx.root)
    except PathError as e:
        return ToolResult.error(str(e))
    except OSError as e:
        return ToolResult.error(f"{path}: {e.strerror or e}")
    verb = "replaced" if existed else "created"
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return ToolResult(True, f"{verb} {path} ({lines} lines)", (relative(ctx.root, full),))

"""`write_file`: create or replace a file atomically (temp file + rename).

An existing file keeps its mode; a new one gets what `open()` would give it (0o666 less the
umask), not the 0o600 of the temp file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ._base import ToolContext, ToolResult
from ._paths import PathError, confine, relative

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
DESCRIPTION = "Create a file or replace its whole content."


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


def atomic_write(full: Path, content: str) -> None:
    """Write through a temp file in the same folder and rename over `full`; keeps the mode."""
    mode = stat.S_IMODE(full.stat().st_mode) if full.exists() else 0o666 & ~_umask()
    full.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{full.name}.", suffix=".tmp", dir=full.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(content)
        os.chmod(tmp, mode)
        os.replace(tmp, full)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_file(ctx: ToolContext, path: str, content: str) -> ToolResult:
    try:
        full = confine(ctx.root, path)
        if full.is_dir():
            return ToolResult.error(f"{path} is a directory")
        existed = full.exists()
        atomic_write(full, content)
    except PathError as e:
        return ToolResult.error(str(e))
    except OSError as e:
        return ToolResult.error(f"{path}: {e.strerror or e}")
    verb = "replaced" if existed else "created"
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return ToolResult(True, f"{verb} {path} ({lines} lines)", (relative(ctx.root, full),))

"""`write_file`: create or replace a file atomically (temp file + rename), keeping its mode."""

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


def atomic_write(full: Path, content: str) -> None:
    """Write through a temp file in the same folder and rename over `full`; keeps the mode."""
    mode = stat.S_IMODE(full.stat().st_mode) if full.exists() else None
    full.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{full.name}.", suffix=".tmp", dir=full.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(content)
        if mode is not None:
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

"""`edit_file`: exact search/replace edits; each `old` must match the file exactly once.

All edits of one call apply in order to the file's text in memory and are written together
(atomically) only when every one of them matched; otherwise nothing changes and the error
says what to fix: where the closest lines are, or how many times and where the text matched.
"""

from __future__ import annotations

from ._base import ToolContext, ToolResult
from ._paths import PathError, relative
from .edits import plan
from .write_file import atomic_write

MAX_EDITS = 4  # weak models repeat edits until the cap
MAX_OLD = 4000
MAX_NEW = 8000

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "maxLength": 200, "description": "path relative to the repo root"},
        "edits": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_EDITS,
            "items": {
                "type": "object",
                "properties": {
                    "old": {"type": "string", "minLength": 1, "maxLength": MAX_OLD,
                            "description": "exact text currently in the file (must occur once)"},
                    "new": {"type": "string", "maxLength": MAX_NEW, "description": "replacement text"},
                },
                "required": ["old", "new"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["path", "edits"],
    "additionalProperties": False,
}
DESCRIPTION = ("Change part of a file: each edit replaces `old` (text copied exactly from the file, "
               "occurring once) with `new`; edits apply in order.")


def edit_file(ctx: ToolContext, path: str, edits: list[dict]) -> ToolResult:
    try:
        planned = plan(ctx.root, "edit_file", {"path": path, "edits": edits})
        if planned.problem:
            return ToolResult.error(planned.problem + ("; no change was made" if planned.old is not None else ""))
        if planned.new == planned.old:
            return ToolResult.error(f"the edits leave {path} unchanged")
        atomic_write(planned.full, planned.new, ctx.root)
    except PathError as e:
        return ToolResult.error(str(e))
    except OSError as e:
        return ToolResult.error(f"{path}: {e.strerror or e}")
    return ToolResult(True, f"edited {path} ({len(edits)} edit(s)):\n{planned.diff(context=1)}",
                      (relative(ctx.root, planned.full),))

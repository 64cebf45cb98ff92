"""`edit_file`: exact search/replace edits; each `old` must match the file exactly once.

All edits of one call apply in order to the file's text in memory and are written together
(atomically) only when every one of them matched; otherwise nothing changes and the error
says what to fix: where the closest lines are, or how many times and where the text matched.
"""

from __future__ import annotations

import difflib

from ._base import ToolContext, ToolResult
from ._paths import PathError, confine, relative
from .read_file import MAX_FILE_BYTES, open_regular, read_text
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


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _closest(text: str, old: str) -> str:
    """The file lines that look most like `old`, with their line numbers."""
    lines = text.splitlines()
    want = old.strip("\n").splitlines() or [old]
    n = len(want)
    best, best_at = 0.0, -1
    for i in range(max(len(lines) - n + 1, 1)):
        score = difflib.SequenceMatcher(None, "\n".join(lines[i : i + n]), "\n".join(want)).ratio()
        if score > best:
            best, best_at = score, i
    if best_at < 0 or best < 0.3:
        return "no similar lines either; read the file first"
    shown = "\n".join(lines[best_at : best_at + n])
    return f"the closest text is at lines {best_at + 1}-{best_at + n}:\n{shown}"


def occurrences(text: str, old: str, limit: int = 1000) -> list[int]:
    """Start offsets of `old` in `text`, overlapping ones included ("aa" occurs twice in
    "aaa"): an edit whose text overlaps itself is ambiguous. At most `limit` of them."""
    starts, at = [], text.find(old)
    while at >= 0 and len(starts) < limit:
        starts.append(at)
        at = text.find(old, at + 1)
    return starts


def apply_edits(text: str, edits: list[dict], path: str) -> tuple[str | None, str]:
    """(new text, "") or (None, error message) for the whole sequence of edits."""
    for k, edit in enumerate(edits, 1):
        old, new = edit["old"], edit["new"]
        which = f"edit {k}" if len(edits) > 1 else "the edit"
        if not old:
            return None, f"{which}: `old` is empty; to create or replace a whole file use write_file"
        found = occurrences(text, old)
        count = len(found)
        if count == 0:
            return None, f"{which}: `old` text not found in {path}; {_closest(text, old)}"
        if count > 1:
            lines = ", ".join(str(_line_of(text, at)) for at in found[:10])
            more = "+" if count == 1000 else ""
            return None, (f"{which}: `old` text occurs {count}{more} times in {path} (overlaps "
                          f"counted; at lines {lines}); include more surrounding lines so it occurs once")
        text = text[:found[0]] + new + text[found[0] + len(old):]
    return text, ""


def edit_file(ctx: ToolContext, path: str, edits: list[dict]) -> ToolResult:
    try:
        full = confine(ctx.root, path)
        if not full.exists():
            return ToolResult.error(f"{path}: no such file (use write_file to create it)")
        with open_regular(full, path) as f:  # FIFOs and devices refused, never opened
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            return ToolResult.error(f"{path} is over {MAX_FILE_BYTES // 1024} KB; too large to edit here")
        text = read_text(data)
        if text is None:
            return ToolResult.error(f"{path} is a binary file; cannot edit it")
        new_text, problem = apply_edits(text, edits, path)
        if new_text is None:
            return ToolResult.error(problem + "; no change was made")
        if new_text == text:
            return ToolResult.error(f"the edits leave {path} unchanged")
        atomic_write(full, new_text, ctx.root)
    except PathError as e:
        return ToolResult.error(str(e))
    except OSError as e:
        return ToolResult.error(f"{path}: {e.strerror or e}")
    diff = "".join(difflib.unified_diff(
        text.splitlines(keepends=True), new_text.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=1,
    ))
    return ToolResult(True, f"edited {path} ({len(edits)} edit(s)):\n{diff}", (relative(ctx.root, full),))

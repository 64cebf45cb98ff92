"""What an edit would do, computed once: the tool, the approval preview and ACP all call `plan`.

`plan(root, name, arguments)` reads the file the way `edit_file`/`write_file` do (confined to
the root, regular files only, the size limit, text only) and applies `edit_file`'s exact
search/replace rules in memory: each `old` must match the file exactly once, all edits apply
in order, and nothing is written. The result carries the old and new text, or why it fails.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._paths import PathError, confine
from .read_file import MAX_FILE_BYTES, open_regular, read_text


@dataclass(frozen=True)
class PlannedEdit:
    path: str  # as the call names it
    full: Path | None  # where it is (None: the path itself is refused)
    old: str | None  # the file's text now (None: no such file yet)
    new: str | None  # its text after the edit (None: the edit fails)
    problem: str = ""  # why it fails ('' when it applies)

    def diff(self, context: int = 3) -> str:
        old, new = (self.old or "").splitlines(keepends=True), (self.new or "").splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, new, f"a/{self.path}", f"b/{self.path}", n=context))


def read_existing(full: Path, path: str) -> str | None:
    """The text of an existing file (None when there is none); PathError for what cannot be edited."""
    if not full.exists():
        return None
    with open_regular(full, path) as f:  # FIFOs and devices refused, never opened
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise PathError(f"{path} is over {MAX_FILE_BYTES // 1024} KB; too large to edit here")
    text = read_text(data)
    if text is None:
        raise PathError(f"{path} is a binary file; cannot edit it")
    return text


def plan(root: Path, name: str, arguments: dict[str, Any]) -> PlannedEdit:
    """What `name` (edit_file or write_file) with `arguments` would make of its file now.
    OSError (permissions, a vanished folder) propagates for the caller to report."""
    path = str(arguments.get("path", ""))
    try:
        full = confine(root, path)
        old = read_existing(full, path)
    except PathError as e:
        return PlannedEdit(path, None, None, None, str(e))
    if name == "write_file":
        return PlannedEdit(path, full, old, str(arguments.get("content", "")))
    if old is None:
        return PlannedEdit(path, full, None, None, f"{path}: no such file (use write_file to create it)")
    new, problem = apply_edits(old, list(arguments.get("edits", [])), path)
    return PlannedEdit(path, full, old, new, problem)


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def closest(text: str, old: str) -> str:
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
            return None, f"{which}: `old` text not found in {path}; {closest(text, old)}"
        if count > 1:
            lines = ", ".join(str(_line_of(text, at)) for at in found[:10])
            more = "+" if count == 1000 else ""
            return None, (f"{which}: `old` text occurs {count}{more} times in {path} (overlaps "
                          f"counted; at lines {lines}); include more surrounding lines so it occurs once")
        text = text[:found[0]] + new + text[found[0] + len(old):]
    return text, ""

"""`grep`: a regex search over the repo's (non-ignored, text) files, output capped."""

from __future__ import annotations

import re

from ._base import ToolContext, ToolResult, cap
from ._paths import PathError, confine
from .list_files import select
from .read_file import MAX_FILE_BYTES, read_text

MAX_MATCHES = 100
MAX_LINE = 240

SCHEMA = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "minLength": 1, "maxLength": 300, "description": "Python regular expression"},
        "path": {"type": "string", "maxLength": 200, "description": "file or folder to search (default: repo)"},
        "glob": {"type": "string", "maxLength": 200, "description": "only files matching this glob, e.g. '*.py'"},
        "ignore_case": {"type": "boolean"},
    },
    "required": ["pattern"],
    "additionalProperties": False,
}
DESCRIPTION = "Search file contents with a regex; prints path:line: text for each match."


def grep(
    ctx: ToolContext, pattern: str, path: str | None = None, glob: str | None = None,
    ignore_case: bool = False,
) -> ToolResult:
    try:
        rx = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as e:
        return ToolResult.error(f"bad regex {pattern!r}: {e}")
    try:
        files = select(ctx, glob, path)
    except PathError as e:
        return ToolResult.error(str(e))
    hits: list[str] = []
    total = 0
    for name in files:
        try:
            full = confine(ctx.root, name)
            if full.stat().st_size > MAX_FILE_BYTES:
                continue
            text = read_text(full.read_bytes())
        except (PathError, OSError):
            continue
        if text is None:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if rx.search(line):
                total += 1
                if len(hits) < MAX_MATCHES:
                    hits.append(f"{name}:{n}: {line[:MAX_LINE]}")
    if not hits:
        return ToolResult(True, "no matches")
    more = f"\n[... {total - len(hits)} more matches]" if total > len(hits) else ""
    return ToolResult(True, cap("\n".join(hits) + more, ctx.max_output_chars))

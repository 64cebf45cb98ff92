"""`read_file`: a text file's content, whole or a line range; refuses binaries and huge files."""

from __future__ import annotations

from ._base import ToolContext, ToolResult
from ._paths import PathError, confine

MAX_FILE_BYTES = 512 * 1024  # beyond this, ask for a line range

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "maxLength": 200, "description": "path relative to the repo root"},
        "start_line": {"type": "integer", "minimum": 1, "maximum": 1000000, "description": "first line (1-based)"},
        "end_line": {"type": "integer", "minimum": 1, "maximum": 1000000, "description": "last line, inclusive"},
    },
    "required": ["path"],
    "additionalProperties": False,
}
DESCRIPTION = "Read a text file of the repo (optionally only lines start_line..end_line)."


def read_text(data: bytes) -> str | None:
    """Decoded text, or None when the bytes look binary (NUL byte or not UTF-8)."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def read_file(
    ctx: ToolContext, path: str, start_line: int | None = None, end_line: int | None = None
) -> ToolResult:
    try:
        full = confine(ctx.root, path)
        if not full.is_file():
            return ToolResult.error(f"{path}: no such file")
        size = full.stat().st_size
        if size > MAX_FILE_BYTES and start_line is None and end_line is None:
            return ToolResult.error(
                f"{path} is {size} bytes (limit {MAX_FILE_BYTES}); read it in parts with start_line/end_line"
            )
        data = full.read_bytes()
    except PathError as e:
        return ToolResult.error(str(e))
    except OSError as e:
        return ToolResult.error(f"{path}: {e.strerror or e}")
    text = read_text(data)
    if text is None:
        return ToolResult.error(f"{path} is a binary file ({size} bytes); not shown")
    lines = text.splitlines(keepends=True)
    first = start_line or 1
    last = min(end_line or len(lines), len(lines))
    if first > max(len(lines), 1) or last < first:
        return ToolResult.error(f"{path} has {len(lines)} lines; range {first}-{end_line} is empty")
    body = "".join(lines[first - 1 : last])
    if len(body) > ctx.max_output_chars:
        cut = body[: ctx.max_output_chars]
        shown = first + cut.count("\n") - 1
        return ToolResult(True, cut + f"\n[... cut at line {shown} of {len(lines)}; read on with start_line={shown + 1}]")
    if start_line or end_line:
        return ToolResult(True, f"[{path} lines {first}-{last} of {len(lines)}]\n{body}")
    return ToolResult(True, body)

"""`read_file`: a text file's content, whole or a line range; refuses binaries and huge files.

Only regular files are read: FIFOs, sockets and devices are refused from their `stat`,
before anything opens them (opening a device can act, and a FIFO would block), and the
open itself is non-blocking in case the file was swapped meanwhile. A whole read is capped
at MAX_FILE_BYTES; a line range streams, reading only as far as the range (and never past
MAX_SCAN_BYTES), so lines 1-10 of a 1 GB file cost a few kilobytes. Total line counts are
given for files up to COUNT_LIMIT_BYTES.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from ._base import ToolContext, ToolResult
from ._paths import PathError, confine

MAX_FILE_BYTES = 512 * 1024  # beyond this, ask for a line range
MAX_SCAN_BYTES = 256 * 1024 * 1024  # a line range starting further in is refused
COUNT_LIMIT_BYTES = 32 * 1024 * 1024  # "lines a-b of N" for files up to this size
_CHUNK = 1 << 20

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

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def read_text(data: bytes) -> str | None:
    """Decoded text, or None when the bytes look binary (NUL byte or not UTF-8)."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _not_regular(mode: int, shown: str) -> str:
    """'' for a regular file, else why `shown` cannot be read."""
    if stat.S_ISREG(mode):
        return ""
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"{shown} is {kind}, not a regular file; not read"


def open_regular(full: Path, shown: str) -> BinaryIO:
    """`full` opened for binary reading if it is a regular file, else PathError (message for
    the model). Never blocks and never opens a device. OSError for the rest (permissions...)."""
    try:
        why = _not_regular(os.stat(full).st_mode, shown)
    except FileNotFoundError:
        raise PathError(f"{shown}: no such file") from None
    if why:
        raise PathError(why)
    fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        why = _not_regular(os.fstat(fd).st_mode, shown)  # swapped since the stat?
        if why:
            raise PathError(why)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _count_lines(f: BinaryIO, size: int) -> int | None:
    """Lines in the file (a last line without newline counts), or None when it is too big."""
    if size > COUNT_LIMIT_BYTES:
        return None
    f.seek(0)
    n, last = 0, b"\n"
    while chunk := f.read(_CHUNK):
        n, last = n + chunk.count(b"\n"), chunk[-1:]
    return n + (last != b"\n")


def _skip_lines(f: BinaryIO, count: int) -> int:
    """Move past `count` lines from the start; how many were skipped (fewer at end of file
    or past MAX_SCAN_BYTES)."""
    f.seek(0)
    skipped = offset = 0
    while skipped < count and offset < MAX_SCAN_BYTES:
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        n = chunk.count(b"\n")
        if skipped + n < count:
            skipped, offset = skipped + n, offset + len(chunk)
            continue
        pos = -1
        for _ in range(count - skipped):
            pos = chunk.index(b"\n", pos + 1)
        skipped, offset = count, offset + pos + 1
    f.seek(offset)
    return skipped


def _collect(f: BinaryIO, first: int, last: int, budget: int) -> tuple[bytes, int, bool]:
    """From line `first` on: (bytes of lines up to `last`, stopping once past `budget` bytes;
    number of the last line begun; whether the budget cut it)."""
    body, line = bytearray(), first - 1
    while line < last:
        piece = f.readline(budget + 1 - len(body))
        if not piece:
            break
        if not body or body.endswith(b"\n"):
            line += 1
        body += piece
        if len(body) > budget:
            return bytes(body), line, True
    return bytes(body), line, False


def _decode(data: bytes, cut: bool) -> str | None:
    """Text of `data`; a cut may split the last character. None when binary."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        return data[: e.start].decode("utf-8") if cut and e.start >= len(data) - 4 else None


def _read_range(f: BinaryIO, path: str, size: int, first: int, end: int | None, limit: int) -> ToolResult:
    head = os.pread(f.fileno(), 8192, 0)
    if b"\x00" in head:
        return ToolResult.error(f"{path} is a binary file ({size} bytes); not shown")
    total = _count_lines(f, size)
    of = f"of {total}" if total is not None else f"of a {size}-byte file"
    skipped = _skip_lines(f, first - 1)
    if skipped < first - 1:
        if f.tell() >= MAX_SCAN_BYTES:
            return ToolResult.error(f"line {first} of {path} lies beyond its first {MAX_SCAN_BYTES} bytes; "
                                    "not reachable with read_file (try grep)")
        return ToolResult.error(f"{path} has {total if total is not None else skipped} lines; "
                                f"range {first}-{end or ''} is empty")
    data, last, cut = _collect(f, first, end or 10**9, limit)
    text = _decode(data, cut)
    if text is None:
        return ToolResult.error(f"{path} is not UTF-8 text around line {first}; not shown")
    if not text:
        return ToolResult.error(f"{path} has {total if total is not None else first - 1} lines; "
                                f"range {first}-{end or ''} is empty")
    if cut or len(text) > limit:
        text = text[:limit]
        done = first + text.count("\n") - 1  # the last line shown whole
        if done < first:
            return ToolResult(True, text + f"\n[... line {first} is cut after {len(text)} characters; "
                                           f"read on with start_line={first + 1}]")
        return ToolResult(True, text + f"\n[... cut at line {done} {of}; read on with start_line={done + 1}]")
    return ToolResult(True, f"[{path} lines {first}-{last} {of}]\n{text}")


def _read_whole(f: BinaryIO, path: str, size: int, limit: int) -> ToolResult:
    if size > MAX_FILE_BYTES:
        return ToolResult.error(
            f"{path} is {size} bytes (limit {MAX_FILE_BYTES}); read it in parts with start_line/end_line")
    text = read_text(f.read(MAX_FILE_BYTES))
    if text is None:
        return ToolResult.error(f"{path} is a binary file ({size} bytes); not shown")
    if len(text) <= limit:
        return ToolResult(True, text)
    cut = text[:limit]
    shown = max(cut.count("\n"), 1)
    total = text.count("\n") + (not text.endswith("\n"))
    return ToolResult(True, cut + f"\n[... cut at line {shown} of {total}; read on with start_line={shown + 1}]")


def read_file(
    ctx: ToolContext, path: str, start_line: int | None = None, end_line: int | None = None
) -> ToolResult:
    if start_line and end_line and end_line < start_line:
        return ToolResult.error(f"end_line {end_line} is before start_line {start_line}")
    try:
        full = confine(ctx.root, path)
        with open_regular(full, path) as f:
            size = os.fstat(f.fileno()).st_size
            if start_line is None and end_line is None:
                return _read_whole(f, path, size, ctx.max_output_chars)
            return _read_range(f, path, size, start_line or 1, end_line, ctx.max_output_chars)
    except PathError as e:
        return ToolResult.error(str(e))
    except OSError as e:
        return ToolResult.error(f"{path}: {e.strerror or e}")

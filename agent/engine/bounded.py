"""One bounded reader for the files and bytes the engine and the agent did not write themselves
this moment: caches on disk, converted weights, GGUF headers, stream-json lines.

- `open_regular(path, follow)`: opens regular files only, without blocking (a FIFO, a device,
  a folder is refused; `follow=False` refuses a symlink too, for cache entries) and checks the
  size against a cap before anything is read.
- `read_bytes` / `read_json` / `loads_json`: a file or text as bytes or JSON, with a size cap,
  strict UTF-8 and a nesting cap (checked without recursion before `json.loads`, by
  agent/safe_input.py).
- `Cursor`: little-endian fields of a binary header where every count is checked against the
  bytes left before anything is allocated (a count that cannot fit is an error).

Every failure is one `InputError` with a one-line message (exit code 2 at the command line);
a missing file stays `FileNotFoundError` (callers treat it as absent, not as damage). What a
document means is the caller's business: this module checks shape and size only.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from pathlib import Path
from typing import Any, BinaryIO

from ..safe_input import MAX_DEPTH, loads as _json_loads
from .errors import SpecAgentError

MAX_JSON_BYTES = 64 << 20  # caches and manifests are far smaller; a tokenizer.json ~ 20 MB
_ERRNO_LOOP = 40  # ELOOP: O_NOFOLLOW met a symlink


class InputError(SpecAgentError, ValueError):
    """A file, line or header that cannot be read safely; the message is one line."""

    exit_code = 2

    def __init__(self, message: str, why: str = ""):
        super().__init__(" ".join(str(message).split()))
        self.why = why or str(self)  # the message without the name of what was read


def _bad(what: str, why: str) -> InputError:
    return InputError(f"{what}: {why}", why)


def _describe(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return what
    return "not a regular file"


def open_regular(path: Path | str, max_bytes: int | None = None, follow: bool = True) -> BinaryIO:
    """`path` opened for reading in binary, once it is known to be a regular file of at most
    `max_bytes`; `follow=False` also refuses a symlink. Never blocks on a FIFO or device."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == _ERRNO_LOOP and not follow:
            raise _bad(str(path), "is a symbolic link (not followed here)") from None
        raise _bad(str(path), f"cannot open ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _bad(str(path), f"is {_describe(st.st_mode)}, not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise _bad(str(path), f"{st.st_size} bytes, more than the {max_bytes} allowed")
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
        f.raw.name = str(path)  # readers that pick a format by name (mx.load) see the path
        return f
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path | str, max_bytes: int, follow: bool = True) -> bytes:
    """The whole of regular file `path`, at most `max_bytes` (InputError otherwise)."""
    with open_regular(path, max_bytes, follow) as f:
        try:
            data = f.read(max_bytes + 1)
        except OSError as e:
            raise _bad(str(path), f"cannot read ({e.strerror or e})") from None
    if len(data) > max_bytes:  # it grew after the size check
        raise _bad(str(path), f"more than the {max_bytes} bytes allowed")
    return data


def loads_json(data: bytes | str, what: str, max_bytes: int = MAX_JSON_BYTES,
               max_depth: int = MAX_DEPTH) -> Any:
    """JSON `data` (UTF-8 bytes or text) parsed; InputError naming `what` when it is too large,
    not UTF-8, nested deeper than `max_depth` or not JSON. Lone surrogates become U+FFFD."""
    if len(data) > max_bytes:
        raise _bad(what, f"{len(data)} bytes of JSON, more than the {max_bytes} allowed")
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise _bad(what, f"not UTF-8 text (byte {e.start})") from None
    try:
        return _json_loads(data, max_depth)
    except json.JSONDecodeError as e:
        raise _bad(what, f"not JSON ({e.msg}, line {e.lineno} column {e.colno})") from None
    except (ValueError, RecursionError) as e:  # e.g. a number too long for int()
        raise _bad(what, f"not JSON ({type(e).__name__})") from None


def read_json(path: Path | str, max_bytes: int = MAX_JSON_BYTES, follow: bool = True,
              max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document in regular file `path` (InputError when it is not one, within caps)."""
    return loads_json(read_bytes(path, max_bytes, follow), str(path), max_bytes, max_depth)


class Cursor:
    """Little-endian fields of `data` from `pos`; every read and every count is checked
    against the bytes left, so a count that cannot fit fails before any allocation."""

    def __init__(self, data: bytes, what: str, pos: int = 0):
        self.data, self.what, self.pos = data, what, pos

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def fail(self, why: str) -> InputError:
        return InputError(f"{self.what}: {why} (at byte {self.pos})")

    def take(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        if size > self.left:
            raise self.fail("truncated")
        (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return value

    def count(self, item_bytes: int, cap: int, what: str = "count") -> int:
        """A u64 count of items taking at least `item_bytes` each: at most `cap`, and all of
        them must fit in the bytes left."""
        n = self.take("Q")
        if n > cap or n * max(item_bytes, 0) > self.left:
            raise self.fail(f"{what} {n} does not fit (at most {min(cap, self.left // max(item_bytes, 1))})")
        return n

    def raw(self, n: int) -> bytes:
        if n < 0 or n > self.left:
            raise self.fail(f"length {n} runs past the end")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def string(self, cap: int) -> str:
        """A u64-length-prefixed UTF-8 string of at most `cap` bytes (bad bytes become U+FFFD)."""
        n = self.count(1, cap, "string length")
        return self.raw(n).decode("utf-8", errors="replace")

"""The disk tier of the prefix store: one safetensors file per stored prompt prefix.

`<root>/<model_key>/<kind>-<n>-<tokens hash>-<data hash>.safetensors`, written with mlx-lm's
`save_prompt_cache` (its metadata carries the token list) and read with `load_prompt_cache`.
Before a file is used, its tensor data must match the hash in its name, its token list the
token hash and length, its model key the folder; a file failing any check is deleted with one
warning; every read goes through agent/engine/bounded.py (regular files only, no symlinks,
header size and JSON nesting capped), so a FIFO, a device or a link there is a bad file too,
never a read that blocks. Writes go to a temporary file renamed into place (a reader sees no file or all of it);
turn files that a new file extends are deleted; total size is bounded, least recently used
(mtime) first, system prompts last. Several processes may share the folder.

Not here: choosing what to store (prefix_store.py), locking between processes (files are
immutable once renamed; a reader that loses a race to eviction sees a miss).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import struct
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable, Sequence

from .bounded import InputError, loads_json, open_regular

FORMAT = "spec-agent-prefix-1"
DISK_MIN_GAIN = 64  # a turn is written to disk once it covers this many tokens more than before
STALE_TEMP_S = 600.0  # temporary files older than this were left by a killed writer
_NAME = re.compile(r"^(turn|system)-(\d+)-([0-9a-f]{16})-([0-9a-f]{16})\.safetensors$")
_MAX_HEADER = 64 << 20  # a safetensors header bigger than this is not ours
_DATA_ERRORS = (InputError, ValueError, RuntimeError, TypeError, KeyError, IndexError, AttributeError,
                struct.error, UnicodeDecodeError)


def shared(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token tuples (slice compares run in C)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid)
    return lo


def usable(stored: Sequence[int], trimmable: bool, tokens: Sequence[int]) -> int:
    """How many leading tokens of `tokens` a stored entry can serve."""
    n = shared(stored, tokens)
    return n if n == len(stored) or trimmable else 0


def digest(data: Any) -> str:
    """16 hex digits of sha256 over bytes, or over a token tuple's JSON."""
    if isinstance(data, tuple):
        data = json.dumps(list(data)).encode()
    return hashlib.sha256(data).hexdigest()[:16]


class DiskTier:
    """Safetensors files `<root>/<model_key>/<kind>-<n>-<tokens hash>-<data hash>.safetensors`."""

    def __init__(self, root: Path, max_bytes: int, warn: Callable[[str], None]):
        self.root, self.max_bytes, self.warn = Path(root), max_bytes, warn
        self.min_gain = DISK_MIN_GAIN
        self.broken = False  # set after a failed write: no more writes in this process
        self._meta: dict[str, tuple[tuple[int, ...], bool]] = {}  # file name -> (tokens, trimmable)
        self._ignored: set[str] = set()  # rejected names that could not be deleted: warned once
        self._lock = threading.RLock()
        self._clean_temps()

    def _clean_temps(self) -> None:
        now = time.time()
        for p in self.root.glob("*/.*.tmp"):
            try:
                if now - p.stat().st_mtime > STALE_TEMP_S:
                    p.unlink()
            except OSError:
                pass

    def _reject(self, path: Path, why: str) -> None:
        """One warning per bad file: it is deleted (or, when that fails, e.g. a folder,
        ignored from now on), so no second warning can come."""
        with self._lock:
            self._meta.pop(path.name, None)
            if path.name in self._ignored:
                return
        try:
            path.unlink()
        except FileNotFoundError:
            return  # another process got there first
        except OSError:
            with self._lock:
                self._ignored.add(path.name)
        self.warn(f"prefix cache: ignored and deleted {path} ({why})")

    def _files(self, key: str) -> list[tuple[Path, re.Match]]:
        try:
            names = os.listdir(self.root / key)
        except OSError:
            return []
        return [(self.root / key / n, m) for n in names if (m := _NAME.match(n))]

    def _tokens(self, path: Path, m: re.Match) -> tuple[tuple[int, ...], bool] | None:
        """(tokens, trimmable) from a file's header, checked against its name; None if bad."""
        with self._lock:
            if path.name in self._meta:
                return self._meta[path.name]
            if path.name in self._ignored:
                return None
        try:
            with open_regular(path, follow=False) as f:
                meta = _header(f, path)[0]["__metadata__"]
            tokens = _token_list(meta["0.tokens"], path)
            if meta["0.format"] != FORMAT or len(tokens) != int(m[2]) or digest(tokens) != m[3]:
                raise ValueError("its token list does not match its name")
        except FileNotFoundError:
            return None
        except (OSError, *_DATA_ERRORS) as e:
            self._reject(path, f"unreadable header: {e.why if isinstance(e, InputError) else e}")
            return None
        value = (tokens, meta.get("0.trimmable") == "1")
        with self._lock:
            self._meta[path.name] = value
        return value

    def candidates(self, key: str, tokens: tuple[int, ...], above: int) -> list[tuple[int, Path]]:
        """(usable tokens, path) of files serving more than `above` tokens, best first."""
        out = []
        for path, m in sorted(self._files(key), key=lambda f: -int(f[1][2])):
            if min(int(m[2]), len(tokens)) <= above:
                continue
            got = self._tokens(path, m)
            if got is not None and (n := usable(*got, tokens)) > above:
                out.append((n, path))
        return sorted(out, key=lambda c: -c[0])

    def load(self, path: Path, key: str) -> tuple[tuple[int, ...], list, str] | None:
        """(tokens, cache, kind) of a file after checking everything; None (deleted) if bad."""
        import mlx.core as mx
        from mlx_lm.models.cache import load_prompt_cache

        m = _NAME.match(path.name)
        try:
            with open_regular(path, follow=False) as f:  # one open: checked and read alike
                header_size = _header(f, path)[1]
                if _data_digest(f, header_size) != m[4]:
                    raise ValueError("tensor data does not match its checksum (corrupt or truncated)")
                f.seek(0)
                cache, meta = load_prompt_cache(f, return_metadata=True)
            tokens = _token_list(meta["tokens"], path)
            if meta.get("format") != FORMAT or meta.get("model_key") != key:
                raise ValueError("written for another model or format")
            if len(tokens) != int(m[2]) or digest(tokens) != m[3]:
                raise ValueError("its token list does not match its name")
            if any(c.offset != len(tokens) for c in cache):
                raise ValueError("cache length does not match its token list")
            mx.eval([c.state for c in cache])  # read now: the file may be evicted later
        except FileNotFoundError:
            return None
        except (OSError, *_DATA_ERRORS) as e:
            if os.path.lexists(path):
                self._reject(path, str(e).splitlines()[0] if str(e) else type(e).__name__)
            return None
        try:
            os.utime(path)  # LRU by mtime
        except OSError:
            pass
        return tokens, cache, m[1]

    def wants(self, key: str, tokens: tuple[int, ...], kind: str) -> bool:
        """Is writing `tokens` worth it (not already stored, enough new tokens for a turn)?"""
        if self.broken:
            return False
        best = 0
        for path, m in self._files(key):
            got = self._tokens(path, m)
            if got is None:
                continue
            if kind == "system":
                if m[1] == "system" and got[0] == tokens:
                    return False
            elif got[0][: len(tokens)] == tokens and (got[1] or len(got[0]) == len(tokens)):
                return False
            else:
                best = max(best, usable(*got, tokens))
        return kind == "system" or len(tokens) - best >= max(self.min_gain, 1)

    @staticmethod
    def serialize(key: str, tokens: tuple[int, ...], cache: list, kind: str) -> memoryview:
        """The file's bytes (MLX work: call it on the engine's thread)."""
        from mlx_lm.models.cache import can_trim_prompt_cache, save_prompt_cache

        meta = {"format": FORMAT, "model_key": key, "kind": kind, "tokens": json.dumps(list(tokens)),
                "trimmable": "1" if can_trim_prompt_cache(cache) else "0"}
        buf = io.BytesIO()
        save_prompt_cache(buf, cache, meta)
        return buf.getbuffer()

    def write(self, key: str, tokens: tuple[int, ...], kind: str, trimmable: bool,
              data: memoryview) -> None:
        """Write one file atomically, drop the turns it extends, then evict to the cap."""
        if len(data) > self.max_bytes:
            return
        (size,) = struct.unpack_from("<Q", data, 0)
        name = f"{kind}-{len(tokens)}-{digest(tokens)}-{digest(data[8 + size:])}.safetensors"
        folder = self.root / key
        tmp = folder / f".{name}.{os.getpid()}-{threading.get_ident()}.tmp"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            try:
                _write_file(tmp, data)
                os.replace(tmp, folder / name)  # atomic: readers see no file or all of it
            finally:
                tmp.unlink(missing_ok=True)  # only still there when the write failed
        except OSError as e:
            self.broken = True
            self.warn(f"prefix cache: cannot write to {folder} ({e}); disk cache off")
            return
        with self._lock:
            self._meta[name] = (tokens, trimmable)
        if kind == "turn" and trimmable:  # the new file can be cut back to serve them
            self._fold(key, tokens, name)
        self._evict(keep=name)

    def _fold(self, key: str, tokens: tuple[int, ...], name: str) -> None:
        """Delete turn files whose tokens are a strict prefix of the new file's."""
        for path, m in self._files(key):
            if m[1] != "turn" or path.name == name or int(m[2]) >= len(tokens):
                continue
            got = self._tokens(path, m)
            if got is not None and tokens[: len(got[0])] == got[0]:
                path.unlink(missing_ok=True)

    def _evict(self, keep: str = "") -> None:
        files = []
        for d in self.root.iterdir() if self.root.is_dir() else []:
            for path, m in self._files(d.name):
                try:
                    st = path.stat()
                except OSError:
                    continue
                files.append((path.name == keep, m[1] == "system", st.st_mtime, st.st_size, path))
        total = sum(f[3] for f in files)
        for *_, size, path in sorted(files, key=lambda f: f[:3]):
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
        for d in self.root.iterdir():  # folders of models gone for a while (rmdir: only if empty)
            try:
                if time.time() - d.stat().st_mtime > STALE_TEMP_S:
                    d.rmdir()
            except OSError:
                pass

    def nbytes(self) -> int:
        total = 0
        for path in self.root.glob("*/*.safetensors"):
            try:
                total += path.stat().st_size
            except OSError:  # evicted meanwhile
                pass
        return total


def _header(f: BinaryIO, path: Path) -> tuple[dict[str, Any], int]:
    """(the safetensors header as JSON, its size in bytes), within caps (InputError if not)."""
    raw = f.read(8)
    if len(raw) < 8:
        raise InputError(f"{path}: truncated")
    (size,) = struct.unpack("<Q", raw)
    if size > min(_MAX_HEADER, os.fstat(f.fileno()).st_size - 8):
        raise InputError(f"{path}: header of {size} bytes does not fit")
    header = loads_json(f.read(size), str(path), _MAX_HEADER)
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict):
        raise InputError(f"{path}: header without metadata")
    return header, size


def _token_list(text: Any, path: Path) -> tuple[int, ...]:
    """A token list stored as JSON text in the metadata: whole numbers only."""
    tokens = loads_json(text, f"{path} token list") if isinstance(text, str) else None
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        raise InputError(f"{path}: token list is not a list of whole numbers")
    return tuple(tokens)


def _data_digest(f: BinaryIO, header_size: int) -> str:
    """`digest` of a safetensors file's tensor data (all after its header), read in blocks."""
    h = hashlib.sha256()
    f.seek(8 + header_size)
    while block := f.read(1 << 23):
        h.update(block)
    return h.hexdigest()[:16]


def _write_file(path: Path, data: memoryview) -> None:
    with open(path, "wb") as f:
        f.write(data)

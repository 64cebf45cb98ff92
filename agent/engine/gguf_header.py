"""Validate a GGUF file's structure before MLX reads it.

MLX's GGUF reader trusts the file: a truncated or corrupt file can crash the process. This
walks the header (metadata and tensor table) in pure Python and checks that every tensor's
bytes lie inside the file, so bad input becomes one clear `ModelLoadError` instead.
"""

from __future__ import annotations

import struct
from pathlib import Path

from .errors import ModelLoadError

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
# ggml type -> (block elements, block bytes) for the types we can size.
_BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
           9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
           14: (256, 210), 15: (256, 292), 30: (1, 2)}
_MAX_COUNT = 1 << 24


class _Reader:
    def __init__(self, data: bytes, path: Path):
        self.data, self.pos, self.path = data, 0, path

    def take(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.data):
            raise ModelLoadError(f"{self.path}: GGUF header is truncated")
        (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return value

    def count(self) -> int:
        n = self.take("Q")
        if n > _MAX_COUNT:
            raise ModelLoadError(f"{self.path}: corrupt GGUF header (count {n})")
        return n

    def string(self) -> str:
        n = self.count()
        if self.pos + n > len(self.data):
            raise ModelLoadError(f"{self.path}: GGUF header is truncated")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int):
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, n = self.take("I"), self.count()
            if etype in _SCALARS:  # skip scalar arrays without materializing them
                size = struct.calcsize("<" + _SCALARS[etype]) * n
                if self.pos + size > len(self.data):
                    raise ModelLoadError(f"{self.path}: GGUF header is truncated")
                self.pos += size
                return None
            return [self.value(etype) for _ in range(n)]
        raise ModelLoadError(f"{self.path}: corrupt GGUF metadata (value type {vtype})")


def check_gguf(path: Path) -> None:
    """Raise `ModelLoadError` unless `path` is a structurally sound GGUF file."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(min(size, 64 << 20))  # metadata (vocab included) fits in far less
    r = _Reader(head, path)
    if size < 24 or head[:4] != b"GGUF":
        raise ModelLoadError(f"{path}: not a GGUF file (bad magic)")
    r.pos = 4
    version = r.take("I")
    if version not in (2, 3):
        raise ModelLoadError(f"{path}: unsupported GGUF version {version}")
    n_tensors, n_kv = r.count(), r.count()
    alignment = 32
    for _ in range(n_kv):
        key, vtype = r.string(), r.take("I")
        val = r.value(vtype)
        if key == "general.alignment" and isinstance(val, int) and val > 0:
            alignment = val
    end = 0
    for _ in range(n_tensors):
        name, n_dims = r.string(), r.take("I")
        if n_dims > 8:
            raise ModelLoadError(f"{path}: corrupt tensor '{name}' ({n_dims} dims)")
        elems = 1
        for _ in range(n_dims):
            elems *= r.take("Q")
        ttype, offset = r.take("I"), r.take("Q")
        per, nbytes = _BLOCKS.get(ttype, (1, 0))
        end = max(end, offset + elems // per * nbytes)
    data_start = -(-r.pos // alignment) * alignment
    if data_start + end > size:
        raise ModelLoadError(
            f"{path}: GGUF file is truncated ({size} bytes, tensors need {data_start + end})"
        )

"""Read and validate a GGUF file's header (metadata and tensor table) in pure Python + numpy.

MLX's GGUF reader trusts the file: a truncated or corrupt file can crash the process, and it
refuses whole files holding a type it cannot read (every K-quant). This walks the header,
checks that every tensor's bytes lie inside the file, and returns the metadata (scalar arrays
as numpy arrays, string arrays as lists) and the tensor table, so bad input becomes one clear
`ModelLoadError` and any tensor can be read from the file by offset. Tensor data is not read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ModelLoadError

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_NP = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8",
       11: "<i8", 12: "<f8"}
_STRING, _ARRAY = 8, 9
NATIVE_TYPES = {0, 1, 2, 3, 8}  # F32, F16, Q4_0, Q4_1, Q8_0: what MLX's own reader reads
_MAX_COUNT = 1 << 24


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order (GGUF lists the fastest-varying dimension first)
    ggml_type: int
    offset: int  # from the start of the file
    nbytes: int


@dataclass(frozen=True)
class GGUFHeader:
    path: Path
    metadata: dict[str, Any]
    tensors: list[TensorInfo]

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)


def _block_sizes() -> dict[int, tuple[int, int]]:
    from gguf import GGML_QUANT_SIZES

    return {int(t): v for t, v in GGML_QUANT_SIZES.items()}


class _Reader:
    def __init__(self, data: bytes, path: Path):
        self.data, self.pos, self.path = data, 0, path

    def _need(self, n: int) -> None:
        if self.pos + n > len(self.data):
            raise ModelLoadError(f"{self.path}: GGUF header is truncated")

    def take(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        self._need(size)
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
        self._need(n)
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, n = self.take("I"), self.count()
            if etype in _NP:  # one numpy view instead of n Python objects
                dt = np.dtype(_NP[etype])
                self._need(dt.itemsize * n)
                arr = np.frombuffer(self.data, dtype=dt, count=n, offset=self.pos).copy()
                self.pos += dt.itemsize * n
                return arr
            return [self.value(etype) for _ in range(n)]
        raise ModelLoadError(f"{self.path}: corrupt GGUF metadata (value type {vtype})")


def _read_head(path: Path) -> tuple[bytes, int]:
    size = path.stat().st_size
    with open(path, "rb") as f:
        return f.read(min(size, 64 << 20)), size  # metadata (vocab included) fits in far less


def read_header(path: Path) -> GGUFHeader:
    """Parse `path`'s header; raise `ModelLoadError` unless it is a structurally sound GGUF."""
    head, size = _read_head(path)
    r = _Reader(head, path)
    if size < 24 or head[:4] != b"GGUF":
        raise ModelLoadError(f"{path}: not a GGUF file (bad magic)")
    r.pos = 4
    version = r.take("I")
    if version not in (2, 3):
        raise ModelLoadError(f"{path}: unsupported GGUF version {version}")
    n_tensors, n_kv = r.count(), r.count()
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key, vtype = r.string(), r.take("I")
        meta[key] = r.value(vtype)
    alignment = meta.get("general.alignment", 32)
    alignment = alignment if isinstance(alignment, int) and alignment > 0 else 32
    sizes = _block_sizes()
    raw = []
    for _ in range(n_tensors):
        name, n_dims = r.string(), r.take("I")
        if n_dims > 8:
            raise ModelLoadError(f"{path}: corrupt tensor '{name}' ({n_dims} dims)")
        dims = [r.take("Q") for _ in range(n_dims)]
        ttype, offset = r.take("I"), r.take("Q")
        if ttype not in sizes:
            raise ModelLoadError(f"{path}: tensor '{name}' has unknown GGML type {ttype}")
        per, nbytes = sizes[ttype]
        elems = int(np.prod(dims, dtype=np.int64)) if dims else 1
        if dims and dims[0] % per:
            raise ModelLoadError(f"{path}: corrupt tensor '{name}' (row of {dims[0]} is not "
                                 f"whole blocks of {per})")
        raw.append((name, tuple(reversed(dims)), ttype, offset, elems // per * nbytes))
    data_start = -(-r.pos // alignment) * alignment
    tensors = [TensorInfo(n, s, t, data_start + o, b) for n, s, t, o, b in raw]
    end = max((t.offset + t.nbytes for t in tensors), default=data_start)
    if end > size:
        raise ModelLoadError(f"{path}: GGUF file is truncated ({size} bytes, tensors need {end})")
    return GGUFHeader(path, meta, tensors)


def mlx_readable(header: GGUFHeader) -> bool:
    """Whether MLX's own GGUF reader handles every tensor of the file."""
    return all(t.ggml_type in NATIVE_TYPES for t in header.tensors)

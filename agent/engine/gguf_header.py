"""Read and validate a GGUF file's header (metadata and tensor table) in pure Python + numpy.

MLX's GGUF reader trusts the file: a truncated or corrupt file can crash the process, and it
refuses whole files holding a type it cannot read (every K-quant). This walks the header,
checks that every tensor's bytes lie inside the file, and returns the metadata (scalar arrays
as numpy arrays, string arrays as lists) and the tensor table, so bad input becomes one clear
`ModelLoadError` and any tensor can be read from the file by offset. Tensor data is not read.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .bounded import Cursor, InputError, open_regular
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


_MAX_TENSORS = 1 << 16  # far above any real model's tensor count
_MAX_KEYS = 1 << 16
_MAX_STRINGS = 1 << 21  # strings in arrays, all keys together: vocabularies and merges
_MAX_ALIGNMENT = 1 << 16


class _Reader(Cursor):
    """GGUF values from a header; arrays of arrays are refused (llama.cpp reads none) and all
    string arrays together hold at most _MAX_STRINGS strings, so memory follows the bytes."""

    def __init__(self, data: bytes, path: Path):
        super().__init__(data, str(path))
        self.strings = 0

    def fail(self, why: str) -> InputError:
        return super().fail(f"corrupt GGUF header, {why}")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string(self.left)
        if vtype != _ARRAY:
            raise self.fail(f"value type {vtype}")
        etype = self.take("I")
        if etype in _NP:  # one numpy array instead of n Python objects
            dt = np.dtype(_NP[etype])
            n = self.count(dt.itemsize, _MAX_COUNT, "array length")
            return np.frombuffer(self.raw(dt.itemsize * n), dtype=dt).copy()
        if etype == _ARRAY:
            raise self.fail("an array of arrays (not read here, nor by llama.cpp)")
        if etype != _STRING:
            raise self.fail(f"array element type {etype}")
        n = self.count(8, _MAX_COUNT, "array length")  # 8: a string's length field
        self.strings += n
        if self.strings > _MAX_STRINGS:
            raise self.fail(f"more than {_MAX_STRINGS} strings in the metadata")
        return [self.string(self.left) for _ in range(n)]


def _read_head(path: Path) -> tuple[bytes, int]:
    with open_regular(path) as f:  # a user's file: a symlink to it is fine, a FIFO is not
        size = os.fstat(f.fileno()).st_size
        return f.read(min(size, 64 << 20)), size  # metadata (vocab included) fits in far less


def _tensor(r: _Reader, sizes: dict[int, tuple[int, int]]) -> tuple:
    """One tensor-table entry: (name, numpy-order shape, type, offset from data, bytes)."""
    name, n_dims = r.string(1 << 16), r.take("I")
    if n_dims > 8:
        raise r.fail(f"tensor '{name}' has {n_dims} dims")
    dims = [r.take("Q") for _ in range(n_dims)]
    ttype, offset = r.take("I"), r.take("Q")
    if ttype not in sizes:
        raise r.fail(f"tensor '{name}' has unknown GGML type {ttype}")
    per, nbytes = sizes[ttype]
    elems = math.prod(dims)  # Python ints: no overflow
    if dims and dims[0] % per:
        raise r.fail(f"tensor '{name}' has a row of {dims[0]}, not whole blocks of {per}")
    return name, tuple(reversed(dims)), ttype, offset, elems // per * nbytes


def read_header(path: Path) -> GGUFHeader:
    """Parse `path`'s header; raise `ModelLoadError` unless it is a structurally sound GGUF."""
    try:
        return _parse(path)
    except InputError as e:
        raise ModelLoadError(str(e)) from None


def _parse(path: Path) -> GGUFHeader:
    head, size = _read_head(path)
    r = _Reader(head, path)
    if head[:4] != b"GGUF":
        raise ModelLoadError(f"{path}: not a GGUF file (bad magic)")
    if size < 24:
        raise ModelLoadError(f"{path}: not a GGUF file (truncated: {size} bytes)")
    r.pos = 4
    version = r.take("I")
    if version not in (2, 3):
        raise ModelLoadError(f"{path}: unsupported GGUF version {version}")
    n_tensors, n_kv = r.count(24, _MAX_TENSORS, "tensor count"), r.count(13, _MAX_KEYS, "key count")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key, vtype = r.string(1 << 16), r.take("I")
        meta[key] = r.value(vtype)
    alignment = meta.get("general.alignment", 32)
    if not isinstance(alignment, int) or not 0 < alignment <= _MAX_ALIGNMENT:
        raise ModelLoadError(f"{path}: corrupt GGUF header (alignment {alignment!r})")
    sizes = _block_sizes()
    raw = [_tensor(r, sizes) for _ in range(n_tensors)]
    data_start = -(-r.pos // alignment) * alignment
    tensors = [TensorInfo(n, s, t, data_start + o, b) for n, s, t, o, b in raw]
    end = max((t.offset + t.nbytes for t in tensors), default=data_start)
    if end > size:
        raise ModelLoadError(f"{path}: GGUF file is truncated ({size} bytes, tensors need {end})")
    return GGUFHeader(path, meta, tensors)


def mlx_readable(header: GGUFHeader) -> bool:
    """Whether MLX's own GGUF reader handles every tensor of the file."""
    return all(t.ggml_type in NATIVE_TYPES for t in header.tensors)

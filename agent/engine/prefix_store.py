"""Prefix store: KV caches of prompt prefixes, kept across turns, sessions and processes.

One protocol, modelled on mlx-lm's `LRUPromptCache` (mlx_lm/models/cache.py):
- `fetch_nearest(model_key, tokens, longer_than=0) -> (cache, n)`: a private copy of the KV
  cache of the longest stored prefix `tokens[:n]` (a longer stored entry sharing that prefix
  is trimmed to it), or `(None, 0)` when nothing beats `longer_than`. The caller may extend or
  trim the copy; the stored entry never changes.
- `insert(model_key, tokens, cache, kind="turn")`: remember the first `len(tokens)` positions
  of `cache` as the KV of `tokens`. "turn" entries (a conversation so far) replace the entries
  they extend; "system" entries (a system prompt) stay on their own and are evicted last.

Two tiers. Memory: LRU bounded in bytes. Disk (prefix_disk.py): one safetensors file per prefix
under `<root>/<model_key>/`, bounded in bytes, written atomically by a writer thread (`flush()`
waits for it), checked before use. A model key fingerprints the weights, the KV cache kind, the
BLAS, the library versions and the engine's code, so a cache only meets the model that
computed it.

Not here: what to store and when (the Session decides); a token trie (a few dozen entries,
scanned linearly); copies of tensor data (MLX arrays are immutable: an entry shares buffers
with the cache it came from until that cache is written again, which then copies).
"""

from __future__ import annotations

import atexit
import copy
import hashlib
import json
import os
import queue
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import mlx.core as mx

from .prefix_disk import DiskTier, usable

# ---- keys and snapshots ------------------------------------------------------------------------


def _engine_code() -> str:
    """Hash of the engine's sources: another attention or loading code computes other KV."""
    h = hashlib.sha256()
    for p in sorted(Path(__file__).parent.glob("*.py")):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


_ENGINE_CODE = _engine_code()  # at import: the code this process runs, not what is on disk later


def fingerprint(lm: Any, samples: int = 256) -> str:
    """sha256 over what decides the KV a model computes: its class and hyper-parameters, every
    weight's name, shape and dtype plus `samples` strided values of it, the device, the BLAS
    and its kernels, the mlx / mlx-lm versions and the engine's code."""
    import mlx_lm
    import numpy as np
    from mlx.utils import tree_flatten

    from .blas import loaded_blas

    h = hashlib.sha256()
    args = getattr(lm.model, "args", None)
    head = dict(cls=f"{type(lm.model).__module__}.{type(lm.model).__qualname__}",
                args=vars(args) if args is not None else {}, dtype=lm.dtype, device=lm.device,
                blas=loaded_blas(), kernels=os.environ.get("OPENBLAS_CORETYPE", ""),
                mlx=mx.__version__, mlx_lm=mlx_lm.__version__, engine=_ENGINE_CODE)
    h.update(json.dumps(head, sort_keys=True, default=str).encode())
    picks = []
    for name, w in tree_flatten(lm.model.parameters()):
        h.update(f"{name}{tuple(w.shape)}{w.dtype}".encode())
        flat = w.reshape(-1)
        picks.append(flat[:: max(1, flat.size // samples)].astype(mx.float32))
    mx.eval(picks)
    for p in picks:
        h.update(np.asarray(p).tobytes())
    return h.hexdigest()


def snapshot(cache: list, n: int, own: bool = False) -> list | None:
    """New cache objects holding the first `n` positions of `cache` (sharing its buffers; with
    `own`, in buffers of their own, just n positions long), or None when `cache` cannot be cut
    there: its layers disagree on their offset, hold fewer than `n` tokens, or hold more and
    cannot trim. A slice shares its whole buffer: kept in a store, it would keep the session's
    buffer alive (grown in steps, often much longer than n) after the session moves on."""
    from mlx.utils import tree_map
    from mlx_lm.models.cache import KVCache, QuantizedKVCache, can_trim_prompt_cache

    offsets = {getattr(c, "offset", None) for c in cache}
    if n <= 0 or len(offsets) != 1 or None in offsets:
        return None
    (offset,) = offsets
    if offset < n or (offset > n and not can_trim_prompt_cache(cache)):
        return None
    out = []
    for c in cache:
        cut = (lambda x: mx.contiguous(x[..., :n, :])) if own else (lambda x: x[..., :n, :])
        if type(c) is KVCache:  # sliced to n: no padding kept, nothing shared is ever written
            s = KVCache()
            s.keys, s.values, s.offset = cut(c.keys), cut(c.values), n
        elif type(c) is QuantizedKVCache:
            s = QuantizedKVCache(c.group_size, c.bits)
            s.keys, s.values = tree_map(cut, (c.keys, c.values))
            s.offset = n
        else:
            s = copy.deepcopy(c)
            s.trim(s.offset - n)
        out.append(s)
    mx.eval(_arrays(out))
    return out


def _arrays(cache: list) -> list:
    from mlx.utils import tree_flatten

    return [a for _, a in tree_flatten([c.state for c in cache]) if isinstance(a, mx.array)]


def _nbytes(cache: list) -> int:
    return sum(a.nbytes for a in _arrays(cache))


# ---- memory tier -------------------------------------------------------------------------------


@dataclass(eq=False)  # entries compare by identity (their caches hold arrays)
class _Entry:
    tokens: tuple[int, ...]
    cache: list
    nbytes: int
    kind: str  # "turn" | "system"
    trimmable: bool
    used: int  # LRU clock


class MemoryTier:
    """Entries per model key, LRU bounded by `max_bytes` (turn entries go before system ones)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.entries: dict[str, list[_Entry]] = {}
        self.nbytes = 0
        self._clock = 0

    def _tick(self, e: _Entry) -> None:
        self._clock += 1
        e.used = self._clock

    def best(self, key: str, tokens: tuple[int, ...]) -> tuple[_Entry | None, int]:
        best, best_n = None, 0
        for e in self.entries.get(key, []):
            n = usable(e.tokens, e.trimmable, tokens)
            if n > best_n:
                best, best_n = e, n
        return best, best_n

    def covers(self, key: str, tokens: tuple[int, ...], kind: str) -> bool:
        """Is `tokens` already served in full (system: by its own system entry)?"""
        for e in self.entries.get(key, []):
            exact = e.tokens == tokens
            if (exact and e.kind == kind) or (kind == "turn" and e.trimmable
                                               and e.tokens[: len(tokens)] == tokens):
                self._tick(e)
                return True
        return False

    def add(self, key: str, tokens: tuple[int, ...], cache: list, kind: str) -> _Entry | None:
        """Store `cache` (a snapshot holding exactly `tokens`); None when it does not fit."""
        from mlx_lm.models.cache import can_trim_prompt_cache

        if self.max_bytes <= 0:
            return None
        e = _Entry(tokens, cache, _nbytes(cache), kind, can_trim_prompt_cache(cache), 0)
        self._tick(e)
        kept = []
        for old in self.entries.get(key, []):
            folded = (old.kind == "turn" and e.trimmable and len(old.tokens) <= len(tokens)
                      and tokens[: len(old.tokens)] == old.tokens)
            if folded or (old.tokens == tokens and old.kind == kind):
                self.nbytes -= old.nbytes
            else:
                kept.append(old)
        self.entries[key] = kept + [e]
        self.nbytes += e.nbytes
        self._evict()
        return e if any(x is e for x in self.entries.get(key, [])) else None

    def _evict(self) -> None:
        while self.nbytes > self.max_bytes:
            victims = [(e.kind == "system", e.used, k, e) for k, es in self.entries.items() for e in es]
            *_, key, e = min(victims, key=lambda v: v[:2])
            self.entries[key].remove(e)
            self.nbytes -= e.nbytes


# ---- the store ---------------------------------------------------------------------------------


def _worker(jobs: queue.Queue, warn: Callable[[str], None]) -> None:
    while True:
        job = jobs.get()
        try:
            job()
        except Exception as e:  # noqa: BLE001 - the writer must outlive any one bad job
            warn(f"prefix cache: write failed ({type(e).__name__}: {e})")
        finally:
            jobs.task_done()


class PrefixStore:
    """Both tiers behind `fetch_nearest` / `insert`. Used from one engine thread at a time."""

    def __init__(self, root: Path | None, memory_mb: float = 1024, disk_mb: float = 4096,
                 warn: Callable[[str], None] | None = None, background: bool = True):
        self.warn = warn or (lambda m: print(f"spec-agent: warning: {m}", file=sys.stderr))
        self.memory = MemoryTier(int(memory_mb * 2**20))
        self.disk = DiskTier(root, int(disk_mb * 2**20), self.warn) if root and disk_mb > 0 else None
        self.stats = dict(memory_hits=0, disk_hits=0, inserted=0, disk_writes=0)
        self.last_tier = ""  # where the last successful fetch came from: "memory" | "disk"
        self._keys: dict[int, tuple[Any, str]] = {}  # id(lm) -> (lm, fingerprint)
        self._jobs: queue.Queue | None = None
        if self.disk is not None and background:
            self._jobs = queue.Queue()
            threading.Thread(target=_worker, args=(self._jobs, self.warn), daemon=True,
                             name="prefix-cache-writer").start()
            atexit.register(self._jobs.join)  # pending files are finished before exit

    def key_for(self, lm: Any, kv_bits: int = 0) -> str:
        """`<name>-<fingerprint>-kv<bits>`; the fingerprint is computed once per model."""
        if id(lm) not in self._keys:
            self._keys[id(lm)] = (lm, fingerprint(lm))
        name = re.sub(r"[^\w.-]", "_", str(getattr(lm, "name", "model")))[:40]
        return f"{name}-{self._keys[id(lm)][1][:24]}-kv{kv_bits or 'full'}"

    def fetch_nearest(self, model_key: str, tokens: Sequence[int],
                      longer_than: int = 0) -> tuple[list | None, int]:
        """(private cache of `tokens[:n]`, n) for the longest stored prefix, memory first, then
        disk files that beat it; (None, 0) when nothing serves more than `longer_than` tokens."""
        tokens = tuple(tokens)
        entry, n = self.memory.best(model_key, tokens)
        cache, tier = (entry.cache, "memory") if entry is not None else (None, "")
        if self.disk is not None:
            for n_disk, path in self.disk.candidates(model_key, tokens, max(n, longer_than)):
                loaded = self.disk.load(path, model_key)
                if loaded is not None:
                    stored, cache, kind = loaded
                    self.memory.add(model_key, stored, cache, kind)
                    n, tier = n_disk, "disk"
                    break
        if cache is None or n <= longer_than:
            return None, 0
        if entry is not None and tier == "memory":
            self.memory._tick(entry)
        out = snapshot(cache, n)
        if out is None:
            return None, 0
        self.stats[f"{tier}_hits"] += 1
        self.last_tier = tier
        return out, n

    def insert(self, model_key: str, tokens: Sequence[int], cache: list, kind: str = "turn") -> bool:
        """Remember `cache`'s first len(tokens) positions as the KV of `tokens`; False when the
        cache cannot be cut there (see `snapshot`). Disk files are written in the background."""
        from mlx_lm.models.cache import can_trim_prompt_cache

        tokens = tuple(tokens)
        if not tokens or kind not in ("turn", "system"):
            return False
        snap = snapshot(cache, len(tokens), own=True)  # (it checks the cache's offsets too)
        if snap is None:
            return False
        covered = self.memory.covers(model_key, tokens, kind)
        to_disk = self.disk is not None and self.disk.wants(model_key, tokens, kind)
        if covered and not to_disk:
            return True
        if not covered:
            self.memory.add(model_key, tokens, snap, kind)
        self.stats["inserted"] += 1
        if to_disk:
            try:
                data = DiskTier.serialize(model_key, tokens, snap, kind)
            except (OSError, ValueError, RuntimeError) as e:
                self.warn(f"prefix cache: cannot serialize a cache ({e})")
                return True
            disk, trim = self.disk, can_trim_prompt_cache(snap)
            self.stats["disk_writes"] += 1
            self._submit(lambda: disk.write(model_key, tokens, kind, trim, data))
        return True

    def _submit(self, job: Callable[[], None]) -> None:
        if self._jobs is None:
            job()
        else:
            self._jobs.put(job)

    def flush(self) -> None:
        """Wait until every queued disk write is done."""
        if self._jobs is not None:
            self._jobs.join()

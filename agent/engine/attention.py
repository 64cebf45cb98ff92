"""Attention for long prompts on the CPU: exact softmax attention computed with numpy.

MLX's Linux CPU backend evaluates `exp` one float at a time (no SIMD), so the softmax of
`mx.fast.scaled_dot_product_attention` dominates prefill: ~1.1 s per layer at 2,048 tokens;
numpy's `exp` is vectorised (~30x faster here). This module takes a prefill-sized
query block out of MLX (zero-copy views of evaluated arrays), computes the attention in
numpy, one (KV head, query block) at a time so that a score block stays a few MB, and hands the
result back as an MLX array. Each task runs single-threaded BLAS on its own worker thread: a
2-thread BLAS barrier stalls for whole scheduler slices when other processes hold the cores.

Scope: the CPU device only, query blocks of at least `MIN_QUERIES` rows (prefill chunks),
float32, no mask, the "causal" mask or a boolean (queries, keys) mask (a token tree's verify
pass), no attention sinks, no quantized KV cache. Everything else (decode steps, short verify
passes, GPUs, additive masks) goes to mlx-lm's own function.
It does not handle the whole model's prefill: only the attention inside it.

`install(model)` routes an mlx-lm model module's attention through `scaled_dot_product_attention`
below (the module-level name that llama/qwen2/... look up at call time); `uninstall` puts the
original back. The patch is per model *module*, so every model of that architecture in the
process sees it; the CPU check happens at each call, so a GPU model keeps MLX's path.
"""

from __future__ import annotations

import glob
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import mlx.core as mx
import numpy as np
from mlx_lm.models import base as _base

from .module_patch import ModulePatch

MIN_QUERIES = 64  # query blocks this long (prefill chunks) always take the numpy path
# Shorter multi-token blocks (a verify pass, a short new message) take it when they score this
# many query x key pairs: at a few thousand cached tokens MLX's scalar exp costs more than
# the hand-off. Single-token decode steps keep MLX's path (and its pipelining).
MIN_SCORES = 32768
_SCORE_BUDGET = 1 << 21  # floats in one score block (8 MB): rows x keys per task
_MAX_BLOCK = 64  # query rows per task and query head: a 128-token chunk makes 2 tasks per KV head



def _on_cpu() -> bool:
    return mx.default_device().type == mx.DeviceType.cpu


def applies(queries: mx.array, keys: mx.array, cache: Any, mask: Any, sinks: Any) -> bool:
    """True when `prefill_attention` handles this call (see the module docstring)."""
    return (
        not hasattr(cache, "bits")  # a quantized cache passes (data, scales, biases) tuples
        and (queries.shape[2] >= MIN_QUERIES
             or (queries.shape[2] >= 2 and queries.shape[2] * keys.shape[2] >= MIN_SCORES))
        and queries.dtype == mx.float32
        and keys.dtype == mx.float32
        and sinks is None
        and (mask is None or (isinstance(mask, str) and mask == "causal")
             or _boolean_mask(mask, queries.shape[2], keys.shape[2]))
        and _on_cpu()
    )


def _boolean_mask(mask: Any, queries: int, keys: int) -> bool:
    return (isinstance(mask, mx.array) and mask.dtype == mx.bool_
            and tuple(mask.shape) == (queries, keys))


def scaled_dot_product_attention(
    queries: mx.array,
    keys: mx.array,
    values: mx.array,
    cache: Any,
    scale: float,
    mask: Any,
    sinks: mx.array | None = None,
) -> mx.array:
    """Drop-in for `mlx_lm.models.base.scaled_dot_product_attention`."""
    if applies(queries, keys, cache, mask, sinks):
        if isinstance(mask, mx.array):
            return prefill_attention(queries, keys, values, scale, causal=False, allowed=mask)
        return prefill_attention(queries, keys, values, scale, causal=mask is not None)
    return _base.scaled_dot_product_attention(
        queries, keys, values, cache, scale=scale, mask=mask, sinks=sinks
    )


def prefill_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, causal: bool,
    allowed: mx.array | None = None,
) -> mx.array:
    """softmax(scale * Q K^T [+ causal mask]) V for (B, H, L, D) queries, (B, H_kv, S, D) keys.

    The causal mask is aligned to the end, like MLX's "causal": query i sees keys up to
    S - L + i (the cache holds S - L earlier tokens). `allowed` (bool (L, S), with causal
    False): query i sees the keys where row i is True. Evaluates its inputs, so it cannot run
    inside `mx.compile`.
    """
    q, k, v = np.asarray(queries), np.asarray(keys), np.asarray(values)
    hidden = None if allowed is None else ~np.asarray(allowed)
    B, H, L, _ = q.shape
    kv_heads, S = k.shape[1], k.shape[2]
    if H % kv_heads or (causal and S < L):
        raise ValueError(f"unsupported attention shapes q={q.shape} k={k.shape}")
    rep = H // kv_heads
    out = np.empty((B, H, L, v.shape[3]), np.float32)
    block = max(8, min(_MAX_BLOCK, _SCORE_BUDGET // (rep * S)))
    tasks = [(b, g, s0, min(block, L - s0))
             for b in range(B) for g in range(kv_heads) for s0 in range(0, L, block)]

    def run(task: tuple[int, int, int, int]) -> None:
        b, g, s0, n = task
        _attend_block(q[b, g * rep:(g + 1) * rep, s0:s0 + n], k[b, g], v[b, g],
                      out[b, g * rep:(g + 1) * rep, s0:s0 + n],
                      scale, (S - L + s0) if causal else None,
                      None if hidden is None else hidden[s0:s0 + n])

    pool = _pool()
    if pool is None or len(tasks) == 1:
        with _single_threaded_blas():
            for t in tasks:
                run(t)
    else:
        list(pool.map(run, tasks))
    return mx.array(out)


def _attend_block(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray,
                  scale: float, past: int | None, hidden: np.ndarray | None = None) -> None:
    """Attention of rep query heads (rep, n, D) sharing one KV head; writes `out` (rep, n, Dv).

    `past`: with a causal mask, the keys before the block's diagonal, which every row sees
    (row r sees `past + r + 1` keys); None: every row sees all keys but those `hidden`
    (bool (n, keys)) marks.
    """
    rep, n, d = q.shape
    seen = k.shape[0] if past is None else past + n  # keys some row of this block sees
    ws = _workspace(rep * n * (d + seen + v.shape[1]))
    qs = ws[: rep * n * d].reshape(rep, n, d)
    np.multiply(q, scale, out=qs)
    scores = ws[rep * n * d: rep * n * (d + seen)].reshape(rep * n, seen)
    np.matmul(qs.reshape(rep * n, d), k[:seen].T, out=scores)
    if past is not None:  # the last n keys form the triangle
        scores.reshape(rep, n, seen)[:, :, seen - n:] += _triangle(n)
    elif hidden is not None:
        scores.reshape(rep, n, seen)[:, hidden] = -np.inf
    np.subtract(scores, scores.max(axis=1, keepdims=True), out=scores)
    np.exp(scores, out=scores)
    total = scores.sum(axis=1, keepdims=True)
    o = ws[rep * n * (d + seen):].reshape(rep * n, v.shape[1])
    np.matmul(scores, v[:seen], out=o)
    np.divide(o, total, out=o)
    out[...] = o.reshape(out.shape)


_local = threading.local()
_tri_cache: dict[int, np.ndarray] = {}


def _workspace(n: int) -> np.ndarray:
    """A per-thread float32 scratch buffer of at least n floats (reused: fresh pages cost)."""
    buf = getattr(_local, "buf", None)
    if buf is None or buf.size < n:
        buf = _local.buf = np.empty(max(n, 1 << 20), np.float32)
    return buf[:n]


def _triangle(n: int) -> np.ndarray:
    t = _tri_cache.get(n)
    if t is None:
        t = _tri_cache[n] = np.triu(np.full((n, n), -np.inf, np.float32), 1)
    return t


# --- threads ---------------------------------------------------------------------------------

_pool_state: dict[str, Any] = {}


def _numpy_blas_thread_setter() -> Callable[[int], int] | None:
    """OpenBLAS's per-thread thread count for numpy's bundled OpenBLAS, when it has one."""
    if "setter" in _pool_state:
        return _pool_state["setter"]
    import ctypes

    setter = None
    root = os.path.dirname(os.path.dirname(np.__file__))
    for path in glob.glob(os.path.join(root, "numpy.libs", "*openblas*")) + glob.glob(
            os.path.join(os.path.dirname(np.__file__), ".dylibs", "*openblas*")):
        try:
            fn = ctypes.CDLL(path).openblas_set_num_threads_local  # OpenBLAS >= 0.3.27
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
        setter = fn
        break
    _pool_state["setter"] = setter
    return setter


class _single_threaded_blas:
    """Within the block, numpy's BLAS runs on the calling thread only."""

    def __enter__(self) -> None:
        setter = _numpy_blas_thread_setter()
        self._before = setter(1) if setter else None

    def __exit__(self, *exc) -> None:
        if self._before is not None:
            _numpy_blas_thread_setter()(self._before)


def _pool() -> ThreadPoolExecutor | None:
    """Worker threads (one per core, at most 8) with single-threaded numpy BLAS; None on 1 core."""
    if "pool" not in _pool_state:
        n = min(8, os.cpu_count() or 1)
        setter = _numpy_blas_thread_setter()
        _pool_state["pool"] = None if n < 2 else ThreadPoolExecutor(
            n, thread_name_prefix="attention", initializer=(lambda: setter(1)) if setter else None)
    return _pool_state["pool"]


# --- installing into mlx-lm model modules ---------------------------------------------------


_patch = ModulePatch("scaled_dot_product_attention", _base.scaled_dot_product_attention,
                     scaled_dot_product_attention)
# `install(model)`: route `model`'s mlx-lm module through this attention (True if it is); only
# modules that call mlx-lm's stock function by module-level name are patched. `uninstall`
# undoes it for that module; `installed` says whether it is routed.
install, uninstall, installed = _patch.install, _patch.uninstall, _patch.installed

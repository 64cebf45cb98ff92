"""The KV cache objects: one model's mlx-lm prompt cache and the one way it is rewound.

`ModelCache` owns a model's cache and how many history tokens it holds; `rewind_to(n)` is
the only place a cache is cut back (mlx-lm's `trim_prompt_cache`, or a fresh cache where
the layers cannot trim). The session, the drafters and the speculator rewind through it.
"""

from __future__ import annotations

from .loading import LoadedModel


KV_GROUP_SIZE = 64  # quantized KV caches (kv_bits): values per scale, along the head dimension


def make_cache(model, kv_bits: int = 0) -> list:
    """mlx-lm's prompt cache for `model`; with `kv_bits`, a `QuantizedKVCache` per layer."""
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    cache = make_prompt_cache(model)
    if not kv_bits:
        return cache
    if not all(type(c) is KVCache for c in cache):
        raise ValueError("kv_bits needs a model whose every layer has a plain KV cache")
    return [c.to_quantized(group_size=KV_GROUP_SIZE, bits=kv_bits) for c in cache]


class ModelCache:
    """One model's KV cache and how many history tokens it holds."""

    def __init__(self, lm: LoadedModel, kv_bits: int = 0):
        from mlx_lm.models.cache import can_trim_prompt_cache

        self.lm, self.kv_bits = lm, kv_bits
        self.cache = make_cache(lm.model, kv_bits)
        self.trimmable = can_trim_prompt_cache(self.cache)

    @property
    def offset(self) -> int:
        return int(self.cache[0].offset)

    def rewind_to(self, n: int) -> None:
        """Keep only the first `n` tokens, or start empty when the cache cannot trim that far
        (recurrent layers; a sliding window that has wrapped trims nothing)."""
        from mlx_lm.models.cache import trim_prompt_cache

        if not self.consistent():  # interrupted inside a forward pass
            self.cache = make_cache(self.lm.model, self.kv_bits)
            return
        excess = self.offset - n
        if excess <= 0:
            return
        if self.trimmable and trim_prompt_cache(self.cache, excess) == excess and self.offset == n:
            return
        self.cache = make_cache(self.lm.model, self.kv_bits)

    def consistent(self) -> bool:
        """Do all layers hold the same number of tokens?"""
        return len({c.offset for c in self.cache}) == 1

    def adopt(self, cache: list, n: int) -> bool:
        """Continue from `cache` (holding `n` tokens, e.g. from a PrefixStore) if it has this
        cache's layout: layer count, cache classes, quantization."""
        same = len(cache) == len(self.cache) and all(
            type(a) is type(b) and getattr(a, "bits", 0) == getattr(b, "bits", 0)
            for a, b in zip(cache, self.cache))
        if same and all(c.offset == n for c in cache):
            self.cache = cache
            return True
        return False

    @property
    def rewindable(self) -> bool:
        """Can this cache always drop its last tokens? Speculation needs that every round."""
        from mlx_lm.models.cache import KVCache, QuantizedKVCache

        return self.trimmable and all(type(c) in (KVCache, QuantizedKVCache) for c in self.cache)

"""The lowest layer: one forward pass, and plain token-by-token decoding.

Cache invariant used across the engine: a model's KV cache holds a prefix of the
session's token history, and its offset says how long; the token sampled last ("pending")
is not in the cache until the next step feeds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol, Sequence

import mlx.core as mx
import mlx.nn as nn

from ..events import TokenSource
from .sampling import SamplingParams, apply_mask, penalize, sample


@dataclass(frozen=True)
class Batch:
    """Tokens one decoding step or speculative round produced, in order, with their sources."""

    tokens: tuple[int, ...]
    sources: tuple[TokenSource, ...]

    @classmethod
    def target(cls, token: int) -> "Batch":
        return cls((token,), ("target",))


class TokenConstraint(Protocol):
    """A logits hook that sees every position the engine samples or verifies.

    `masks(draft)` returns a (len(draft)+1, V) boolean array: row i lists the tokens allowed
    after the constraint's current state advanced by `draft[:i]` (rows after an invalid
    draft token may be anything; that token is rejected); a token tree asks it once per
    root-to-leaf path (`tree.tree_masks`). `consume` advances the state by
    accepted tokens; `forced` lists tokens the constraint determines (free drafts).
    """

    def masks(self, draft: Sequence[int]) -> mx.array | None: ...

    def consume(self, tokens: Sequence[int]) -> None: ...

    def forced(self) -> list[int]: ...

    def done(self) -> bool: ...


def fit_width(mask: mx.array, width: int) -> mx.array:
    """A (1, V') mask cut or padded (with False) to `width` columns."""
    if mask.shape[-1] >= width:
        return mask[:, :width]
    return mx.concatenate([mask, mx.zeros((1, width - mask.shape[-1]), dtype=mx.bool_)], axis=-1)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def plain_step(model: nn.Module, cache: list, pending: int, params: SamplingParams,
               constraint: TokenConstraint | None = None, history: Sequence[int] = (),
               at: int = -1) -> int:
    """Feed `pending`, sample the next token (under the constraint's mask), and return it.
    `history`: the tokens so far, ending with `pending` (for a repetition penalty); `at`: the
    new token's position (for keyed draws, see `sampling`)."""
    logits = forward(model, [pending], cache)
    if params.penalized:
        logits = penalize(logits, history or [pending], [], params)
    if constraint is not None:
        logits = apply_mask(logits, constraint.masks([]))
    tok = int(sample(logits, params, at).item())
    if constraint is not None:
        constraint.consume([tok])
    return tok


def forward(model: nn.Module, tokens: Sequence[int] | mx.array, cache: list) -> mx.array:
    """Feed `tokens` (1-D) to the model with its cache; (n, V) logits for every position."""
    x = tokens if isinstance(tokens, mx.array) else mx.array(list(tokens), dtype=mx.uint32)
    return model(x[None], cache=cache)[0]


def feed(model: nn.Module, tokens: Sequence[int], cache: list) -> None:
    """Run `tokens` through the model's layers into the cache without the output head: a
    prefill needs no logits, and the head (vocabulary x hidden per token) is a sizeable share
    of a small model's work. Models without mlx-lm's usual `model.model` trunk run whole."""
    x = mx.array(list(tokens), dtype=mx.uint32)[None]
    trunk = getattr(model, "model", None)
    if isinstance(trunk, nn.Module) and hasattr(model, "args"):
        trunk(x, cache=cache)
    else:
        model(x, cache=cache)


# A cancel is checked between prefill chunks, so a chunk bounds how long Esc takes. The chunks
# follow a fixed schedule (`chunk_at`), never the clock: the same prompt and cache always give
# the same chunks, so the same keys and values to the last bit (row-count-dependent BLAS kernels
# make a different split differ in the last bits on some CPUs). On a CPU a chunk's time grows
# with its context position (attention reads every earlier key): measured on the 2-core CPU
# (Qwen2.5-Coder-0.5B, OpenBLAS, lab/results/cancel-latency.jsonl), a 128-token chunk took
# 0.96 s at position 0 and 2.7 s at 7k, a 64-token one 2.2 s at 16k. So the chunk shrinks as
# the context grows, PREFILL_CPU_TOKENS * PREFILL_CPU_HALF / (PREFILL_CPU_HALF + position),
# in multiples of 8, at least PREFILL_CPU_MIN: about 0.8 s a chunk for that model anywhere up
# to 16k (96 tokens at 0, 48 at 4k, 32 at 8k, 16 at 16k); each chunk also reads every weight
# once (about 0.16 s there), which is what smaller chunks cost. On a GPU a chunk is
# `Session.prefill_chunk` tokens.
PREFILL_CPU_TOKENS = 96  # the chunk at position 0, on a CPU
PREFILL_CPU_HALF = 4096  # the position at which it is half as long
PREFILL_CPU_MIN = 16


def chunk_at(position: int, device: str, largest: int) -> int:
    """The prefill chunk that starts at context `position`: on a CPU shorter as the context
    grows (see PREFILL_CPU_TOKENS), else `largest` (at most `largest`, at least one token)."""
    if device == "cpu":
        n = PREFILL_CPU_TOKENS * PREFILL_CPU_HALF // (PREFILL_CPU_HALF + max(position, 0))
        n = max(PREFILL_CPU_MIN, n // 8 * 8)
    else:
        n = largest
    return max(1, min(largest, n))


def prefill(
    model: nn.Module,
    tokens: Sequence[int],
    cache: list,
    chunk: int = 512,
) -> None:
    """Feed `tokens` into the cache in chunks (no logits are computed)."""
    for start in range(0, len(tokens), chunk):
        feed(model, tokens[start : start + chunk], cache)
        mx.eval([c.state for c in cache])


def plain_decode(
    model: nn.Module,
    cache: list,
    pending: int,
    params: SamplingParams,
    constraint: TokenConstraint | None = None,
    history: Sequence[int] = (),
    limit: int | None = None,
) -> Iterator[int]:
    """Plain decoding: feed `pending`, yield the sampled token, repeat; endless, or `limit`
    tokens. `history`: the tokens so far, ending with `pending` (read at the start, for a
    repetition penalty and, its length, for the positions of keyed draws).

    Without a constraint or a penalty the next step's graph is queued before the current
    token is read (`async_eval`), overlapping Python work with compute; so when the caller
    stops, the cache may already hold the last yielded token. Callers track the cache by its
    offset. With `limit`, the last token is yielded without queuing a step after it: a run of
    n tokens costs n steps, not n + 1 (the queued step is computed whether or not it is used).
    """
    at = len(history) if history else -1  # the next token's position (-1: unknown)
    if constraint is not None or params.penalized:
        seen = list(history[-max(params.repetition_window, 1):]) if history else [pending]
        made = 0
        while limit is None or made < limit:
            pending = plain_step(model, cache, pending, params, constraint, seen,
                                 at + made if at >= 0 else -1)
            seen.append(pending)
            if len(seen) > 4 * max(params.repetition_window, 16):
                del seen[: -max(params.repetition_window, 1)]
            made += 1
            yield pending
        return
    nxt = sample(forward(model, [pending], cache), params, at)
    mx.async_eval(nxt)
    made = 0
    while True:
        cur = nxt
        made += 1
        if limit is not None and made >= limit:
            yield int(cur.item())
            return
        nxt = sample(forward(model, cur, cache), params, at + made if at >= 0 else -1)
        mx.async_eval(nxt)
        yield int(cur.item())

"""Logits → tokens. One definition of the sampling distribution, used everywhere.

`log_probs` is *the* distribution a token is drawn from at temperature > 0: temperature first,
then top-k, min-p and top-p filters, renormalized. Plain decoding samples from it and the exact
speculative acceptance rule compares target and draft through it, so speculative sampling
reproduces plain sampling exactly, filters included.

An optional repetition penalty (`penalize`) comes before all of that: the logits of tokens among
the last `repetition_window` tokens before a position are divided by the penalty (multiplied when
negative). It depends only on the tokens before each position, so plain decoding, the target's
verify pass (each row sees the history plus the drafts before it) and the draft model all apply
the same function: greedy speculation still equals plain greedy decoding, and sampling follows
the penalized distribution.

Keyed draws (`noise_seed` ≥ 0, which `Session.generate` sets for each sampled call): the token
at position i is drawn by MLX's categorical sampler from a random key that is a function of
(noise_seed, i) alone, never of how many draws came before. A draw still follows the position's
distribution exactly (each position has its own key), and a verify pass that checks a
deterministic draft (prompt lookup, the suffix index) by drawing each row's token the same way
emits what plain decoding would have drawn: with one seed, plain decoding and lookup
speculation write the same text at any temperature (up to float rounding where a verify pass's
logits and a single step's differ in their last bits and that changes the draw).

A draft model samples with the same keys (`keyed_noise`: MLX's categorical sampler is
Gumbel-max, so the draft adds the noise the target's draw at that position will add). Its
draft is then checked as a deterministic one is, by the target's own keyed draws: what is
emitted is what plain decoding draws with the seed, whatever the draft proposed, so the
tokens follow the target's distribution exactly and a seeded run writes the same text with
any drafter or none. The shared noise is what makes the drafts land: a draft token is
accepted when the noised argmax of q equals that of p, which is nearly as often as rejection
sampling's sum of min(p, q) (equally often where two tokens share the mass), and more often
than two independent draws agree (sum of p * q, the sample-and-match rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import mlx.core as mx

from ..choices import RANGES


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0  # 1 = off
    repetition_window: int = 64  # tokens before a position that the penalty looks at
    noise_seed: int = -1  # >= 0: keyed draws (see the module's docstring); -1: mx.random's

    @property
    def penalized(self) -> bool:
        return self.repetition_penalty != 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def keyed(self) -> bool:
        """Sampling with keyed draws (see the module's docstring)."""
        return not self.greedy and self.noise_seed >= 0

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"):
            value = getattr(self, name)
            ok, must = RANGES[name]
            if value != value or not ok(value):  # value != value: NaN
                raise ValueError(f"{name} must be {must}, got {value!r}")


NEG_INF = float("-inf")


# Top-p needs each row's tokens in order of probability. A full sort of a 152k-token row costs
# ~18 ms on a CPU core (a verify pass's 7 rows: 130 ms); the nucleus almost always lies within
# the most likely TOP_P_CANDIDATES tokens, which `mx.topk` finds in a tenth of the time.
TOP_P_CANDIDATES = 1024
_TOP_P_MARGIN = 1e-3  # the candidates must cover top_p by this much (float32 sums differ a little)


def _nucleus_floor(srt: mx.array, top_p: float) -> mx.array:
    """(n, 1): the least log-probability of each row's nucleus, from its most likely tokens in
    descending order (all of them, or as many as hold the nucleus)."""
    mass_before = mx.cumsum(mx.exp(srt), axis=-1) - mx.exp(srt)
    kept = mx.where(mass_before < top_p, srt, mx.inf)
    return mx.min(kept, axis=-1, keepdims=True)


def _top_p_floor(lp: mx.array, top_p: float, eager: bool) -> mx.array:
    """`_nucleus_floor` of the rows of `lp`. `eager`: the caller reads the result at once
    anyway, so the candidates' mass may be checked now (a sync) and the full sort skipped
    when they cover top_p; the floor is the same either way."""
    if eager and lp.shape[-1] > TOP_P_CANDIDATES:
        top = mx.sort(mx.topk(lp, TOP_P_CANDIDATES, axis=-1), axis=-1)[..., ::-1]
        if mx.all(mx.sum(mx.exp(top), axis=-1) >= top_p + _TOP_P_MARGIN).item():
            return _nucleus_floor(top, top_p)
    return _nucleus_floor(mx.sort(lp, axis=-1)[..., ::-1], top_p)


def log_probs(logits: mx.array, p: SamplingParams, *, eager: bool = False) -> mx.array:
    """(n, V) logits → (n, V) normalized log-probabilities, filtered tokens at -inf.
    `eager`: the caller evaluates the result right away (a verify pass's acceptance), so the
    top-p filter may evaluate part of it early to save the full sort; the result is the same."""
    x = logits.astype(mx.float32)
    if p.temperature > 0:
        x = x / p.temperature
    if 0 < p.top_k < x.shape[-1]:
        kth = mx.sort(x, axis=-1)[..., -p.top_k, None]
        x = mx.where(x >= kth, x, NEG_INF)
    lp = x - mx.logsumexp(x, axis=-1, keepdims=True)
    if p.min_p > 0:
        floor = mx.max(lp, axis=-1, keepdims=True) + mx.log(mx.array(p.min_p))
        lp = mx.where(lp >= floor, lp, NEG_INF)
    if p.top_p < 1.0:
        # Keep the smallest set of most likely tokens whose mass reaches top_p.
        lp = mx.where(lp >= _top_p_floor(lp, p.top_p, eager), lp, NEG_INF)
    if p.min_p > 0 or p.top_p < 1.0:
        lp = lp - mx.logsumexp(lp, axis=-1, keepdims=True)
    return lp


def penalized_ids(before: Sequence[int], width: int, p: SamplingParams) -> mx.array | None:
    """(width,) bool: the ids among the last `repetition_window` of `before` (the tokens before
    a position); None when there are none. Ids beyond `width` are ignored."""
    recent = before[-p.repetition_window:] if p.repetition_window > 0 else ()
    ids = sorted({t for t in recent if 0 <= t < width})
    if not ids:
        return None
    hit = mx.zeros((width,), dtype=mx.bool_)
    hit[mx.array(ids, dtype=mx.int32)] = True
    return hit


def apply_penalty(logits: mx.array, hit: mx.array | None, p: SamplingParams) -> mx.array:
    """`logits` divided by the penalty where `hit` is True (multiplied where negative)."""
    if hit is None:
        return logits
    r = p.repetition_penalty
    return mx.where(hit, mx.where(logits < 0, logits * r, logits / r), logits)


def penalize(logits: mx.array, history: Sequence[int], draft: Sequence[int],
             p: SamplingParams) -> mx.array:
    """(n, V) logits with the repetition penalty applied: row i is the position after
    `history` + `draft[:i]`, and its penalized tokens are the last `repetition_window` of those.
    Ids beyond the logits' width are ignored."""
    if not p.penalized:
        return logits
    width = logits.shape[-1]
    seq = list(history[-p.repetition_window:]) if p.repetition_window > 0 else []
    return mx.stack([apply_penalty(logits[i], penalized_ids(seq + list(draft[:i]), width, p), p)
                     for i in range(logits.shape[0])])


def apply_mask(logits: mx.array, mask: mx.array | None) -> mx.array:
    """Disallow tokens where `mask` (bool, broadcastable to logits) is False."""
    if mask is None:
        return logits
    return mx.where(mask, logits, NEG_INF)


_MASK64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finalizer: a 64-bit integer → a well-mixed 64-bit integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def keyed_keys(seed: int, positions: Sequence[int]) -> list[int]:
    """One 64-bit key per position, each a function of (seed, position) alone (distinct
    positions, distinct keys: the mix is a bijection)."""
    base = _mix(seed & _MASK64)
    return [_mix(base ^ (int(i) & _MASK64)) for i in positions]


def draw(lp: mx.array, keys: Sequence[int]) -> mx.array:
    """(n, V) log-probabilities and n keys → (n,) tokens: row i drawn by MLX's categorical
    sampler (Gumbel-max over the whole row, exact; a token of probability 0 is never drawn)
    from its own random key, so the token is a function of the row's distribution and its
    key alone."""
    return mx.stack([mx.random.categorical(lp[i], key=mx.random.key(k))
                     for i, k in enumerate(keys)]).astype(mx.int32)


def keyed_noise(seed: int, position: int, width: int) -> mx.array:
    """(width,) the Gumbel noise of `draw` at `position`: for a (width,) row `lp`,
    `draw(lp[None], keyed_keys(seed, [position]))` is `argmax(lp + keyed_noise(...))`. Only at
    the same width: MLX makes other noise for one key at another width. A draft model that
    draws its token at a position with this noise (at the target's width) draws it coupled to
    the target's draw there: where the two distributions agree, so do the tokens."""
    return mx.random.gumbel((width,), key=mx.random.key(keyed_keys(seed, [position])[0]))


def sample(logits: mx.array, p: SamplingParams, at: int = -1) -> mx.array:
    """(n, V) logits → (n,) tokens: argmax when greedy, else a draw from `log_probs`; keyed
    by position when `p.noise_seed` ≥ 0 and `at` (the position of row 0's token, rows
    consecutive) is given."""
    if p.greedy:
        return mx.argmax(logits, axis=-1)
    lp = log_probs(logits, p)
    if p.keyed and at >= 0:
        return draw(lp, keyed_keys(p.noise_seed, range(at, at + lp.shape[0])))
    return mx.random.categorical(lp, axis=-1)

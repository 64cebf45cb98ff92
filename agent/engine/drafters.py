"""Drafters: what proposes tokens for the target to verify.

One small interface: `propose(history, k, params, constraint)` returns up to k tokens (and,
for a model drafter sampling at temperature > 0, the draft distribution they were drawn from);
`rewind_to(n)` keeps the drafter consistent when the session's history is cut back to n tokens.
`history` is the session's token list; its last token is the pending one (not yet verified
into the target cache). Drafters never touch the target's cache.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Protocol, Sequence

import mlx.core as mx

from .loading import LoadedModel
from .sampling import SamplingParams, apply_mask, log_probs
from .step import TokenConstraint, common_prefix, forward, prefill


@dataclass
class Draft:
    tokens: list[int]
    # (len(tokens), V) log-probabilities the tokens were drawn from; None = deterministic
    # proposal (point mass), as for lookup or greedy drafting.
    logq: mx.array | None = None
    source: str = ""


class Drafter(Protocol):
    name: str

    def propose(self, history: Sequence[int], k: int, params: SamplingParams,
                constraint: TokenConstraint | None = None) -> Draft: ...

    def rewind_to(self, n: int) -> None: ...


class DraftModel:
    """A smaller model with its own KV cache, kept a prefix of the session's history."""

    name = "model"

    def __init__(self, lm: LoadedModel, min_confidence: float = 0.0, vocab_limit: int = 0):
        from .session import ModelCache

        self.lm = lm
        self.cache = ModelCache(lm)
        self.fed: list[int] = []  # tokens in the draft cache (a prefix of the history)
        # Stop drafting once the draft's own top probability falls below this.
        self.min_confidence = min_confidence
        # Propose only ids the target has (the target's embedding may be narrower).
        self.vocab_limit = vocab_limit or lm.vocab_size

    def rewind_to(self, n: int) -> None:
        # min with len(fed): a round interrupted inside `propose` fed the cache beyond `fed`.
        self.cache.rewind_to(min(n, len(self.fed)))
        del self.fed[self.cache.offset :]

    def adopt(self, cache: list, tokens: Sequence[int]) -> None:
        """Continue from `cache`, the KV of `tokens` (e.g. from a PrefixStore), if it fits."""
        if self.cache.adopt(cache, len(tokens)):
            self.fed = list(tokens)

    def _sync(self, history: Sequence[int]) -> list[int]:
        """Rewind to the common prefix with `history`; return the tokens still to feed."""
        self.rewind_to(common_prefix(self.fed, history[:-1]))
        return list(history[self.cache.offset :])

    def _unsure(self, lps: list[mx.array], j: int) -> bool:
        """Was draft step j (j >= 1) below the confidence floor? (Reads one value.)"""
        if j < 1 or self.min_confidence <= 0:
            return False
        return math.exp(mx.max(lps[j]).item()) < self.min_confidence

    def prepare(self, history: Sequence[int]) -> list[int]:
        """Catch the cache up with `history` but its last token (a new prompt, tool output, or
        tokens decoded while drafting was off); returns the one token left to feed."""
        todo = self._sync(history)
        if len(todo) > 1:
            prefill(self.lm.model, todo[:-1], self.cache.cache)
            self.fed.extend(todo[:-1])
            todo = todo[-1:]
        return todo

    def propose(self, history, k, params, constraint=None) -> Draft:
        todo = self.prepare(history)
        width = self.vocab_limit
        # Steps are queued with async_eval and fed to each other as lazy arrays: Python never
        # waits on a draft step, except to read the previous step's confidence (one behind,
        # so the current step computes meanwhile) or the token values a constraint needs.
        toks: list[mx.array] = []
        lps: list[mx.array] = []
        keep = k
        inp: mx.array = mx.array(todo, dtype=mx.uint32)
        for i in range(k):
            logits = forward(self.lm.model, inp, self.cache.cache)[-1:, :width]
            if constraint is not None:
                mask = constraint.masks([int(t.item()) for t in toks])[-1:]
                logits = apply_mask(logits, _fit_width(mask, width))
            if params.greedy:
                lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
                tok = mx.argmax(lp, axis=-1)
            else:
                lp = log_probs(logits, params)
                tok = mx.random.categorical(lp, axis=-1)
            mx.async_eval(tok, lp)
            toks.append(tok)
            lps.append(lp)
            # Stop early where the draft itself is unsure: such tokens are rarely accepted.
            if self._unsure(lps, i - 1):
                keep = i - 1
                break
            inp = tok
        else:
            if self._unsure(lps, k - 1):
                keep = k - 1
        values = mx.concatenate(toks).tolist()
        # Step i fed the token before it: history's last token, then values[:-1].
        self.fed.extend(todo + values[: len(toks) - 1])
        logq = mx.concatenate(lps[:keep], axis=0) if not params.greedy and keep else None
        return Draft(values[:keep], logq, self.name)


class PromptLookup:
    """N-gram lookup: continue the longest recent n-gram match in the history or extra text.

    No model call. An index maps each n-gram (min_n..max_n) to the position after its latest
    occurrence; it is updated incrementally as the history grows and rebuilt when it shrinks.
    """

    name = "lookup"

    def __init__(self, max_n: int = 4, min_n: int = 2, extra: Sequence[int] = ()):
        self.max_n, self.min_n = max_n, min_n
        self.hist: list[int] = []
        self.index: dict[tuple[int, ...], int] = {}
        self.extra = list(extra)
        self.extra_index = self._build(self.extra, len(self.extra))
        self.last_match = 0  # n of the last successful match (0 = none)

    def set_extra(self, tokens: Sequence[int]) -> None:
        """Extra text to copy from, e.g. the file being edited (tokenized)."""
        self.extra = list(tokens)
        self.extra_index = self._build(self.extra, len(self.extra))

    def _build(self, seq: Sequence[int], upto: int, index: dict | None = None,
               start: int = 0) -> dict:
        index = {} if index is None else index
        for end in range(max(start, self.min_n), upto):
            for n in range(self.min_n, min(self.max_n, end) + 1):
                index[tuple(seq[end - n : end])] = end
        return index

    def rewind_to(self, n: int) -> None:
        if n < len(self.hist):
            self.hist = self.hist[:n]
            self.index = self._build(self.hist, len(self.hist))

    def _update(self, history: Sequence[int]) -> None:
        self.rewind_to(common_prefix(self.hist, history))
        old = len(self.hist)
        self.hist.extend(history[old:])
        # Index n-grams that have at least one continuation token (end < len).
        self._build(self.hist, len(self.hist), self.index, start=max(old - 1, 0))

    def match(self, history: Sequence[int], k: int) -> tuple[int, list[int]]:
        """(n, continuation) for the longest suffix n-gram seen before; (0, []) if none."""
        self._update(history)
        for n in range(min(self.max_n, len(history)), self.min_n - 1, -1):
            key = tuple(history[-n:])
            end = self.index.get(key)
            if end is not None and end < len(self.hist):
                return n, _continue(self.hist, end, k)
            end = self.extra_index.get(key)
            if end is not None and end < len(self.extra):
                return n, self.extra[end : end + k]
        return 0, []

    def propose(self, history, k, params, constraint=None) -> Draft:
        n, cont = self.match(history, k)
        self.last_match = n
        return Draft(cont, None, self.name)


def _fit_width(mask: mx.array, width: int) -> mx.array:
    """A (1, V') mask cut or padded (with False) to `width` columns."""
    if mask.shape[-1] >= width:
        return mask[:, :width]
    return mx.concatenate([mask, mx.zeros((1, width - mask.shape[-1]), dtype=mx.bool_)], axis=-1)


def _continue(seq: Sequence[int], end: int, k: int) -> list[int]:
    """seq[end:end+k], extended periodically past the end of seq: a match close to the end
    means the text repeats with period len(seq) - end, so the draft repeats it too."""
    out: list[int] = []
    for i in range(k):
        j = end + i
        out.append(seq[j] if j < len(seq) else out[j - len(seq)])
    return out


class Combined:
    """Lookup when it has a confident (long enough) match, the draft model otherwise."""

    name = "combined"

    def __init__(self, model: DraftModel, lookup: PromptLookup, confident_n: int = 3):
        self.model, self.lookup, self.confident_n = model, lookup, confident_n
        self.lookup_k = 8  # set per round by the Speculator from lookup's own acceptance

    def rewind_to(self, n: int) -> None:
        self.model.rewind_to(n)
        self.lookup.rewind_to(n)

    def prepare(self, history: Sequence[int]) -> None:
        self.model.prepare(history)

    def propose(self, history, k, params, constraint=None) -> Draft:
        n, cont = self.lookup.match(history, self.lookup_k)
        if n >= self.confident_n and cont:
            return Draft(cont, None, self.lookup.name)
        return self.model.propose(history, k, params, constraint)

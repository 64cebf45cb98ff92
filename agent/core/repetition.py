"""Degenerate-repetition detection: a model writing the same span over and over.

Small models fall into loops (one sentence repeated until the token limit). `RepetitionGuard`
watches a turn's tokens as they are generated and trips once the latest `min_span` tokens are
periodic (a span of at most `max_period` tokens repeated back to back, at least `min_repeats`
times). The cost per token is one comparison per candidate period. A backend ends the turn
right after the token that trips it (the local engine's `Session.generate(watch=...)`), so
where it stops does not depend on how decoding rounds were cut. Engine-neutral: it sees
token ids only and imports nothing heavy.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable


STOP_REASON = "repetition"


class RepetitionGuard:
    """Trips on exact periodic repetition of the most recent tokens."""

    def __init__(self, max_period: int = 100, min_span: int = 120, min_repeats: int = 3):
        self.max_period, self.min_span, self.min_repeats = max_period, min_span, min_repeats
        self.recent: deque[int] = deque(maxlen=max_period + 1)
        # runs[p]: how many of the latest tokens equal the token p positions before them.
        self.runs = [0] * (max_period + 1)
        self.seen = 0
        self.period = 0  # the period found when tripped (0: not tripped)

    def add(self, token: int) -> bool:
        """Feed one token; True once the stream is degenerate (and from then on)."""
        self.recent.append(token)
        self.seen += 1
        n = len(self.recent)
        for p in range(1, min(self.max_period, n - 1) + 1):
            run = self.runs[p] + 1 if self.recent[-1] == self.recent[-1 - p] else 0
            self.runs[p] = run
            # The last run + p tokens repeat with period p: enough copies over a long span?
            if not self.period and run + p >= self.min_span and run >= (self.min_repeats - 1) * p:
                self.period = p
        return bool(self.period)

    def add_all(self, tokens: Iterable[int]) -> bool:
        tripped = False
        for t in tokens:
            tripped = self.add(int(t)) or tripped
        return tripped

    def reason(self) -> str:
        return (f"the model kept repeating the same {self.period}-token span; the turn was "
                f"stopped after {self.seen} tokens")

"""What the benches share: one timed generation of ours, loop detection, a forward pass's cost."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import mlx.core as mx

from ..engine import LoadedModel, SamplingParams, Session
from ..events import GenerationStats


@dataclass
class Run:
    tokens: list[int]
    tps: float
    stats: GenerationStats | None = None


def timed(session: Session, prompt: list[int], n: int,
          params: SamplingParams = SamplingParams()) -> Run:
    """`n` tokens of ours for `prompt` (no stop token), with their decode speed."""
    done = session.complete(prompt, params=params, max_tokens=n, stop_tokens=set())
    return Run(done.tokens, done.stats.decode_tps, done.stats)


def totals(rows: list[dict], ks: list[int]) -> dict:
    """What `bench spec` reports over its workload rows (each with plain_tps, mlx_lm_tps per
    K, drafted, accepted, rounds): mlx-lm's best fixed K by mean ratio to plain, and our
    acceptance over all rounds."""
    best = max(ks, key=lambda k: statistics.mean(r["mlx_lm_tps"][k] / r["plain_tps"] for r in rows))
    drafted = sum(r["drafted"] for r in rows)
    accepted = sum(r["accepted"] for r in rows)
    rounds = sum(r["rounds"] for r in rows)
    return dict(mlx_lm_best_k=best,
                mlx_lm_speedup_vs_plain=statistics.mean(r["mlx_lm_tps"][best] / r["plain_tps"]
                                                        for r in rows),
                acceptance_rate=accepted / drafted if drafted else 0.0,
                mean_accepted=accepted / rounds if rounds else 0.0)


def loop_period(tokens: list[int], tail: int = 24, max_period: int = 12) -> int:
    """Smallest period of the last `tail` tokens (0 = not looping). Random models can fall into
    loops in greedy generation, where any draft agrees and acceptance means nothing."""
    t = tokens[-tail:]
    if len(t) < tail:
        return 0
    for p in range(1, max_period + 1):
        if all(t[i] == t[i + p] for i in range(len(t) - p)):
            return p
    return 0


def forward_ms(lm: LoadedModel, width: int, context: list[int], reps: int = 5) -> float:
    """Median time of a `width`-token pass on top of a cache holding `context`."""
    from mlx_lm.models.cache import make_prompt_cache

    from ..engine import forward

    times = []
    for _ in range(reps):
        cache = make_prompt_cache(lm.model)
        mx.eval(forward(lm.model, context, cache))
        t = time.perf_counter()
        mx.eval(forward(lm.model, context[:width], cache))
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000

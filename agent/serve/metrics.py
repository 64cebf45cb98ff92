"""The server's figures in Prometheus's text format (`GET /metrics`), on prometheus_client.

Counters add up every request's `GenerationStats`; gauges show the queue and the last
request's speed; acceptance and tokens per round are ratios of the counters, computed when
scraped. One registry per server (tests start several in one process).
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,  # noqa: F401 - re-exported for the app
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
    generate_latest,
)

from ..events import GenerationStats


class Metrics:
    def __init__(self) -> None:
        disable_created_metrics()  # no `_created` series beside each counter (process-wide)
        r = self.registry = CollectorRegistry()
        p = "spec_agent_"
        self.requests = Counter(p + "requests", "Requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter(p + "prompt_tokens", "Prompt tokens of finished generations", registry=r)
        self.cache_hit_tokens = Counter(p + "cache_hit_tokens",
                                        "Prompt tokens served from a prefix cache", registry=r)
        self.generated_tokens = Counter(p + "generated_tokens", "Tokens generated", registry=r)
        self.decode_seconds = Counter(p + "decode_seconds", "Seconds spent decoding", registry=r)
        self.prefill_seconds = Counter(p + "prefill_seconds", "Seconds to the first token", registry=r)
        self.rounds = Counter(p + "spec_rounds", "Speculative rounds (draft + verify)", registry=r)
        self.drafted = Counter(p + "draft_tokens", "Tokens drafted", registry=r)
        self.accepted = Counter(p + "accepted_tokens", "Drafted tokens the target accepted", registry=r)
        self.spec_tokens = Counter(p + "spec_generated_tokens",
                                   "Tokens generated in generations that speculated", registry=r)
        self.cancelled = Counter(p + "cancelled_generations",
                                 "Generations stopped because the client went away", registry=r)
        self.queue_depth = Gauge(p + "queue_depth", "Requests waiting for the model", registry=r)
        self.busy = Gauge(p + "busy", "1 while a generation runs", registry=r)
        self.last_tps = Gauge(p + "last_decode_tokens_per_second",
                              "Decode speed of the last finished generation", registry=r)
        acceptance = Gauge(p + "acceptance_rate", "Accepted / drafted tokens, all generations", registry=r)
        acceptance.set_function(lambda: self._ratio("accepted", "drafted"))
        per_round = Gauge(p + "tokens_per_round",
                          "Tokens per speculative round (accepted drafts + the target's own)", registry=r)
        per_round.set_function(lambda: self._ratio("spec_tokens", "rounds"))
        tps = Gauge(p + "decode_tokens_per_second", "Generated tokens / decode seconds, all generations",
                    registry=r)
        tps.set_function(lambda: self._ratio("generated", "decode_s"))
        # the totals the ratios read (prometheus_client has no public getter for a counter)
        self._totals = dict.fromkeys(("accepted", "drafted", "spec_tokens", "rounds", "generated",
                                      "decode_s"), 0.0)

    def generation(self, stats: GenerationStats) -> None:
        """Count one finished (or cancelled) generation."""
        self.prompt_tokens.inc(stats.prompt_tokens)
        self.cache_hit_tokens.inc(stats.cached_tokens)
        self.generated_tokens.inc(stats.generated_tokens)
        self.decode_seconds.inc(stats.decode_s)
        self.prefill_seconds.inc(stats.prefill_s)
        t = self._totals
        t["generated"] += stats.generated_tokens
        t["decode_s"] += stats.decode_s
        if stats.rounds:
            self.rounds.inc(stats.rounds)
            self.drafted.inc(stats.drafted)
            self.accepted.inc(stats.accepted)
            self.spec_tokens.inc(stats.generated_tokens)
            t["rounds"] += stats.rounds
            t["drafted"] += stats.drafted
            t["accepted"] += stats.accepted
            t["spec_tokens"] += stats.generated_tokens
        if stats.finish_reason == "cancelled":
            self.cancelled.inc()
        elif stats.decode_tps:
            self.last_tps.set(stats.decode_tps)

    def text(self) -> bytes:
        return generate_latest(self.registry)

    def _ratio(self, num: str, den: str) -> float:
        d = self._totals[den]
        return self._totals[num] / d if d else 0.0

"""The speculation policy's decision, fed synthetic rounds: K and on/off follow measured
acceptance and measured round cost against a measured plain step (speed itself is
asserted by the benches, not here)."""

from __future__ import annotations

import random

import pytest

from agent.engine.drafters import PromptLookup
from agent.engine.speculative import (SpecPolicy, Speculator, best_k, expected_speedup,
                                      expected_tokens)


class _StopsItself(PromptLookup):
    """Stands in for a draft model that ends its rounds by its own confidence."""

    name = "model"
    stops_itself = True


def feed(spec: Speculator, source: str, rounds, plain_s: float, step_s: float = 0.0,
         base: float = 1.05, free: bool = False) -> None:
    """Record rounds (k drafted, n accepted) as the Speculator's verify step would, each
    costing `plain_s * (base + 0.03 k) + step_s * k` (a verify pass a little wider than a
    plain step, plus `step_s` of drafting per token); `free`: each round is asked for the K
    the policy gives and drafts at most that many (a self-stopping draft's rounds asked for
    its cap are of its own length, the others are cut at the fit's K)."""
    c = spec.call
    for k, n in rounds:
        if free:  # the round drafts at most what it was asked for
            spec._asked = spec.k_for("model")
            k, n = min(k, spec._asked), min(n, spec._asked)
        draft_s = step_s * k
        c.drafted += k
        c.chained += k  # a chain round: every draft is on its main line
        c.accepted += n
        c.rounds += 1
        c.draft_s += draft_s
        tally = c.by_source.setdefault(source, [0, 0])
        tally[0] += k
        tally[1] += n
        spec._note_round(n + 1, plain_s * (base + 0.03 * k) + draft_s)


def chain(rng: random.Random, a: float, k: int) -> int:
    n = 0
    while n < k and rng.random() < a:
        n += 1
    return n


def test_expected_tokens_and_best_k():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    # Free drafting and a flat verify: the longest chain pays most.
    assert best_k(0.9, 1.0, 0.0, 1.0, 12)[0] == 12
    # Each draft costs a fifth of a step: past some length, more drafts cost more than they bring.
    k, s = best_k(0.6, 1.0, 0.2, 1.0, 12)
    assert 1 < k < 6 and s == pytest.approx(expected_speedup(0.6, k, 1.0, 0.2, 1.0))
    assert best_k(0.1, 1.1, 0.05, 1.0, 12)[1] < 1.0  # nothing pays


def test_a_confidently_wrong_draft_is_switched_off_and_its_cap_shrinks():
    """The controlled pair's `edit` workload: rounds of ~12 drafts, few accepted; a draft
    step costs a fifth of a target step, so not even K=1 pays."""
    rng = random.Random(1)
    spec = Speculator(_StopsItself(), SpecPolicy(mode="auto"))
    assert spec.k_for("model") == 12  # unmeasured: the draft's confidence decides
    spec.plain_tps.add(1 / 0.1)
    feed(spec, "draft", [(12, chain(rng, 0.15, 12)) for _ in range(10)], 0.1, step_s=0.02,
         free=True)
    assert spec.k_for("model") <= 2
    reason = spec._expected_off()
    assert reason and "expected speedup" in reason
    # `on` keeps drafting, at the short K.
    on = Speculator(_StopsItself(), SpecPolicy(mode="on"))
    on.plain_tps.add(1 / 0.1)
    feed(on, "draft", [(12, chain(rng, 0.15, 12)) for _ in range(10)], 0.1, step_s=0.02,
         free=True)
    assert on._expected_off() is None and on.k_for("model") <= 2


def test_a_good_draft_stays_on_with_a_longer_cap():
    rng = random.Random(2)
    spec = Speculator(_StopsItself(), SpecPolicy(mode="auto"))
    spec.plain_tps.add(1 / 0.1)
    feed(spec, "draft", [(k, chain(rng, 0.85, k)) for k in (6, 8, 10, 12) * 4], 0.1,
         step_s=0.008)
    assert spec._expected_off() is None
    assert spec.k_for("model") >= 4
    assert spec.expected()[0] > 1.5


def test_lookup_at_low_acceptance_on_prose_switches_off():
    """The TUI's case: lookup drafting on prose at 14 % acceptance is not worth a round that
    costs 1.3 pipelined plain steps (a verify pass waits for its result; plain steps overlap)."""
    rng = random.Random(3)
    spec = Speculator(PromptLookup(), SpecPolicy(mode="auto"))
    spec.plain_tps.add(1 / 0.05)
    feed(spec, "lookup", [(k, chain(rng, 0.14, k)) for k in (3, 4, 2, 5) * 3], 0.05, base=1.3)
    assert "expected speedup" in (spec._expected_off() or "")
    copy = Speculator(PromptLookup(), SpecPolicy(mode="auto"))
    copy.plain_tps.add(1 / 0.05)
    feed(copy, "lookup", [(16, 16), (16, 16), (8, 3), (16, 16)] * 3, 0.05, base=1.3)
    assert copy._expected_off() is None
    assert copy.k_for("lookup") >= 8


def test_no_decision_before_enough_rounds_and_a_plain_step():
    spec = Speculator(_StopsItself(), SpecPolicy(mode="auto", decide_after=4))
    feed(spec, "draft", [(12, 0)] * 10, 0.1)
    assert spec._expected_off() is None  # no plain step measured yet
    spec.plain_tps.add(10.0)
    assert spec._expected_off()
    spec.fits["model"].forget()  # re-probing: old rounds weigh little, fresh ones decide
    feed(spec, "draft", [(4, 4)] * 3, 0.1)
    assert spec._expected_off() is None  # fewer than decide_after rounds since the re-probe
    feed(spec, "draft", [(4, 4)] * 5, 0.1)
    assert spec._expected_off() is None  # and the fresh rounds pay


def test_a_pinned_k_is_judged_at_that_k():
    rng = random.Random(4)
    spec = Speculator(_StopsItself(), SpecPolicy(mode="auto", fixed_k=12))
    spec.plain_tps.add(1 / 0.1)
    feed(spec, "draft", [(12, chain(rng, 0.6, 12)) for _ in range(10)], 0.1, step_s=0.03)
    assert spec.k_for("model") == 12
    assert "K=12" in (spec.expected() or (0, ""))[1]


def test_a_new_call_re_probes_and_a_paying_re_probe_resets_the_back_off():
    rng = random.Random(5)
    spec = Speculator(_StopsItself(), SpecPolicy(mode="auto", backoff_tokens=32))
    spec.plain_tps.add(1 / 0.1)
    feed(spec, "draft", [(12, chain(rng, 0.1, 12)) for _ in range(6)], 0.1, step_s=0.02)
    reason = spec._expected_off()
    assert reason
    list(spec._switch_off(reason))
    list(spec._switch_off(reason))  # lost twice: the back-off has doubled twice
    assert not spec.enabled and spec.backoff == 128
    spec._reprobe()  # what a new call (or the end of a back-off) does
    assert spec.enabled and spec.plain_left == 0 and spec.fits["model"].rounds == 0
    feed(spec, "draft", [(4, 4)] * 6, 0.1, step_s=0.02)
    assert spec._expected_off() is None and spec.backoff == 32


def test_a_confident_draft_keeps_its_own_round_length_where_that_measured_faster():
    """Rounds ended by the draft's confidence: each of k drafts, the last (where the draft
    was unsure) rejected. One acceptance rate for every position (k-1 of k) makes the fit
    expect a shorter fixed K to pay most; the rounds as the draft ended them pay (and measured
    faster than that), so they keep their length. Where they stop paying, rounds cut at the
    fit's K that measured faster take over: the two arms are compared as measured."""
    rng = random.Random(6)
    spec = Speculator(_StopsItself(), SpecPolicy(mode="auto"))
    spec.plain_tps.add(1 / 0.1)
    feed(spec, "draft", [(k, k - 1) for k in (rng.randint(3, 9) for _ in range(12))], 0.1,
         step_s=0.03, free=True)
    fit = spec.fits["model"]
    c0, c1 = fit.cost(0.1)
    geometric = best_k(fit.acceptance, c0, c1, 0.1, 12)
    assert geometric[0] < 8  # what the fit alone would cut rounds at
    free = fit.measured("free", 0.1)
    assert free > geometric[1] and fit.arms["fixed"][2] == 0
    assert spec.k_for("model") == 12 and spec.expected()[0] == pytest.approx(free)
    for _ in range(3):  # rounds at the fit's K that measured 1.5x as fast
        fit.add(geometric[0], geometric[0], (geometric[0] + 1) * 0.1 / (1.5 * free),
                0.0, arm="fixed")
    assert fit.measured("fixed", 0.1) == pytest.approx(1.5 * free)
    assert spec.k_for("model") == 12  # its own length still pays: it keeps drafting so
    spec.plain_tps = type(spec.plain_tps)()
    spec.plain_tps.add(1 / (0.1 / free * 0.9))  # plain measured faster: its length no longer pays
    assert fit.measured("free", spec._plain_s()) < 1.0
    assert spec.k_for("model") < 12 and spec.expected()[0] == pytest.approx(1.35)
    # Rounds at a pinned K are no arm's.
    pinned = Speculator(_StopsItself(), SpecPolicy(mode="auto", fixed_k=12))
    pinned.plain_tps.add(1 / 0.1)
    feed(pinned, "draft", [(k, k - 1) for k in (3, 5, 7, 9)], 0.1, step_s=0.03, free=True)
    assert pinned.fits["model"].arms == {"free": [0.0, 0.0, 0], "fixed": [0.0, 0.0, 0]}


def test_before_plain_is_measured_a_clearly_losing_draft_is_switched_off():
    """No plain probe up front: rounds are judged against the most a plain step can cost (the
    round's own verify pass). Twelve drafts that are almost all rejected lose even then; a
    draft that lands most of its rounds is left on until plain speed is measured."""

    def rounds(spec, accepted, n=6, k=12, step_s=0.02, verify_s=0.13):
        c = spec.call
        for _ in range(n):
            c.drafted += k
            c.chained += k
            c.accepted += accepted
            c.rounds += 1
            c.draft_s += step_s * k
            c.verify_s += verify_s
            tally = c.by_source.setdefault("draft", [0, 0])
            tally[0] += k
            tally[1] += accepted
            spec._note_round(accepted + 1, step_s * k + verify_s)

    bad = Speculator(_StopsItself(), SpecPolicy(mode="auto"))
    rounds(bad, accepted=0)
    reason = bad._expected_off()
    assert reason and "at most 0.35x" in reason  # 1 token per 0.37 s, a step at most 0.13 s
    good = Speculator(_StopsItself(), SpecPolicy(mode="auto"))
    rounds(good, accepted=9)
    assert good._expected_off() is None
    # Once a plain step is measured, the cost model judges instead of the bound.
    bad.plain_tps.add(1 / 0.1)
    assert "expected speedup" in (bad._expected_off() or "")


def test_a_check_skips_its_plain_probe_only_while_far_ahead_of_plain():
    spec = Speculator(_StopsItself(), SpecPolicy(mode="auto", probe_skip_ratio=1.5))
    spec.recent = (20.0, 1.0)  # recent rounds: 20 tok/s
    assert not spec._far_ahead()  # no plain speed measured yet: the probe runs
    spec.plain_tps.add(10.0)
    assert spec._far_ahead()  # 2x the plain speed measured last
    spec.recent = (14.0, 1.0)
    assert not spec._far_ahead()  # 1.4x: a fresh plain speed could change the decision

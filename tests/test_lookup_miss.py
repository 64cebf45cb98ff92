"""Prompt lookup's misses: plain tokens on the pipelined path until the lookup has a draft
again (a miss never costs a verify pass of its own), greedy output identical to plain
decoding, and consistent caches when a turn ends inside such a run of plain tokens."""

from __future__ import annotations

import pytest
from test_drafters import _generate

import agent.engine.speculative as speculative
from agent.engine.drafters import PromptLookup
from agent.engine.session import Session
from agent.engine.speculative import SpecPolicy, Speculator

COPY = "def read(path):\n    with open(path) as f:\n        return f.read()\n" * 2


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_misses_decode_plain_until_a_draft_and_stay_identical(llama, monkeypatch, mode):
    widths: list[int] = []
    verify = speculative.verify_round

    def counted(model, cache, pending, draft, *args, **kw):
        widths.append(len(draft.tokens))
        return verify(model, cache, pending, draft, *args, **kw)

    monkeypatch.setattr(speculative, "verify_round", counted)
    prompt = Session(llama).render([{"role": "user", "content": COPY + "Copy it."}])
    want, _ = _generate(Session(llama), prompt, 120)
    spec = Speculator(PromptLookup(), SpecPolicy(mode=mode))
    got, stats = _generate(Session(llama, speculator=spec), prompt, 120)
    assert got == want
    assert stats.rounds > 0 and len(widths) == stats.rounds
    assert min(widths) > 0  # every verify pass carried drafts
    # Tokens not emitted by rounds (accepted drafts + the target's own) came from plain steps.
    assert stats.accepted + stats.rounds < 120


def test_a_turn_ending_inside_a_plain_run_leaves_consistent_caches(llama):
    spec = Speculator(PromptLookup(), SpecPolicy(mode="on"))
    warm = Session(llama, speculator=spec)
    history = [{"role": "user", "content": COPY + "Copy it."}]
    for turn, n in enumerate((1, 2, 5, 9, 40)):
        prompt = warm.render(history)
        got, stats = _generate(warm, prompt, n)
        want, _ = _generate(Session(llama), prompt, n)
        assert got == want, turn
        assert warm.tcache.consistent() and warm.tcache.offset <= len(warm.tokens)
        if turn:
            assert stats.cached_tokens > 0
        history += [{"role": "assistant", "content": llama.tokenizer.decode(got)},
                    {"role": "user", "content": f"again {turn}"}]


def test_speed_check_weighs_rounds_by_their_time():
    """The on/off decision compares throughput: tokens over the time the rounds took. One
    fast round (17 tokens in 0.25 s) and three failed ones (1 token in 0.15 s each) made 20
    tokens in 0.70 s, slower than plain at 30 tok/s, though the per-round average is not."""
    spec = Speculator(PromptLookup(), SpecPolicy(mode="auto"))
    spec.plain_tps.add(30.0)
    for tokens, seconds in ((17, 0.25), (1, 0.15), (1, 0.15), (1, 0.15)):
        spec._note_round(tokens, seconds)
    assert spec.spec_tps.value > 30.0
    assert "speedup" in (spec._check_speed() or "")
    spec.plain_tps = type(spec.plain_tps)()
    spec.plain_tps.add(20.0)  # the same rounds beat plain at 20 tok/s
    assert spec._check_speed() is None

"""The repetition penalty: one function of the tokens before a position, applied by plain
decoding, the target's verify pass and the draft model alike, so speculation stays exact."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from test_speculative import _chi2, _chi2_critical, make_drafter, run, tiny_vocab_pair  # noqa: F401

from agent.engine.drafters import Draft
from agent.engine.sampling import SamplingParams, log_probs, penalize
from agent.engine.session import Session
from agent.engine.speculative import SpecPolicy, Speculator, verify_round

PENALTY = SamplingParams(repetition_penalty=1.8, repetition_window=6)


def _reference_row(logits: np.ndarray, before: list[int], p: SamplingParams) -> np.ndarray:
    out = logits.copy()
    for t in set(before[-p.repetition_window:]):
        out[t] = out[t] * p.repetition_penalty if out[t] < 0 else out[t] / p.repetition_penalty
    return out


def test_each_row_is_penalized_for_the_tokens_before_it():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 12)).astype(np.float32)
    history, draft = [1, 2, 3, 4, 5, 6, 7, 8], [9, 2, 11]
    got = np.array(penalize(mx.array(logits), history, draft, PENALTY))
    for i in range(4):
        want = _reference_row(logits[i], history + draft[:i], PENALTY)
        np.testing.assert_allclose(got[i], want, rtol=1e-6)
    # the window: token 1 is 8 tokens back for row 0, so it is not penalized
    assert got[0, 1] == logits[0, 1] and got[1, 9] != logits[1, 9]
    off = SamplingParams()
    assert penalize(mx.array(logits), history, draft, off) is not None
    np.testing.assert_array_equal(np.array(penalize(mx.array(logits), history, draft, off)), logits)


@pytest.mark.parametrize("kind", ["model", "lookup", "combined"])
@pytest.mark.parametrize("k", [2, 5])
def test_greedy_speculation_with_a_penalty_equals_plain_with_it(pair, kind, k):
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": "def add(a, b):\n    return a + b\n"}])
    params = SamplingParams(repetition_penalty=1.3)
    want, _, _ = run(Session(target), prompt, params=params, max_tokens=64, stop_tokens=set())
    unpenalized, _, _ = run(Session(target), prompt, max_tokens=64, stop_tokens=set())
    assert want != unpenalized  # the penalty changes what is decoded
    spec = Session(target, speculator=Speculator(make_drafter(kind, draft),
                                                 SpecPolicy(mode="on", fixed_k=k)))
    got, stats, _ = run(spec, prompt, params=params, max_tokens=64, stop_tokens=set())
    assert got == want and stats.rounds > 1
    # and across a second turn on the warm session (history from the first one counts)
    prompt2 = prompt + got + Session(target).tokenizer.encode("\nAgain:")
    want2, _, _ = run(Session(target), prompt2, params=params, max_tokens=32, stop_tokens=set())
    got2, _, _ = run(spec, prompt2, params=params, max_tokens=32, stop_tokens=set())
    assert got2 == want2


def _two_token_dist(model, prefix, params):
    from mlx_lm.models.cache import make_prompt_cache

    from agent.engine.step import forward

    out = {}
    logits = forward(model, prefix, make_prompt_cache(model))[-1:]
    p1 = mx.exp(log_probs(penalize(logits, prefix, [], params), params))[0].tolist()
    for a, pa in enumerate(p1):
        logits2 = forward(model, [*prefix, a], make_prompt_cache(model))[-1:]
        p2 = mx.exp(log_probs(penalize(logits2, [*prefix, a], [], params), params))[0].tolist()
        for b, pb in enumerate(p2):
            out[(a, b)] = pa * pb
    return out


def test_penalized_sampling_is_exact(tiny_vocab_pair):
    """Two tokens from a verify pass of a fixed draft ~ the penalized plain distribution."""
    from mlx_lm.models.cache import make_prompt_cache

    from agent.engine.step import prefill

    target, _ = tiny_vocab_pair
    params = SamplingParams(temperature=1.0, repetition_penalty=3.0, repetition_window=4)
    prefix = [1, 5, 2, 7]
    want = _two_token_dist(target, prefix, params)
    mx.random.seed(99)
    counts: dict = {}
    n = 3000
    for _ in range(n):
        cache = make_prompt_cache(target)
        prefill(target, prefix[:-1], cache)
        emitted, _ = verify_round(target, cache, prefix[-1], Draft([5, 7]), params, history=prefix)
        if len(emitted) < 2:
            emitted += verify_round(target, cache, emitted[-1], Draft([]), params,
                                    history=[*prefix, *emitted])[0]
        key = tuple(emitted[:2])
        counts[key] = counts.get(key, 0) + 1
    stat, df = _chi2(counts, want, n)
    assert df >= 3 and stat < _chi2_critical(df), (stat, df)


@pytest.mark.parametrize("draft_vocab", [0, 64])
def test_the_draft_model_applies_the_same_penalty(pair, draft_vocab):
    """Its drafts are the penalized argmax, so with the penalty on they still agree with the
    penalized target as often as without it (and the output equals plain)."""
    from agent.engine.drafters import DraftModel

    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": "x = 1\nx = 1\nx = 1\n"}])
    params = SamplingParams(repetition_penalty=1.5)
    want, _, _ = run(Session(target), prompt, params=params, max_tokens=48, stop_tokens=set())
    model = DraftModel(draft, draft_vocab=draft_vocab)
    spec = Session(target, speculator=Speculator(model, SpecPolicy(mode="on", fixed_k=4)))
    got, stats, _ = run(spec, prompt, params=params, max_tokens=48, stop_tokens=set())
    assert got == want
    if draft_vocab == 0:  # the controlled pair's draft is the target's first layers
        assert stats.accepted / stats.drafted > 0.5
    # the draft's penalty is the target's, column for column (restricted head: its own ids)
    vocab = model.vocab_limit
    full = mx.random.normal((1, vocab))
    recent = [0, 1, 3, 70, 5000 % vocab]
    want_row = penalize(full, recent, [], params)
    if model.head is None:
        got_row = model._penalized(full, recent, params)
        np.testing.assert_allclose(np.array(got_row), np.array(want_row), rtol=1e-6)
    else:
        ids = np.array(model.head.real_ids(mx.arange(model.head.size)))
        got_row = model._penalized(full[:, mx.array(ids)], recent, params)
        np.testing.assert_allclose(np.array(got_row), np.array(want_row)[:, ids], rtol=1e-6)

"""Restricted draft head: logits over the first N ids plus ids seen in the history.

Greedy speculative output equals plain greedy; at temperature > 0 the first two emitted tokens
follow plain sampling (chi-square), with drafts that never leave the restricted set; the head's
logits are the full head's columns (tied, untied and quantized heads); unsupported model types
keep the full head."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from agent.engine.draft_head import RestrictedHead, head_module
from agent.engine.drafters import DraftModel
from agent.engine.loading import LoadedModel
from agent.engine.sampling import SamplingParams
from agent.engine.session import Session
from agent.engine.speculative import SpecPolicy, Speculator, verify_round
from agent.events import GenerationStats, TextDelta

from test_speculative import (PROMPTS, _chi2, _chi2_critical, _tool_constraint,  # noqa: F401
                              _two_token_dist, tiny_vocab_pair)

GREEDY = SamplingParams()


def _run(session: Session, prompt: list[int], **kw) -> tuple[list[int], GenerationStats]:
    toks, stats = [], None
    for e in session.generate(prompt, **kw):
        if isinstance(e, TextDelta):
            toks += e.tokens
        elif isinstance(e, GenerationStats):
            stats = e
    return toks, stats


class _Recording(DraftModel):
    """A DraftModel that keeps every proposal, to check the ids it drafts."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.proposed: list[int] = []

    def propose(self, history, k, params, constraint=None):
        d = super().propose(history, k, params, constraint)
        self.proposed += d.tokens
        return d


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_identical_to_plain(pair, k):
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": PROMPTS[k % 3]}])
    want, _ = _run(Session(target), prompt, max_tokens=64, stop_tokens=set())
    drafter = _Recording(draft, draft_vocab=64)
    spec = Session(target, speculator=Speculator(drafter, SpecPolicy(mode="on", fixed_k=k)))
    got, stats = _run(spec, prompt, max_tokens=64, stop_tokens=set())
    assert got == want
    assert stats.rounds > 1 and 0 < stats.accepted <= stats.drafted
    covered = set(range(64)) | set(prompt) | set(got)
    assert drafter.head.extra and set(drafter.proposed) <= covered
    # ids of the prompt and of the text so far (not yet the last round's) were added
    assert {t for t in prompt if t >= 64} <= set(drafter.head.extra) <= covered


def test_restricted_logits_are_full_head_columns(pair, qwen2_dir):
    """Untied lm_head (llama pair), tied embedding (qwen2), and a 4-bit quantized tied head."""
    from mlx_lm.models.cache import make_prompt_cache

    from agent.engine.loading import load_model

    qwen = load_model(str(qwen2_dir), device="cpu").model
    quant = load_model(str(qwen2_dir), device="cpu").model
    nn.quantize(quant, group_size=32, bits=4)
    for model in (pair[1].model, qwen, quant):
        assert head_module(model) is not None
        head = RestrictedHead.build(model, 40, model.args.vocab_size)
        head.add([300, 45, 7, 300])
        head.add([511, 45])  # a second batch extends the added rows
        ids = list(range(40)) + [45, 300, 511]
        x = mx.array([[3, 17, 45, 99]])
        full = model(x, cache=make_prompt_cache(model))[0, -2:]
        hidden = model.model(x, cache=make_prompt_cache(model))[0, -2:]
        got = head.logits(hidden)
        assert got.shape == (2, len(ids)) and head.size == len(ids)
        assert np.allclose(np.array(got), np.array(full[:, ids]), atol=1e-4)
        idx = mx.array([len(ids) - 1, 0, 40])
        assert head.real_ids(idx).tolist() == [511, 0, 45]


def test_unsupported_model_type_keeps_full_head():
    from mlx_lm.models.llama import Model, ModelArgs

    args = ModelArgs(model_type="gemma", hidden_size=16, num_hidden_layers=1,
                     intermediate_size=32, num_attention_heads=2, num_key_value_heads=1,
                     rms_norm_eps=1e-5, vocab_size=64, rope_theta=10000.0)
    m = Model(args)
    assert head_module(m) is None
    lm = LoadedModel(m, None, "tiny", "mlx", "float32", "cpu")
    assert DraftModel(lm, draft_vocab=8).head is None
    args.model_type = "llama"
    assert DraftModel(lm, draft_vocab=8).head is not None
    assert DraftModel(lm, draft_vocab=64).head is None  # covers the whole vocabulary
    assert DraftModel(lm, draft_vocab=0).head is None


FILTERED = SamplingParams(temperature=0.8, top_k=5, top_p=0.9)


@pytest.mark.parametrize("params,n", [
    (FILTERED, 1200),
    pytest.param(FILTERED, 4000, marks=pytest.mark.slow),
    pytest.param(SamplingParams(temperature=1.0), 4000, marks=pytest.mark.slow)])
def test_sampling_is_exact(tiny_vocab_pair, params, n):
    """Draft ids 0..2 plus the history's (1, 5): the target's mass on 3, 4, 6 and 7 can only
    come from rejections, and the first two emitted tokens still follow plain sampling."""
    from mlx_lm.models.cache import make_prompt_cache

    from agent.engine.step import prefill

    target, draft_model = tiny_vocab_pair
    prefix = [1, 5, 2, 1]
    want = _two_token_dist(target, prefix, params)
    lm = LoadedModel(draft_model, None, "tiny", "mlx", "float32", "cpu")
    drafter = DraftModel(lm, draft_vocab=3)
    mx.random.seed(4321)
    counts: dict = {}
    allowed = {0, 1, 2, 5}
    for _ in range(n):
        cache = make_prompt_cache(target)
        prefill(target, prefix[:-1], cache)
        d = drafter.propose(prefix, 2, params)
        assert set(d.tokens) <= allowed
        assert d.logq.shape == (len(d.tokens), 8)
        emitted, _ = verify_round(target, cache, prefix[-1], d, params)
        if len(emitted) < 2:
            emitted += verify_round(target, cache, emitted[-1], _empty(), params)[0]
        counts[tuple(emitted[:2])] = counts.get(tuple(emitted[:2]), 0) + 1
    q = np.exp(np.array(d.logq))
    assert np.all(q[:, [3, 4, 6, 7]] == 0) and np.allclose(q.sum(axis=1), 1, atol=1e-5)
    stat, df = _chi2(counts, want, n)
    assert df >= 3
    assert stat < _chi2_critical(df), (stat, df)
    assert all(want.get(key, 0) > 0 for key in counts)
    assert any(key[0] not in allowed for key in counts)  # rejections did reach outside ids


def _empty():
    from agent.engine.drafters import Draft

    return Draft([])


def test_constrained_speculation_equals_constrained_plain(pair):
    """Grammar masks go through the restricted head's columns; forced tokens stay free."""
    from agent.engine import SpecSettings, make_speculator

    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": "call a tool"}]) + \
        target.tokenizer.encode("<tool_call>", add_special_tokens=False)
    want, _ = _run(Session(target), prompt, max_tokens=80, constraint=_tool_constraint(target))
    spec = make_speculator(SpecSettings(drafter="model", speculation="on", draft_vocab=48), target, draft)
    assert spec.drafter.head is not None and spec.drafter.head.n_first == 48
    got, stats = _run(Session(target, speculator=spec), prompt, max_tokens=80,
                      constraint=_tool_constraint(target))
    assert got == want
    assert stats.forced_tokens > 0 and stats.accepted <= stats.drafted


def test_prefix_store_turns_equal_cold_plain(pair):
    """A draft that adopts stored KV (its history not yet scanned) and later turns of the same
    session: every turn equals cold plain decoding, and the ids of each prompt get covered."""
    from agent.engine.prefix_store import PrefixStore

    target, draft = pair
    store = PrefixStore(None, memory_mb=64, disk_mb=0)
    prompts = [Session(target).render([{"role": "user", "content": p}]) for p in PROMPTS]
    for i in range(2):  # the second session's drafter starts from the store's entries
        drafter, adopted = DraftModel(draft, draft_vocab=48), []
        adopt = drafter.adopt
        drafter.adopt = lambda cache, toks: (adopted.append(len(toks)), adopt(cache, toks))[1]
        spec = Session(target, speculator=Speculator(drafter, SpecPolicy(mode="on", fixed_k=4)),
                       store=store)
        for prompt in prompts[i:]:
            want, _ = _run(Session(target), prompt, max_tokens=24, stop_tokens=set())
            got, stats = _run(spec, prompt, max_tokens=24, stop_tokens=set())
            assert got == want and stats.rounds > 0
            assert {t for t in prompt if t >= 48} <= set(drafter.head.extra)
        if i:
            assert adopted  # the second session's drafter did start from stored KV

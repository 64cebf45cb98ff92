"""Token trees: one verify pass over several candidates, exact at greedy and at temperature.

Tree verification equals chain verification equals plain decoding token for token (multi-turn,
cancels, the grammar on); after a tree round the target and draft caches equal a cold run's;
the tree sampler's tokens follow the target's distribution (chi-square); the node budget
follows the measured verify cost."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache
from test_speculative import (PROMPTS, _chi2, _chi2_critical, _tool_constraint,  # noqa: F401
                              make_drafter, run, tiny_vocab_pair)

import agent.engine.speculative as speculative
from agent.cancel import CancelToken
from agent.engine.drafters import Combined, Draft, DraftModel, PromptLookup
from agent.engine.sampling import SamplingParams, log_probs
from agent.engine.session import Session
from agent.engine.speculative import SpecPolicy, Speculator, verify_round
from agent.engine.step import forward, prefill
from agent.engine.tree import (TokenTree, TreeBudget, TreeShape, VerifyCost, accept_tree_sampled,
                               compact, node_budget, tree_logits, verify_tree)
from agent.events import TextDelta

FLAT = {1: 1.0, 2: 1.0, 64: 1.05}  # a verify cost that hardly grows with rows: trees pay


def tree_budget(cap: int = 12) -> TreeBudget:
    """Branch wherever the random draft has any second choice (its distributions are flat);
    every round that can branch is a tree (not measured against chains)."""
    return TreeBudget(cap=cap, gain=0.002, close=0.05, cost=VerifyCost(FLAT), measured=False)


@pytest.fixture
def rounds(monkeypatch):
    """(nodes, accepted, branched) of every tree verified, however it was called."""
    seen: list[tuple[int, int, bool]] = []
    real = speculative.verify_tree

    def counting(model, cache, tree, *a, **kw):
        out = real(model, cache, tree, *a, **kw)
        path = out[1]
        seen.append((tree.nodes, len(path) - 1, not _on_main_line(tree, path)))
        return out

    monkeypatch.setattr(speculative, "verify_tree", counting)
    return seen


def _on_main_line(tree: TokenTree, path: list[int]) -> bool:
    """Is every node of `path` its parent's first child (the drafter's main line)?"""
    return all(tree.children[tree.parents[n]][0] == n for n in path[1:])


def _kv(cache) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each layer's keys and values up to its offset."""
    return [(np.array(c.keys[..., : c.offset, :]), np.array(c.values[..., : c.offset, :]))
            for c in cache]


def _cold_kv(model, tokens) -> list[tuple[np.ndarray, np.ndarray]]:
    cache = make_prompt_cache(model)
    prefill(model, tokens, cache)
    return _kv(cache)


def _assert_kv_equal(got, want, atol=1e-5):
    assert len(got) == len(want)
    for (gk, gv), (wk, wv) in zip(got, want):
        assert gk.shape == wk.shape and gv.shape == wv.shape
        np.testing.assert_allclose(gk, wk, atol=atol, rtol=1e-5)
        np.testing.assert_allclose(gv, wv, atol=atol, rtol=1e-5)


# ---- the pass ------------------------------------------------------------------------------


def test_tree_rows_equal_each_paths_chain(pair):
    """Each node's logits equal those of its path fed as a chain; a chain-shaped tree is the
    chain pass bitwise."""
    target, _ = pair
    prompt = Session(target).render([{"role": "user", "content": "rows"}])
    tree = TokenTree.from_paths(prompt[-1], [[5, 6, 7], [5, 9], [8, 6]], 16)
    assert tree.tokens == [prompt[-1], 5, 8, 6, 9, 6, 7] and tree.parents == [-1, 0, 0, 1, 1, 2, 3]
    cache = make_prompt_cache(target.model)
    prefill(target.model, prompt[:-1], cache)
    got = np.array(tree_logits(target.model, cache, tree))
    for node in range(len(tree)):
        c = make_prompt_cache(target.model)
        prefill(target.model, prompt[:-1], c)
        want = np.array(forward(target.model, [prompt[-1], *tree.path_tokens(node)], c)[-1])
        np.testing.assert_allclose(got[node], want, atol=1e-4, rtol=1e-4)
    c1, c2 = make_prompt_cache(target.model), make_prompt_cache(target.model)
    prefill(target.model, prompt[:-1], c1)
    prefill(target.model, prompt[:-1], c2)
    chain = forward(target.model, [prompt[-1], 5, 6, 7], c1)
    assert mx.array_equal(chain, tree_logits(target.model, c2, TokenTree.chain(prompt[-1], [5, 6, 7])))


@pytest.mark.parametrize("kv_bits", [0, 8])
def test_compaction_leaves_the_cache_of_a_cold_run(pair, kv_bits):
    """Verify a tree whose accepted path is a branch: the target cache afterwards equals a cold
    prefill of the same tokens (plain and quantized KV)."""
    from agent.engine.cache import make_cache

    target, _ = pair
    prompt = Session(target).render([{"role": "user", "content": "compact"}])
    truth = run(Session(target), prompt, max_tokens=4, stop_tokens=set())[0]
    wrong = [(t + 1) % target.vocab_size for t in truth]
    # main line wrong at once; the second branch has the target's first two tokens
    tree = TokenTree.from_paths(prompt[-1], [[wrong[0], truth[1]], [truth[0], wrong[1]],
                                             [truth[0], truth[1], wrong[2]], [wrong[0], wrong[1]]], 16)
    cache = make_cache(target.model, kv_bits)
    prefill(target.model, prompt[:-1], cache)
    emitted, path = verify_tree(target.model, cache, tree, SamplingParams())
    assert emitted == truth[:3] and len(path) == 3 and path[1] != 1  # a branch was accepted
    assert cache[0].offset == len(prompt) + 2
    want = make_cache(target.model, kv_bits)
    prefill(target.model, [*prompt, *truth[:2]], want)
    if kv_bits:
        for g, w in zip(cache, want):
            for a, b in ((g.keys, w.keys), (g.values, w.values)):  # each (data, scales, biases)
                a = mx.dequantize(*(x[..., : g.offset, :] for x in a), group_size=g.group_size,
                                  bits=g.bits)
                b = mx.dequantize(*(x[..., : w.offset, :] for x in b), group_size=w.group_size,
                                  bits=w.bits)
                assert a.shape == b.shape
                np.testing.assert_allclose(np.array(a), np.array(b), atol=0.05)
    else:
        _assert_kv_equal(_kv(cache), _cold_kv(target.model, [*prompt, *truth[:2]]))
    # and decoding on from it gives the plain continuation
    nxt, _ = verify_round(target.model, cache, emitted[-1], Draft([]), SamplingParams())
    assert nxt == [truth[3]]


def test_compact_moves_rows_and_drops_the_rest():
    from mlx_lm.models.cache import KVCache

    c = KVCache()
    k = mx.arange(2 * 10 * 3, dtype=mx.float32).reshape(1, 2, 10, 3)
    c.update_and_fetch(k, k + 100)
    compact([c], 4, [0, 2, 5])
    (keys, values), = _kv([c])
    assert c.offset == 7
    np.testing.assert_array_equal(np.array(keys), np.array(k)[:, :, [0, 1, 2, 3, 4, 6, 9]])
    np.testing.assert_array_equal(np.array(values), np.array(k + 100)[:, :, [0, 1, 2, 3, 4, 6, 9]])


# ---- greedy: tree == chain == plain ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["model", "lookup", "combined"])
@pytest.mark.parametrize("k", [2, 5])
def test_greedy_tree_equals_chain_equals_plain(pair, kind, k, rounds):
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": PROMPTS[k % 3] * 2}])
    want = run(Session(target), prompt, max_tokens=80, stop_tokens=set())[0]
    chain = Session(target, speculator=Speculator(make_drafter(kind, draft),
                                                  SpecPolicy(mode="on", fixed_k=k)))
    assert run(chain, prompt, max_tokens=80, stop_tokens=set())[0] == want
    tree = Session(target, speculator=Speculator(make_drafter(kind, draft),
                                                 SpecPolicy(mode="on", fixed_k=k), tree_budget()))
    got, stats, _ = run(tree, prompt, max_tokens=80, stop_tokens=set())
    assert got == want
    assert rounds and stats.accepted <= stats.drafted  # trees were verified
    if kind == "model":  # the random draft's second choices are sometimes the target's
        assert any(branched for _, _, branched in rounds), "no round accepted a branch"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_trees_with_a_restricted_head_and_a_confidence_stop(pair, rounds, temperature):
    """The shipped draft settings (a head over some ids, rounds ended by the draft's
    confidence): greedy equals plain; sampling decodes and leaves the caches exact."""
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": PROMPTS[2]}])
    params = SamplingParams(temperature=temperature)
    dm = DraftModel(draft, min_confidence=0.01, draft_vocab=64)
    assert dm.head is not None and dm.stops_itself
    spec = Session(target, speculator=Speculator(dm, SpecPolicy(mode="on"), tree_budget(24)))
    got = run(spec, prompt, params=params, max_tokens=48, stop_tokens=set())[0]
    if temperature == 0:
        assert got == run(Session(target), prompt, max_tokens=48, stop_tokens=set())[0]
    assert rounds and any(nodes > 1 for nodes, _, _ in rounds)
    assert dm.cache.offset == len(dm.fed)
    _assert_kv_equal(_kv(dm.cache.cache), _cold_kv(draft.model, dm.fed))


def test_tree_passes_over_many_keys_take_the_numpy_attention(pair, rounds, monkeypatch):
    """Where chains' verify passes take the numpy attention (many cached keys), trees' do too
    (a boolean tree mask), and the output still equals plain."""
    from agent.engine import attention

    target, draft = pair
    monkeypatch.setattr(attention, "MIN_SCORES", 64)
    masks = []
    real = attention.prefill_attention
    monkeypatch.setattr(attention, "prefill_attention",
                        lambda *a, **kw: masks.append(kw.get("allowed") is not None) or real(*a, **kw))
    prompt = Session(target).render([{"role": "user", "content": PROMPTS[0] * 3}])
    want = run(Session(target), prompt, max_tokens=48, stop_tokens=set())[0]
    spec = Session(target, speculator=Speculator(make_drafter("model", draft),
                                                 SpecPolicy(mode="on", fixed_k=4), tree_budget()))
    assert run(spec, prompt, max_tokens=48, stop_tokens=set())[0] == want
    assert rounds and any(masks)


def test_greedy_tree_across_turns_with_cancels_equals_cold_plain(pair, rounds):
    """Warm turns (draft and target caches carried over), one turn closed mid-way, one
    cancelled: every turn's output equals a cold plain run, and so do the draft caches."""
    target, draft = pair
    dm = DraftModel(draft)
    spec = Session(target, speculator=Speculator(Combined(dm, PromptLookup(max_n=3, min_n=1),
                                                          confident_n=2),
                                                 SpecPolicy(mode="on", fixed_k=4), tree_budget()))
    history = [{"role": "user", "content": "first " + PROMPTS[0]}]
    for turn in range(4):
        prompt = spec.render(history)
        if turn == 1:  # closed after a few tokens
            gen = spec.generate(prompt, max_tokens=40, stop_tokens=set())
            seen = sum(1 for e in gen if isinstance(e, TextDelta) and e.tokens)
            gen.close()
            assert seen
        if turn == 2:  # a cancel between rounds
            cancel = CancelToken()
            gen = spec.generate(prompt, max_tokens=40, stop_tokens=set(), cancel=cancel)
            for e in gen:
                if isinstance(e, TextDelta) and e.tokens:
                    cancel.cancel()
            assert spec.tcache.offset <= len(spec.tokens)
        got, stats, _ = run(spec, prompt, max_tokens=40, stop_tokens=set())
        want = run(Session(target), prompt, max_tokens=40, stop_tokens=set())[0]
        assert got == want, f"turn {turn}"
        if turn:
            assert stats.cached_tokens > 0
        # the draft cache holds what it says it holds, as a cold prefill of those tokens would
        assert dm.cache.offset == len(dm.fed) > 0
        _assert_kv_equal(_kv(dm.cache.cache), _cold_kv(draft.model, dm.fed))
        history += [{"role": "assistant", "content": target.tokenizer.decode(got)},
                    {"role": "user", "content": f"next {turn} " + PROMPTS[turn % 3]}]
    assert any(branched for _, _, branched in rounds)


def test_draft_cache_after_a_tree_round_equals_a_cold_run(pair):
    """After verifying a draft tree, the draft's cache holds the history and the accepted path
    (contiguous), equal to a cold prefill of those tokens, whichever branch was accepted."""
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": "hello"}])
    truth = run(Session(target), prompt, max_tokens=24, stop_tokens=set())[0]
    dm = DraftModel(draft)
    shape = TreeShape(12, gain=0.002, close=0.05)
    branched = 0
    for i in range(16):
        history = prompt + truth[:i]
        tdraft = dm.propose_tree(history, 4, SamplingParams(), None, shape)
        assert tdraft.tree is not None and tdraft.tree.nodes > 4
        cache = make_prompt_cache(target.model)
        prefill(target.model, history[:-1], cache)
        emitted, path = verify_tree(target.model, cache, tdraft.tree, SamplingParams())
        assert emitted == truth[i : i + len(emitted)]
        dm.keep_path(path)
        branched += not _on_main_line(tdraft.tree, path)
        n = dm.cache.offset
        assert dm.fed == [*history, *emitted[:-1]][:n] and n >= len(history)
        _assert_kv_equal(_kv(dm.cache.cache), _cold_kv(draft.model, dm.fed))
        _assert_kv_equal(_kv(cache), _cold_kv(target.model, [*history, *emitted[:-1]]))
    assert branched


@pytest.mark.parametrize("kind", ["model", "combined"])
def test_constrained_tree_equals_constrained_plain(pair, kind, rounds):
    """The grammar gives a mask per node (one `masks(path)` per leaf)."""
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": "call a tool"}]) + \
        target.tokenizer.encode("<tool_call>", add_special_tokens=False)
    want = run(Session(target), prompt, max_tokens=80, constraint=_tool_constraint(target))[0]
    spec = Session(target, speculator=Speculator(make_drafter(kind, draft),
                                                 SpecPolicy(mode="on", fixed_k=4), tree_budget()))
    got, stats, _ = run(spec, prompt, max_tokens=80, constraint=_tool_constraint(target))
    assert got == want and rounds
    assert '{"name":' in target.tokenizer.decode(got)


def test_tree_with_a_repetition_penalty_equals_plain(pair, rounds):
    target, draft = pair
    params = SamplingParams(repetition_penalty=1.3)
    prompt = Session(target).render([{"role": "user", "content": PROMPTS[0]}])
    want = run(Session(target), prompt, params=params, max_tokens=64, stop_tokens=set())[0]
    spec = Session(target, speculator=Speculator(make_drafter("model", draft),
                                                 SpecPolicy(mode="on", fixed_k=4), tree_budget()))
    got = run(spec, prompt, params=params, max_tokens=64, stop_tokens=set())[0]
    assert got == want and any(b for _, _, b in rounds)


# ---- sampling: the tree sampler follows the target -----------------------------------------


def _next_dist(model, prefix, params):
    lp = log_probs(forward(model, prefix, make_prompt_cache(model))[-1:], params)
    return mx.exp(lp)[0].tolist()


def _two_token_dist(model, prefix, params):
    out = {}
    for a, pa in enumerate(_next_dist(model, prefix, params)):
        if pa:
            for b, pb in enumerate(_next_dist(model, [*prefix, a], params)):
                out[(a, b)] = pa * pb
    return out


class _Tiny:
    """The DraftModel fields `tree_draft._choices` reads, for an 8-token raw model."""
    head, vocab_limit = None, 8


def _draft_sampler(draft, prefix, params):
    """Draws depth-2 draft trees as `tree_draft` does (the same `_choices`): at the root
    x1 ~ q and x2 ~ q without x1; one child ~ q(.|x) under each. The draft's logits are
    computed once."""
    from agent.engine.tree_draft import _choices

    root = forward(draft, prefix, make_prompt_cache(draft))[-1:]
    after = [forward(draft, [*prefix, a], make_prompt_cache(draft))[-1:] for a in range(8)]

    def make() -> TokenTree:
        kids = _choices(_Tiny(), root, [], prefix, params, None, close=0.0)
        tokens, parents, logq = [prefix[-1]], [-1], [None]
        for tok, lq, _ in kids:
            tokens.append(tok), parents.append(0), logq.append(lq)
        for i, (tok, _, _) in enumerate(kids):
            tok2, lq2, _ = _choices(_Tiny(), after[tok], [tok], prefix, params, None, close=2.0)[0]
            tokens.append(tok2), parents.append(1 + i), logq.append(lq2)
        return TokenTree(tokens, parents, logq)

    return make


def _sample_counts(target, prefix, params, n, make_tree, penalized=False) -> dict:
    """The first two tokens of `n` tree rounds (a plain step after a round that stopped at
    the root), all from one prefilled cache cut back after each round."""
    cache = make_prompt_cache(target)
    prefill(target, prefix[:-1], cache)
    base = cache[0].offset
    counts: dict = {}
    history = prefix if penalized else ()
    for _ in range(n):
        emitted, _ = verify_tree(target, cache, make_tree(), params, history=history)
        if len(emitted) < 2:
            emitted += verify_round(target, cache, emitted[-1], Draft([]), params,
                                    history=[*history, *emitted] if penalized else ())[0]
        key = tuple(emitted[:2])
        counts[key] = counts.get(key, 0) + 1
        for c in cache:
            c.trim(c.offset - base)
    return counts


def _lookup_sampler(prefix):
    tree = TokenTree.from_paths(prefix[-1], [[3, 3], [5, 1], [2], [3, 6]], 8)  # distinct, fixed
    return lambda: tree


SAMPLERS = {"lookup": lambda target, draft, prefix, params: _lookup_sampler(prefix),
            "model": lambda target, draft, prefix, params: _draft_sampler(draft, prefix, params)}
PREFIX = [1, 5, 2, 7]


@pytest.mark.parametrize("kind", ["model", "lookup"])
@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0),
                                    SamplingParams(temperature=0.8, top_k=5, top_p=0.9, min_p=0.05)])
def test_tree_sampling_is_exact(tiny_vocab_pair, kind, params):
    """First two emitted tokens of a tree round ~ plain sampling (chi-square, p ≈ 0.001);
    the same counts against the unfiltered distribution at half the temperature are rejected
    (the test has the power to see a wrong distribution)."""
    target, draft = tiny_vocab_pair
    want = _two_token_dist(target, PREFIX, params)
    mx.random.seed(4321)
    n = 600
    counts = _sample_counts(target, PREFIX, params, n, SAMPLERS[kind](target, draft, PREFIX, params))
    stat, df = _chi2(counts, want, n)
    assert df >= 3 and stat < _chi2_critical(df), (stat, df)
    assert all(want.get(key, 0) > 0 for key in counts)  # filtered outcomes never appear
    other = _two_token_dist(target, PREFIX, SamplingParams(temperature=params.temperature / 2))
    stat, df = _chi2(counts, other, n)
    assert stat > _chi2_critical(df), (stat, df)


def test_penalized_tree_sampling_is_exact(tiny_vocab_pair):
    from test_repetition_penalty import _two_token_dist as penalized_dist

    target, _ = tiny_vocab_pair
    params = SamplingParams(temperature=1.0, repetition_penalty=3.0, repetition_window=4)
    want = penalized_dist(target, PREFIX, params)
    mx.random.seed(77)
    n = 600
    tree = TokenTree.from_paths(PREFIX[-1], [[5, 7], [7, 5], [2]], 8)
    counts = _sample_counts(target, PREFIX, params, n, lambda: tree, penalized=True)
    stat, df = _chi2(counts, want, n)
    assert df >= 3 and stat < _chi2_critical(df), (stat, df)


def test_sibling_rejection_follows_the_residual():
    """One node, exact arithmetic: p over 4 tokens, two point-mass children; the first token's
    law is p whatever the children (20k draws of the acceptance rule alone)."""
    p = mx.array([[0.1, 0.4, 0.3, 0.2]])
    tree = TokenTree.from_paths(0, [[1], [2]], 4)
    mx.random.seed(5)
    counts = np.zeros(4)
    n = 3000
    for _ in range(n):
        path, nxt = accept_tree_sampled(mx.log(mx.concatenate([p, p, p])), tree)
        counts[tree.tokens[path[1]] if len(path) > 1 else nxt] += 1
    stat = float((((counts - n * np.array(p[0])) ** 2) / (n * np.array(p[0]))).sum())
    assert stat < _chi2_critical(3), (counts, stat)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["model", "lookup"])
def test_tree_sampling_is_exact_many_draws(tiny_vocab_pair, kind):
    target, draft = tiny_vocab_pair
    params = SamplingParams(temperature=0.7, top_p=0.95)
    want = _two_token_dist(target, PREFIX, params)
    mx.random.seed(999)
    n = 12000
    counts = _sample_counts(target, PREFIX, params, n, SAMPLERS[kind](target, draft, PREFIX, params))
    stat, df = _chi2(counts, want, n)
    assert df >= 3 and stat < _chi2_critical(df), (stat, df)


def test_sampled_tree_rounds_run_and_stay_consistent(pair, rounds):
    """At temperature > 0 a session with trees decodes (draft logq rows carried), and the
    next greedy turn still equals a cold plain run (caches exact after sampled rounds)."""
    target, draft = pair
    spec = Session(target, speculator=Speculator(make_drafter("model", draft),
                                                 SpecPolicy(mode="on", fixed_k=4), tree_budget()))
    prompt = spec.render([{"role": "user", "content": "sample"}])
    toks, stats, _ = run(spec, prompt, max_tokens=40, params=SamplingParams(temperature=1.0),
                         stop_tokens=set())
    assert len(toks) == 40 and rounds
    p2 = prompt + toks + [5, 6]
    assert run(spec, p2, max_tokens=30, stop_tokens=set())[0] == \
        run(Session(target), p2, max_tokens=30, stop_tokens=set())[0]


# ---- the budget ------------------------------------------------------------------------------


def test_budget_follows_the_verify_cost():
    flat = VerifyCost({1: 0.060, 2: 0.072, 4: 0.088, 8: 0.093, 16: 0.115, 32: 0.16})  # FACTS §1
    linear = VerifyCost({1: 0.148, 2: 0.269, 4: 0.520, 8: 0.981, 16: 1.954})
    assert node_budget(linear, 4, 32, 0.1) == 4  # rows cost a step each: the chain
    assert node_budget(flat, 4, 32, 0.1) == 32  # flat to the cap
    assert 6 <= node_budget(flat, 4, 32, 0.04) <= 16  # a branch must pay more: fewer nodes
    cost = VerifyCost({1: 0.1, 2: 0.11, 8: 0.14})
    for _ in range(40):  # measured online: passes of 9 positions turn out to cost 3 steps
        cost.observe(9, 0.3)
    assert node_budget(cost, 4, 32, 0.1) < node_budget(VerifyCost({1: 0.1, 2: 0.11, 8: 0.14}), 4, 32, 0.1)
    assert cost.at(3) <= cost.at(5) <= cost.at(8)


def test_probe_measures_the_model_and_a_chain_is_the_special_case(pair):
    target, draft = pair
    tb = TreeBudget(cap=8)
    cache = make_prompt_cache(target.model)
    shape = tb.shape(target.model, cache, 4)
    assert tb.probed and set(tb.cost.seconds) == {1, 2, 4, 8}
    assert shape is None or shape.nodes > 4
    slow = TreeBudget(cap=8, cost=VerifyCost({1: 1.0, 8: 8.0}))
    assert slow.shape(target.model, cache, 4) is None  # rows cost a step each: chains


# ---- lookup and suffix trees, the config ---------------------------------------------------------


def test_lookup_drafts_every_occurrence_as_branches():
    """The main line is the chain lookup would draft (the latest occurrence); the other
    occurrences' continuations hang beside it, shared prefixes merged."""
    hist = [1, 2, 3, 4, 9, 1, 2, 5, 6, 8, 1, 2, 7, 7, 1, 2]
    chain = PromptLookup(max_n=3, min_n=2).propose(hist, 2, SamplingParams())
    d = PromptLookup(max_n=3, min_n=2).propose_tree(hist, 2, SamplingParams(), None, TreeShape(16))
    assert d.tokens == chain.tokens == [7, 7] and d.source == "lookup"
    t = d.tree
    assert [t.tokens[c] for c in t.children[0]] == [7, 5, 3]
    assert sorted(tuple(t.path_tokens(leaf)) for leaf in t.leaves()) == [(3, 4), (5, 6), (7, 7)]
    small = PromptLookup(max_n=3, min_n=2).propose_tree(hist, 2, SamplingParams(), None, TreeShape(3))
    assert small.tree.nodes == 3  # the budget caps the nodes
    alone = PromptLookup(max_n=3, min_n=2).propose_tree([1, 2, 3, 1, 2], 2, SamplingParams(), None,
                                                         TreeShape(16))
    assert alone.tree is None and alone.tokens == [3, 1]  # one occurrence: a chain


def test_suffix_continuations_most_frequent_first():
    from agent.engine.suffix import SuffixIndex

    idx = SuffixIndex(min_n=2, max_n=3)
    for seq in ([5, 6, 7, 8, 9], [5, 6, 7, 1, 2], [4, 6, 7, 1, 2], [3, 6, 7, 8, 9, 10]):
        idx.add(seq)
    got = idx.continuations([0, 6, 7], 2)
    assert got[0] == [8, 9] or got[0] == [1, 2]
    assert sorted(map(tuple, got)) == [(1, 2), (8, 9)]
    lk = PromptLookup(max_n=3, min_n=2, suffix=idx)
    d = lk.propose_tree([0, 0, 6, 7], 2, SamplingParams(), None, TreeShape(8))
    assert d.source == "suffix" and d.tree is not None
    assert sorted(tuple(d.tree.path_tokens(leaf)) for leaf in d.tree.leaves()) == [(1, 2), (8, 9)]


def test_config_turns_trees_on(pair):
    from agent.engine import SpecSettings, make_speculator

    target, draft = pair
    assert make_speculator(SpecSettings(speculation="on"), target, draft).tree is None
    spec = make_speculator(SpecSettings(speculation="on", tree="auto", tree_nodes=20),
                           target, draft)
    assert spec.tree is not None and spec.tree.cap == 20


def test_a_tree_round_is_fitted_as_its_main_line():
    """The cost fit that picks K sees a tree round as the chain it extends: a main line of 4
    accepted in full is no rejection, however many side branches were verified beside it."""
    spec = Speculator(PromptLookup(), SpecPolicy(mode="on"))
    c = spec.call = speculative._CallStats()
    c.rounds, c.drafted, c.chained, c.accepted, c.by_source = 1, 12, 4, 4, {"draft": [12, 4]}
    spec._note_round(5, 0.5)
    fit = spec.fits["model"]
    assert (fit.accepted, fit.rejected, fit.drafted, fit.sk) == (4, 0, 4, 4)
    c.rounds, c.drafted, c.chained, c.accepted, c.by_source = 2, 24, 8, 6, {"draft": [24, 6]}
    spec._note_round(3, 0.5)  # the next tree: 2 of its main line's 4 accepted
    assert fit.rejected == pytest.approx(1.0) and fit.accepted == pytest.approx(0.85 * 4 + 2)


def test_tree_arms_try_both_then_draft_the_faster_and_retry_the_slower():
    arms = speculative.TreeArms()
    picked = []
    for _ in range(4):  # each arm twice, trees first; trees make 2 tokens a second, chains 4
        arm = arms.pick()
        picked.append(arm)
        arms.add(arm, 4 if arm == "chain" else 2, 1.0)
    assert picked == ["tree", "chain", "tree", "chain"]
    run = []
    for _ in range(arms.RETRY + 2):
        arm = arms.pick()
        run.append(arm)
        arms.add(arm, 4 if arm == "chain" else 2, 1.0)
    assert run == ["chain"] * arms.RETRY + ["tree", "chain"]  # the slower, retried once
    # the text changes: trees now make 8 tokens a second; the next retry finds it out
    run = []
    for _ in range(arms.RETRY + 6):
        arm = arms.pick()
        run.append(arm)
        arms.add(arm, 8 if arm == "tree" else 4, 1.0)
    assert run.count("chain") <= arms.RETRY and arms.pick() == "tree"
    assert arms.speed("tree") > arms.speed("chain")
    # the lead changes as the faster arm slows down: the count of its rounds starts again
    for _ in range(20):
        arms.add("tree", 1, 1.0)
        if arms.pick() == "chain":
            break
    assert arms.pick() == "chain" and arms.run == 0


def test_measured_trees_stay_exact_and_chains_take_over_where_trees_are_slower(pair, rounds):
    """With `measured` trees a round that could branch drafts a tree or a chain by their
    recent speeds: greedy output still equals plain's, and where every tree round costs more
    time (here a slowed verify) than it buys, rounds after the first tries are chains but
    for a retry every `RETRY` rounds."""
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": PROMPTS[1] * 2}])
    want = run(Session(target), prompt, max_tokens=80, stop_tokens=set())[0]
    budget = TreeBudget(cap=12, gain=0.002, close=0.05, cost=VerifyCost(FLAT))
    spec = Speculator(make_drafter("model", draft), SpecPolicy(mode="on", fixed_k=4), budget)
    now = [0.0]
    spec.clock = lambda: now[0]
    real = spec._verify

    def timed_verify(session, pending, d, *a):  # the fake clock: a tree round costs 10 s
        now[0] += 10.0 if d.tree is not None else 1.0
        return real(session, pending, d, *a)

    spec._verify = timed_verify
    got = run(Session(target, speculator=spec), prompt, max_tokens=80, stop_tokens=set())[0]
    assert got == want
    arms = spec.tree_arms["model"]
    trees, chains = arms.sums["tree"][2], arms.sums["chain"][2]
    assert chains > trees >= arms.TRIES
    assert trees <= arms.TRIES + chains // arms.RETRY
    assert len(rounds) >= trees  # every tree-arm round the drafter branched was verified as one


def test_the_round_that_probes_the_verify_cost_counts_for_no_arm(pair):
    target, draft = pair
    spec = Speculator(make_drafter("model", draft), SpecPolicy(mode="on"), TreeBudget(cap=8))
    session = Session(target)
    spec._tree_shape(session, 2)  # probes the target's verify cost: this round is not timed
    assert spec.tree.probed and spec._arm == ("", "")
    spec._tree_shape(session, 2)
    assert spec._arm in (("model", "tree"), ("model", "chain")) or spec.tree.shape(
        target.model, session.tcache.cache, 2) is None


def test_arms_count_a_round_only_for_the_kind_that_drafted_it():
    spec = Speculator(PromptLookup(), SpecPolicy(mode="on"))
    spec.call = speculative._CallStats()
    spec._arm = ("lookup", "tree")
    spec._note_round(1, 0.1)  # a miss verified alone: a plain step, no arm's round
    assert "lookup" not in spec.tree_arms and spec._arm == ("", "")
    c = spec.call
    c.rounds, c.drafted, c.chained, c.accepted, c.by_source = 1, 6, 3, 2, {"lookup": [6, 2]}
    spec._arm = ("lookup", "tree")
    spec._note_round(3, 0.1)
    assert spec.tree_arms["lookup"].sums["tree"] == [3.0, 0.1, 1]
    c.rounds, c.drafted, c.chained, c.accepted = 2, 12, 6, 4
    c.by_source = {"lookup": [6, 2], "draft": [6, 2]}
    spec._arm = ("lookup", "chain")  # picked by lookup's arms, drafted by the model
    spec._note_round(3, 0.1)
    assert spec.tree_arms["lookup"].sums["chain"][2] == 0 and "model" not in spec.tree_arms
    assert spec._last_kind == "model"


def test_a_sampled_nodes_estimate_is_its_untempered_probability():
    """At a temperature the tree scores each drawn node by the draft's probability of that
    token before temperature and filters, as a chain round's stop does; greedy, the top two."""
    from agent.engine.tree_draft import _choices

    logits = mx.log(mx.array([[0.6, 0.3, 0.05, 0.05, 0, 0, 0, 0]]) + 1e-30)
    raw = [0.6, 0.3, 0.05, 0.05]
    greedy = _choices(_Tiny(), logits, [], [1], SamplingParams(), None, close=0.4)
    assert [t for t, _, _ in greedy] == [0, 1]
    assert [p for _, _, p in greedy] == pytest.approx([0.6, 0.3], rel=1e-4)
    mx.random.seed(7)
    sharp = SamplingParams(temperature=0.5, top_p=0.95)
    for _ in range(20):
        kids = _choices(_Tiny(), logits, [], [1], sharp, None, close=0.4)
        assert len(kids) == 2 and kids[0][0] != kids[1][0]
        for tok, lq, p in kids:
            assert p == pytest.approx(raw[tok], rel=1e-4)  # at T=0.5 the 0.6 token is ~0.8
    # 0.3 is under 0.6 of 0.6: not close, one child
    one = _choices(_Tiny(), logits, [], [1], SamplingParams(temperature=0.3), None, close=0.6)
    assert len(one) == 1
    # a nucleus of one token has no second child to draw
    alone = _choices(_Tiny(), logits, [], [1], SamplingParams(temperature=1.0, top_p=0.5), None, close=0.1)
    assert [t for t, _, _ in alone] == [0] and alone[0][2] == pytest.approx(0.6, rel=1e-4)

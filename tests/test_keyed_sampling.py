"""Keyed draws (agent/engine/sampling.py): at temperature, each position's token is drawn with
noise keyed by (seed, position). Lookup speculation (chains, trees, the suffix index) and the
draft model (which draws with the target's noise) then write what plain decoding writes with the
same seed, and their tokens still follow the target's distribution (chi-square)."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache
from test_speculative import _chi2, _chi2_critical, _two_token_dist, tiny_vocab_pair  # noqa: F401

from agent.engine.drafters import Combined, Draft, DraftModel, PromptLookup
from agent.engine.loading import LoadedModel
from agent.engine.sampling import SamplingParams, draw, keyed_keys, keyed_noise
from agent.engine.session import Session
from agent.engine.speculative import SpecPolicy, Speculator, verify_round
from agent.engine.step import plain_decode, prefill
from agent.engine.suffix import SuffixIndex
from agent.engine.tree import TokenTree, TreeBudget, TreeShape, VerifyCost, verify_tree

PREFIX = [1, 5, 2, 7]
FILTERED = SamplingParams(temperature=0.8, top_k=5, top_p=0.9)


def test_keyed_keys_depend_on_seed_and_position_alone():
    a = keyed_keys(7, [10, 11, 12])
    assert a == keyed_keys(7, [12, 11, 10])[::-1] and a[1:] == keyed_keys(7, [11, 12])
    assert a != keyed_keys(8, [10, 11, 12])
    assert len(set(keyed_keys(3, range(20000)))) == 20000


def test_a_draw_is_a_function_of_its_row_and_key_and_never_a_zero_probability_token():
    lp = mx.log(mx.array([[0.5, 0.5, 0.0, 0.0]] * 400))
    keys = keyed_keys(1, range(400))
    got = draw(lp, keys).tolist()
    assert got == draw(lp, keys).tolist() and set(got) == {0, 1}
    assert 150 < got.count(0) < 250
    assert draw(lp[:1], keys[5:6]).tolist() == [got[5]]  # alone or in a batch of rows


def _plain_two(target, params) -> tuple[int, int]:
    cache = make_prompt_cache(target)
    prefill(target, PREFIX[:-1], cache)
    gen = plain_decode(target, cache, PREFIX[-1], params, history=list(PREFIX), limit=2)
    return tuple(gen)


def _keyed_counts(target, params, n, round_) -> tuple[dict, int]:
    """The first two tokens of a verify round from PREFIX for seeds 0..n-1 (a plain step
    after a round that stopped at its first position), each asserted equal to plain
    decoding's for that seed; and the sum of `round_`'s second values (drafts accepted, or
    rounds whose path left the root)."""
    counts: dict = {}
    total = 0
    for seed in range(n):
        p = replace(params, noise_seed=seed)
        cache = make_prompt_cache(target)
        prefill(target, PREFIX[:-1], cache)
        emitted, got = round_(cache, p)
        total += got
        if len(emitted) < 2:  # rejected at 1: a plain step draws the second token
            emitted += verify_round(target, cache, emitted[-1], Draft([]), p,
                                    history=[*PREFIX, *emitted])[0]
        key = tuple(emitted[:2])
        assert key == _plain_two(target, p), seed
        counts[key] = counts.get(key, 0) + 1
    return counts, total


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), FILTERED])
def test_a_lookup_chain_draws_what_plain_decoding_draws_and_follows_the_distribution(
        tiny_vocab_pair, params):
    """Over 1500 seeds: a fixed lookup draft verified with keyed draws emits plain decoding's
    first two tokens for that seed, every time, and their law is plain sampling's."""
    target, _ = tiny_vocab_pair
    want = _two_token_dist(target, PREFIX, params)
    n = 1500
    counts, accepted = _keyed_counts(target, params, n, lambda cache, p: verify_round(
        target, cache, PREFIX[-1], Draft([3, 3]), p, history=list(PREFIX)))
    assert accepted > 50  # the draft was accepted often enough to matter
    stat, df = _chi2(counts, want, n)
    assert df >= 3 and stat < _chi2_critical(df), (stat, df)
    assert all(want.get(key, 0) > 0 for key in counts)


def test_a_lookup_tree_draws_what_plain_decoding_draws_and_follows_the_distribution(
        tiny_vocab_pair):
    target, _ = tiny_vocab_pair
    params = SamplingParams(temperature=0.8, top_k=5, top_p=0.9, min_p=0.05)
    want = _two_token_dist(target, PREFIX, params)
    tree = TokenTree.from_paths(PREFIX[-1], [[3, 3], [5, 1], [2], [3, 6]], 8)
    n = 1000

    def round_(cache, p):
        emitted, path = verify_tree(target, cache, tree, p, history=list(PREFIX))
        return emitted, len(path) > 1

    counts, deep = _keyed_counts(target, params, n, round_)
    assert deep > 50  # paths went down the tree
    stat, df = _chi2(counts, want, n)
    assert df >= 3 and stat < _chi2_critical(df), (stat, df)


def test_without_a_seed_the_draws_are_mx_randoms(tiny_vocab_pair):
    """The check above can fail: unkeyed, the same verify rounds emit other tokens than the
    keyed plain decode of a seed (the counts of agreement fall well below all)."""
    target, _ = tiny_vocab_pair
    agree = 0
    mx.random.seed(5)
    for seed in range(200):
        cache = make_prompt_cache(target)
        prefill(target, PREFIX[:-1], cache)
        emitted, _ = verify_round(target, cache, PREFIX[-1], Draft([3, 3]), SamplingParams(1.0),
                                  history=list(PREFIX))
        agree += emitted[0] == _plain_two(target, SamplingParams(1.0, noise_seed=seed))[0]
    assert agree < 150


def _generate(session: Session, prompt, seed: int, **kw):
    mx.random.seed(seed)
    done = session.complete(prompt, max_tokens=40, stop_tokens=set(),
                            params=SamplingParams(temperature=0.4), **kw)
    return done.tokens, done.stats


@pytest.mark.parametrize("setup", ["chain", "suffix", "tree"])
def test_sampled_turns_with_lookup_equal_plain_sampled_turns(llama, setup):
    """A seeded sampled turn writes the same tokens with lookup speculation (a chain, with the
    suffix index, as trees) as plain decoding, over two turns of one session."""
    index = SuffixIndex()
    prompt = Session(llama).render([{"role": "user", "content": "def add(a, b):"}])
    plain = Session(llama)
    want, _ = _generate(plain, prompt, 11)
    index.add(want)
    # min_n=1: single-token matches draft too, so the random model's output gets drafts
    lookup = PromptLookup(min_n=1, suffix=index if setup == "suffix" else None)
    tree = TreeBudget(cost=VerifyCost({1: 1.0, 2: 1.0, 64: 1.05}), measured=False) \
        if setup == "tree" else None
    spec = Session(llama, speculator=Speculator(lookup, SpecPolicy(mode="on"), tree=tree))
    got, stats = _generate(spec, prompt, 11)
    assert got == want
    by_source = {s: a for s, _, a in stats.by_source}
    assert by_source.get("suffix" if setup == "suffix" else "lookup", 0) > 0  # drafts were taken
    prompt2 = prompt + want + Session(llama).render([{"role": "user", "content": "again"}])[-8:]
    want2, _ = _generate(plain, prompt2, 12)
    got2, _ = _generate(spec, prompt2, 12)
    assert got2 == want2
    # a second call with the same global seed draws the same text; another seed, other text
    assert _generate(Session(llama), prompt, 11)[0] == want
    assert _generate(Session(llama), prompt, 13)[0] != want


def test_the_keyed_noise_is_the_draws():
    lp = mx.log(mx.softmax(mx.random.normal((3, 50)) * 2, axis=-1))
    keys = keyed_keys(4, [30, 31, 32])
    want = draw(lp, keys).tolist()
    assert [int(mx.argmax(lp[i] + keyed_noise(4, 30 + i, 50)).item()) for i in range(3)] == want


def _tiny_draft(model) -> LoadedModel:
    return LoadedModel(model, None, "tiny", "mlx", "float32", "cpu")


def test_the_draft_noise_is_made_at_the_targets_width(tiny_vocab_pair):
    """A target wider than its draft (padded embeddings) draws with noise made at its own
    width: the draft's noise is that noise's first columns, so where the two distributions are
    equal the draft's draw is the target's, position after position."""
    _, draft = tiny_vocab_pair  # a vocabulary of 8
    dm = DraftModel(_tiny_draft(draft), target_width=12)
    p = SamplingParams(temperature=1.0, noise_seed=9)
    agree = 0
    for at in range(40):
        lp = mx.log(mx.softmax(mx.random.normal((8,)), axis=-1))
        wide = mx.concatenate([lp, mx.full((4,), -mx.inf)])
        mine = int(mx.argmax(lp + dm.noise(p, at, 8)[0]).item())
        agree += mine == int(draw(wide[None], keyed_keys(9, [at]))[0].item())
    assert agree == 40


@pytest.mark.parametrize("tree", [False, True])
def test_a_draft_models_keyed_drafts_draw_what_plain_decoding_draws(tiny_vocab_pair, tree):
    """Over 1000 seeds: the draft model's keyed proposal (a chain, or a tree with branches),
    checked by the target's keyed draws, emits plain decoding's first two tokens for that seed,
    every time, and their law is plain sampling's (chi-square)."""
    target, draft = tiny_vocab_pair
    params = FILTERED
    want = _two_token_dist(target, PREFIX, params)
    shape = TreeShape(nodes=6, close=0.0, gain=0.0)
    n = 1000

    def round_(cache, p):
        dm = DraftModel(_tiny_draft(draft))
        if tree:
            d = dm.propose_tree(list(PREFIX), 2, p, None, shape)
            assert d.keyed and d.tree is not None and d.tree.keyed and len(d.tree) > 3
            emitted, path = verify_tree(target, cache, d.tree, p, history=list(PREFIX))
            return emitted, len(path) - 1
        d = dm.propose(list(PREFIX), 2, p)
        assert d.keyed and d.logq is not None
        return verify_round(target, cache, PREFIX[-1], d, p, history=list(PREFIX))

    counts, accepted = _keyed_counts(target, params, n, round_)
    assert accepted > 300  # the drafts landed often
    stat, df = _chi2(counts, want, n)
    assert df >= 3 and stat < _chi2_critical(df), (stat, df)


def test_a_draft_equal_to_the_target_is_always_accepted(tiny_vocab_pair):
    """The draft's draws share the target's keys: a draft model that is the target proposes
    exactly what the target draws, at every position, while two independent draws from the
    same distribution would agree far less often (sum of p squared)."""
    target, _ = tiny_vocab_pair
    params = SamplingParams(temperature=1.0)
    drafted = accepted = 0
    for seed in range(40):
        p = replace(params, noise_seed=seed)
        cache = make_prompt_cache(target)
        prefill(target, PREFIX[:-1], cache)
        d = DraftModel(_tiny_draft(target)).propose(list(PREFIX), 4, p)
        _, n = verify_round(target, cache, PREFIX[-1], d, p, history=list(PREFIX))
        drafted += len(d.tokens)
        accepted += n
    assert drafted == 160 and accepted == drafted


@pytest.mark.parametrize("setup", ["chain", "tree", "head", "combined"])
def test_sampled_turns_with_a_draft_model_equal_plain_sampled_turns(pair, setup):
    """A seeded sampled turn (temperature 0.7, top-p 0.9) writes the same tokens with the draft
    model speculating (a chain, trees, a restricted draft head, with lookup) as plain decoding,
    over two turns of one session."""
    target, draft = pair
    params = SamplingParams(temperature=0.7, top_p=0.9)

    def gen(session, prompt, seed):
        mx.random.seed(seed)
        done = session.complete(prompt, max_tokens=48, stop_tokens=set(), params=params)
        return done.tokens, done.stats

    prompt = Session(target).render([{"role": "user", "content": "def add(a, b):"}])
    model = DraftModel(draft, draft_vocab=64 if setup == "head" else 0)
    drafter = Combined(model, PromptLookup(max_n=3, min_n=1), confident_n=2) \
        if setup == "combined" else model
    tree = TreeBudget(cost=VerifyCost({1: 1.0, 2: 1.0, 64: 1.05}), measured=False) \
        if setup == "tree" else None
    spec = Session(target, speculator=Speculator(drafter, SpecPolicy(mode="on", fixed_k=4),
                                                 tree=tree))
    plain = Session(target)
    want, _ = gen(plain, prompt, 21)
    got, stats = gen(spec, prompt, 21)
    assert got == want
    assert stats.speculative and stats.accepted > 0
    prompt2 = prompt + want + Session(target).render([{"role": "user", "content": "more"}])[-8:]
    want2, _ = gen(plain, prompt2, 22)
    got2, _ = gen(spec, prompt2, 22)
    assert got2 == want2

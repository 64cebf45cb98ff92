"""Speculative engine: greedy identity, exact sampling, cache rewinds, pairing checks."""

from __future__ import annotations

import math

import mlx.core as mx
import pytest

from agent.engine.drafters import Combined, Draft, DraftModel, PromptLookup
from agent.engine.errors import PairingError
from agent.engine.loading import LoadedModel
from agent.engine.sampling import SamplingParams
from agent.engine.session import Session
from agent.engine.speculative import SpecPolicy, Speculator, verify_round
from agent.events import SpeculationChanged, TextDelta


def run(session: Session, prompt, **kw):
    done = session.complete(prompt, **kw)
    return done.tokens, done.stats, done.events


def make_drafter(kind: str, draft: LoadedModel):
    if kind == "model":
        return DraftModel(draft)
    # min_n=1: even single-token matches propose, so lookup drafts often and is often wrong
    if kind == "lookup":
        return PromptLookup(max_n=3, min_n=1)
    return Combined(DraftModel(draft), PromptLookup(max_n=3, min_n=1), confident_n=2)


PROMPTS = ["def add(a, b):\n    return a + b\n", "import os\nprint(os.getcwd())",
           "class A:\n    pass\n"]


@pytest.mark.parametrize("k", range(1, 9))
@pytest.mark.parametrize("kind", ["model", "lookup", "combined"])
def test_greedy_identical_to_plain(pair, k, kind):
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": PROMPTS[k % 3]}])
    want, _, _ = run(Session(target), prompt, max_tokens=96, stop_tokens=set())
    spec = Session(target, speculator=Speculator(make_drafter(kind, draft),
                                                 SpecPolicy(mode="on", fixed_k=k)))
    got, stats, _ = run(spec, prompt, max_tokens=96, stop_tokens=set())
    assert got == want
    assert stats.speculative and stats.rounds > 1
    assert stats.generated_tokens == 96
    assert stats.accepted <= stats.drafted


def test_greedy_identical_across_turns_adaptive(pair):
    """Multi-turn with adaptive K and auto-off: each warm turn equals a cold plain run."""
    target, draft = pair
    spec = Session(target, speculator=Speculator(make_drafter("combined", draft)))
    history = [{"role": "user", "content": "first"}]
    for turn in range(3):
        prompt = spec.render(history)
        got, stats, _ = run(spec, prompt, max_tokens=40, stop_tokens=set())
        want, _, _ = run(Session(target), prompt, max_tokens=40, stop_tokens=set())
        assert got == want, f"turn {turn}"
        if turn:
            assert stats.cached_tokens > 0
        history += [{"role": "assistant", "content": target.tokenizer.decode(got)},
                    {"role": "user", "content": f"next {turn}"}]


def _early_exit_draft(lm: LoadedModel, layers: int) -> LoadedModel:
    """A draft that shares the target's weights but runs only its first `layers` layers."""
    from mlx_lm.models.llama import Model

    m = Model(lm.model.args)
    m.update(lm.model.parameters())
    m.model.layers = m.model.layers[:layers]
    m.args = lm.model.args
    return LoadedModel(m, lm.tokenizer, lm.name + "-early", lm.source, lm.dtype, lm.device)


@pytest.mark.embedded
@pytest.mark.parametrize("kind", ["model", "lookup", "combined"])
def test_greedy_identical_embedded(embedded, kind):
    draft = _early_exit_draft(embedded, 10)  # a third of the target's layers: a cheap, fallible draft
    prompt = Session(embedded).render(
        [{"role": "user", "content": "Rewrite this with a docstring:\ndef area(r):\n    return 3.14159 * r * r\n"}])
    want, _, _ = run(Session(embedded), prompt, max_tokens=80)
    spec = Session(embedded, speculator=Speculator(make_drafter(kind, draft),
                                                   SpecPolicy(mode="on", fixed_k=4)))
    got, stats, _ = run(spec, prompt, max_tokens=80)
    assert got == want and stats.rounds > 0


def _greedy_continuation(lm: LoadedModel, prompt: list[int], n: int) -> list[int]:
    toks, _, _ = run(Session(lm), prompt, max_tokens=n, stop_tokens=set())
    return toks


@pytest.mark.parametrize("accept", range(0, 5))
def test_cache_offsets_for_every_rejection_pattern(pair, accept):
    from mlx_lm.models.cache import make_prompt_cache

    target, _ = pair
    prompt = Session(target).render([{"role": "user", "content": "offsets"}])
    truth = _greedy_continuation(target, prompt, 6)
    cache = make_prompt_cache(target.model)
    from agent.engine.step import prefill

    prefill(target.model, prompt[:-1], cache)
    before = cache[0].offset
    vocab = target.vocab_size
    draft = truth[:4]
    if accept < 4:
        draft[accept] = (draft[accept] + 1) % vocab  # the first wrong token
    emitted, n = verify_round(target.model, cache, prompt[-1], Draft(draft),
                              SamplingParams())
    assert n == accept
    assert emitted == truth[: accept + 1]
    assert cache[0].offset == before + 1 + accept
    # Continuing from the rewound cache gives the plain continuation.
    emitted2, _ = verify_round(target.model, cache, emitted[-1], Draft([]), SamplingParams())
    assert emitted2 == [truth[accept + 1]]


def test_mismatched_tokenizer_refused(tmp_path, pair):
    from agent.engine.loading import load_model
    from agent.bench.synthetic import random_model_folder, train_tokenizer
    from agent.engine import SpecSettings, make_speculator

    other_tok = tmp_path / "tok"
    train_tokenizer(other_tok, vocab_size=400)
    other = load_model(str(random_model_folder(tmp_path / "m", other_tok)), device="cpu")
    target, _ = pair
    with pytest.raises(PairingError, match="different tokenizer: 400 tokens vs the target's 512"):
        make_speculator(SpecSettings(), target, other)


def test_pairing_warns_on_memory_headroom(pair):
    from agent.engine.pairing import pairing_warnings

    target, draft = pair
    assert not [w for w in pairing_warnings(target, draft, 4096, 0.0) if "headroom" in w]
    warns = pairing_warnings(target, draft, 4096, headroom_gb=1e6)
    assert any("headroom" in w for w in warns)


def test_auto_mode_switches_off_when_slower(pair):
    """A lookup drafter on text it cannot predict: the measured speedup is < 1 → off."""
    target, _ = pair
    spec = Speculator(PromptLookup(min_n=1, max_n=1), SpecPolicy(mode="auto", probe_rounds=2,
                                                                 plain_probe=2))
    spec.spec_tps.add(1.0)  # pretend speculation measured slow so far
    spec.plain_tps.add(1e6)
    s = Session(target, speculator=spec)
    prompt = s.render([{"role": "user", "content": "x"}])
    want, _, _ = run(Session(target), prompt, max_tokens=60, stop_tokens=set())
    got, _, events = run(s, prompt, max_tokens=60, stop_tokens=set())
    assert got == want
    changes = [e for e in events if isinstance(e, SpeculationChanged)]
    assert changes and changes[0].enabled is False and "speedup" in changes[0].reason


def test_lookup_proposes_from_extra_text_and_history():
    lk = PromptLookup(max_n=3, min_n=2, extra=[9, 8, 7, 6, 5])
    n, cont = lk.match([1, 2, 8, 7], 3)
    assert (n, cont) == (2, [6, 5])
    n, cont = lk.match([1, 2, 3, 4, 1, 2, 3], 4)
    assert n == 3 and cont == [4, 1, 2, 3]
    n, cont = lk.match([5, 5, 5, 5], 4)  # periodic continuation past the end
    assert cont == [5, 5, 5, 5]
    assert lk.match([1, 2, 3, 4, 1, 2, 3, 42], 2) == (0, [])


# ---- exact sampling ----------------------------------------------------------------------


def _chi2_critical(df: int, z: float = 3.09) -> float:
    """Upper critical value of chi-square (p ≈ 0.001) by Wilson–Hilferty."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _chi2(counts: dict, probs: dict, n: int) -> tuple[float, int]:
    stat, df = 0.0, -1
    for key, p in probs.items():
        if p * n < 5:
            continue
        stat += (counts.get(key, 0) - n * p) ** 2 / (n * p)
        df += 1
    return stat, df


@pytest.fixture(scope="module")
def tiny_vocab_pair():
    """Random llama target/draft with an 8-token vocabulary (no tokenizer needed)."""
    from mlx_lm.models.llama import Model, ModelArgs

    def make(layers, seed):
        mx.random.seed(seed)
        args = ModelArgs(model_type="llama", hidden_size=16, num_hidden_layers=layers,
                         intermediate_size=32, num_attention_heads=2, num_key_value_heads=1,
                         rms_norm_eps=1e-5, vocab_size=8, rope_theta=10000.0)
        m = Model(args)
        mx.eval(m.parameters())
        return m

    return make(2, 10), make(1, 11)


def _two_token_dist(model, prefix, params):
    """Exact plain-sampling distribution of the next two tokens."""
    from mlx_lm.models.cache import make_prompt_cache

    from agent.engine.sampling import log_probs
    from agent.engine.step import forward

    out = {}
    cache = make_prompt_cache(model)
    p1 = mx.exp(log_probs(forward(model, prefix, cache)[-1:], params))[0].tolist()
    for a, pa in enumerate(p1):
        if pa == 0:
            continue
        c = make_prompt_cache(model)
        p2 = mx.exp(log_probs(forward(model, [*prefix, a], c)[-1:], params))[0].tolist()
        for b, pb in enumerate(p2):
            out[(a, b)] = pa * pb
    return out


@pytest.mark.parametrize("drafter", ["model", "lookup"])
@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0),
                                    SamplingParams(temperature=0.8, top_k=5, top_p=0.9)])
def test_sampling_is_exact(tiny_vocab_pair, drafter, params):
    """First two emitted tokens of a speculative round ~ plain sampling (chi-square)."""
    from mlx_lm.models.cache import make_prompt_cache

    from agent.engine.sampling import log_probs
    from agent.engine.step import forward, prefill

    target, draft_model = tiny_vocab_pair
    prefix = [1, 5, 2, 7]
    want = _two_token_dist(target, prefix, params)
    mx.random.seed(1234)
    dcache_base = make_prompt_cache(draft_model)
    q1 = log_probs(forward(draft_model, prefix, dcache_base)[-1:], params)
    counts: dict = {}
    n = 3000
    for _ in range(n):
        cache = make_prompt_cache(target)
        prefill(target, prefix[:-1], cache)
        if drafter == "model":  # draw d1 ~ q1, then d2 ~ q2(.|d1)
            d1 = int(mx.random.categorical(q1).item())
            dc = make_prompt_cache(draft_model)
            q2 = log_probs(forward(draft_model, [*prefix, d1], dc)[-1:], params)
            d2 = int(mx.random.categorical(q2).item())
            d = Draft([d1, d2], mx.concatenate([q1, q2]))
        else:  # a fixed deterministic proposal, as from n-gram lookup
            d = Draft([3, 3])
        emitted, _ = verify_round(target, cache, prefix[-1], d, params)
        if len(emitted) < 2:  # rejected at 1: draw the second token by a plain step
            emitted += verify_round(target, cache, emitted[-1], Draft([]), params)[0]
        key = tuple(emitted[:2])
        counts[key] = counts.get(key, 0) + 1
    stat, df = _chi2(counts, want, n)
    assert df >= 3
    assert stat < _chi2_critical(df), (stat, df)
    # and outcomes the filters exclude never appear
    assert all(want.get(key, 0) > 0 for key in counts)


def test_sampling_is_exact_with_rounds_the_drafts_confidence_ends(tiny_vocab_pair):
    """The draft model's own rounds (their length set by its confidence in the tokens it drew)
    and the target's verify pass: the first two emitted tokens ~ plain sampling (chi-square)."""
    from mlx_lm.models.cache import make_prompt_cache

    from agent.engine.step import prefill

    target, draft_model = tiny_vocab_pair
    params = SamplingParams(temperature=0.8, top_p=0.9)
    prefix = [1, 5, 2, 7]
    want = _two_token_dist(target, prefix, params)
    mx.random.seed(4321)
    dm = DraftModel(LoadedModel(draft_model, None, "tiny", "mlx", "float32", "cpu"),
                    min_confidence=0.3)
    counts: dict = {}
    lengths: set = set()
    n = 3000
    for _ in range(n):
        cache = make_prompt_cache(target)
        prefill(target, prefix[:-1], cache)
        d = dm.propose(prefix, 4, params)
        lengths.add(len(d.tokens))
        emitted, _ = verify_round(target, cache, prefix[-1], d, params)
        if len(emitted) < 2:  # rejected at 1, or a round of one draft: a plain step
            emitted += verify_round(target, cache, emitted[-1], Draft([]), params)[0]
        key = tuple(emitted[:2])
        counts[key] = counts.get(key, 0) + 1
    assert len(lengths) > 1  # the stop fell at different depths
    stat, df = _chi2(counts, want, n)
    assert df >= 3
    assert stat < _chi2_critical(df), (stat, df)
    assert all(want.get(key, 0) > 0 for key in counts)


def test_from_draft_flags_and_interrupt_consistency(pair):
    """from_draft marks exactly the accepted drafts; closing mid-generation leaves target and
    draft caches consistent, so the next turn equals a cold run."""
    target, draft = pair
    spec = Session(target, speculator=Speculator(DraftModel(draft), SpecPolicy(mode="on", fixed_k=4)))
    prompt = spec.render([{"role": "user", "content": "flags"}])
    _, stats, events = run(spec, prompt, max_tokens=48, stop_tokens=set())
    flags = [f for e in events if isinstance(e, TextDelta) for f in e.from_draft]
    # The last round may be cut by max_tokens: accepted drafts after the cut leave the counts.
    assert sum(flags) == stats.accepted
    assert len(flags) == stats.generated_tokens and sum(flags) > 0
    gen = spec.generate(prompt, max_tokens=48, stop_tokens=set())
    seen = 0
    for e in gen:
        if isinstance(e, TextDelta):
            seen += 1
            if seen == 3:
                break
    gen.close()
    assert spec.tcache.offset <= len(spec.tokens)
    assert spec.speculator.drafter.cache.offset <= spec.tcache.offset
    p2 = prompt + [5, 6, 7]
    warm, _, _ = run(spec, p2, max_tokens=30, stop_tokens=set())
    cold, _, _ = run(Session(target), p2, max_tokens=30, stop_tokens=set())
    assert warm == cold


def test_draft_stops_early_when_unsure(pair):
    """A confidence floor the random draft cannot reach: one token per round, output unchanged."""
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": "confidence"}])
    want, _, _ = run(Session(target), prompt, max_tokens=30, stop_tokens=set())
    spec = Session(target, speculator=Speculator(DraftModel(draft, min_confidence=0.9999),
                                                 SpecPolicy(mode="on", fixed_k=6)))
    got, stats, _ = run(spec, prompt, max_tokens=30, stop_tokens=set())
    assert got == want
    assert stats.drafted == stats.rounds  # the first token of a round is always drafted


def _draft_top_probs(draft: LoadedModel, history: list[int], n: int,
                     fed: list[int] | None = None) -> tuple[list[int], list[float]]:
    """The draft's own greedy continuation of `history` (or the `fed` tokens, when given),
    step by step on a fresh cache, with the draft's probability of each token at its step
    (greedy: the step's top probability), before any temperature."""
    from mlx_lm.models.cache import make_prompt_cache

    from agent.engine.step import forward, prefill

    cache = make_prompt_cache(draft.model)
    prefill(draft.model, history[:-1], cache)
    toks, probs, last = [], [], history[-1]
    for i in range(n):
        lp = forward(draft.model, [last], cache)[-1, : draft.vocab_size]
        lp = lp - mx.logsumexp(lp)
        last = int(mx.argmax(lp).item()) if fed is None else fed[i]
        toks.append(last)
        probs.append(math.exp(lp[last].item()))
    return toks, probs


def test_draft_round_ends_where_its_confidence_product_falls_below_the_floor(pair):
    """A round drafts while the product of the draft's top probabilities stays at or above the
    floor, proposes the step that falls below it, and computes no step after that."""
    _, draft = pair
    history = Session(draft).render([{"role": "user", "content": "floor"}])
    toks, probs = _draft_top_probs(draft, history, 12)
    sure = [math.prod(probs[: i + 1]) for i in range(12)]
    for stop_at in (1, 3):  # a floor between the products after step stop_at and the next
        assert sure[stop_at] < sure[stop_at - 1]
        floor = math.sqrt(sure[stop_at] * sure[stop_at - 1])
        dm = DraftModel(draft, min_confidence=floor)
        assert dm.stops_itself
        got = dm.propose(history, 12, SamplingParams())
        assert got.tokens == toks[: stop_at + 1]
        assert len(dm.fed) == len(history) + stop_at  # no draft step past the stop was fed
    full = DraftModel(draft, min_confidence=0.0).propose(history, 12, SamplingParams())
    assert full.tokens == toks  # without a floor: exactly K


def test_a_sampled_round_ends_by_the_untempered_probability_of_each_drawn_token(pair):
    """At a temperature the draft draws from its sharpened distribution, where a token it is
    unsure of reads near 1; the round's confidence is the product of the drawn tokens'
    probabilities before temperature, so the round ends where the draft is unsure."""
    _, draft = pair
    history = Session(draft).render([{"role": "user", "content": "floor"}])
    params = SamplingParams(temperature=0.1)
    mx.random.seed(7)
    free = DraftModel(draft, min_confidence=0.0).propose(history, 12, params)
    assert len(free.tokens) == 12
    _, raw = _draft_top_probs(draft, history, 12, fed=free.tokens)
    tempered = [math.exp(free.logq[i, t].item()) for i, t in enumerate(free.tokens)]
    raw_sure = [math.prod(raw[: i + 1]) for i in range(12)]
    tempered_sure = [math.prod(tempered[: i + 1]) for i in range(12)]
    checked = 0
    for stop_at in range(1, 11):
        floor = math.sqrt(raw_sure[stop_at] * raw_sure[stop_at - 1])
        if not raw_sure[stop_at] < floor <= raw_sure[stop_at - 1]:
            continue
        mx.random.seed(7)  # the same draws up to the stop
        got = DraftModel(draft, min_confidence=floor).propose(history, 12, params)
        assert got.tokens == free.tokens[: stop_at + 1]
        # the sharpened figures would have drafted on past this step
        checked += tempered_sure[stop_at + 1] >= floor
    assert checked


def test_a_draft_that_stops_itself_drafts_up_to_the_cap(pair):
    target, draft = pair
    spec = Speculator(DraftModel(draft, min_confidence=0.5), SpecPolicy(confident_k_max=11))
    assert spec.k_for("model") == 11
    pinned = Speculator(DraftModel(draft, min_confidence=0.5), SpecPolicy(fixed_k=3))
    assert pinned.k_for("model") == 3
    assert Speculator(DraftModel(draft), SpecPolicy()).k_for("model") == 5  # adaptive, unmeasured
    prompt = Session(target).render([{"role": "user", "content": PROMPTS[0]}])
    want, _, _ = run(Session(target), prompt, max_tokens=40, stop_tokens=set())
    got, stats, _ = run(Session(target, speculator=spec), prompt, max_tokens=40, stop_tokens=set())
    assert got == want and stats.drafted > 0
    sure = Speculator(DraftModel(draft, min_confidence=1e-30), SpecPolicy(mode="on", confident_k_max=11))
    got, stats, _ = run(Session(target, speculator=sure), prompt, max_tokens=40, stop_tokens=set())
    assert got == want and stats.drafted == 11 * stats.rounds  # a floor never reached: the cap


def test_a_round_accepted_in_full_costs_the_next_one_only_k_draft_steps(pair):
    """After a round accepted in full the draft has two tokens to catch up on (its last draft
    and the target's token); the next round's first step feeds both: K forward passes a round."""
    import dataclasses

    _, draft = pair
    fed: list[int] = []

    class Counting:
        def __init__(self, model):
            self.model_ = model

        def __call__(self, x, cache=None):
            fed.append(x.shape[-1])
            return self.model_(x, cache=cache)

        def __getattr__(self, name):
            return getattr(self.model_, name)

    dm = DraftModel(draft)
    dm.lm = dataclasses.replace(draft, model=Counting(draft.model))
    spec = Speculator(dm, SpecPolicy(mode="on", fixed_k=4))
    prompt = Session(draft).render([{"role": "user", "content": PROMPTS[1]}])
    # The draft verifies itself, so every draft is accepted: rounds of 4 drafts + 1.
    got, stats, _ = run(Session(draft, speculator=spec), prompt, max_tokens=15,
                        stop_tokens=set())
    assert stats.accepted == stats.drafted == 4 * stats.rounds and stats.rounds >= 3
    assert fed == [1, 1, 1, 1] + [2, 1, 1, 1] * (stats.rounds - 1)


# ---- review fixes: constrained speculation, wider drafts, caches that cannot rewind ------


def _tool_constraint(lm):
    from agent.backends.grammar import GrammarConstraint, ll_tokenizer, tool_call_grammar
    from tools import TOOLS

    files = {"calc.py": "def add(a, b):\n    return a + b\n"}
    grammar = tool_call_grammar(TOOLS, files, generic_edit=False)
    return GrammarConstraint(ll_tokenizer(lm.tokenizer), grammar, lm.vocab_size)


def _wide_draft(draft: LoadedModel, extra: int = 64) -> LoadedModel:
    """The draft with its embedding and head padded by `extra` rows (same tokenizer)."""
    from mlx_lm.models.llama import Model, ModelArgs

    args = ModelArgs.from_dict({**vars(draft.model.args), "vocab_size": draft.vocab_size + extra})
    m = Model(args)
    m.update(draft.model.parameters())
    pad = mx.random.normal((extra, args.hidden_size))
    m.model.embed_tokens.weight = mx.concatenate([draft.model.model.embed_tokens.weight, pad])
    if not args.tie_word_embeddings:
        m.lm_head.weight = mx.concatenate([draft.model.lm_head.weight, pad])
    mx.eval(m.parameters())
    return LoadedModel(m, draft.tokenizer, "wide", draft.source, draft.dtype, draft.device)


@pytest.mark.parametrize("kind", ["model", "combined"])
def test_constrained_speculation_equals_constrained_plain(pair, kind):
    """Grammar masks at every verify position, forced tokens as free drafts, a draft whose
    embedding is wider than the target's: output equals constrained plain decoding."""
    from agent.engine import SpecSettings, make_speculator

    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": "call a tool"}]) + \
        target.tokenizer.encode("<tool_call>", add_special_tokens=False)
    want, _, _ = run(Session(target), prompt, max_tokens=80, constraint=_tool_constraint(target))
    spec = make_speculator(SpecSettings(drafter=kind, speculation="on"), target,
                           _wide_draft(draft))
    got, stats, _ = run(Session(target, speculator=spec), prompt, max_tokens=80,
                        constraint=_tool_constraint(target))
    assert got == want
    assert stats.forced_tokens > 0 and stats.accepted <= stats.drafted
    assert '{"name":' in target.tokenizer.decode(got)


def test_wider_draft_samples_without_error(pair):
    from agent.engine import SpecSettings, make_speculator

    target, draft = pair
    spec = make_speculator(SpecSettings(drafter="model", speculation="on"), target,
                           _wide_draft(draft))
    prompt = Session(target).render([{"role": "user", "content": "sample"}])
    toks, stats, _ = run(Session(target, speculator=spec), prompt, max_tokens=30,
                         params=SamplingParams(temperature=1.0), stop_tokens=set())
    assert len(toks) == 30 and max(toks) < target.vocab_size and stats.rounds > 0


def _sliding_window(lm: LoadedModel, size: int) -> LoadedModel:
    from mlx_lm.models.cache import RotatingKVCache

    class Windowed(type(lm.model)):
        def make_cache(self):
            return [RotatingKVCache(max_size=size, keep=2) for _ in self.layers]

    m = Windowed(lm.model.args)
    m.update(lm.model.parameters())
    return LoadedModel(m, lm.tokenizer, "windowed", lm.source, lm.dtype, lm.device)


def test_cache_that_cannot_rewind_is_reset_and_refuses_speculation(pair):
    from agent.engine.cache import ModelCache
    from agent.engine.step import prefill
    from agent.engine import SpecSettings, make_speculator

    target, _ = pair
    windowed = _sliding_window(target, 8)
    mc = ModelCache(windowed)
    prefill(windowed.model, list(range(10, 22)), mc.cache, chunk=1)
    assert mc.offset == 12 and not mc.rewindable
    mc.rewind_to(5)  # the window has wrapped: trimming is impossible, so start over
    assert mc.offset == 0
    warnings = []
    assert make_speculator(SpecSettings(speculation="on"), windowed, warn=warnings.append) is None
    assert warnings and "cannot drop rejected tokens" in warnings[0]
    assert ModelCache(target).rewindable


@pytest.mark.parametrize("proposal", ["sampled", "deterministic"])
def test_expected_acceptance_is_the_mean_of_the_sampled_outcome(proposal):
    """The expectations a sampled round reports (for `auto`'s judgement) are the mean of what
    rejection sampling accepts: drafts drawn from q, accepted against p, many times over."""
    import numpy as np

    from agent.engine.sampling import log_probs
    from agent.engine.speculative import _accept_sampled

    params = SamplingParams(temperature=0.9, top_p=0.95)
    k, vocab = 3, 12
    rng = np.random.default_rng(5)
    target_logits = mx.array(rng.normal(0, 1.5, (k + 1, vocab)).astype(np.float32))
    logq = log_probs(mx.array(rng.normal(0, 1.5, (k, vocab)).astype(np.float32)), params)
    q = np.exp(np.array(logq))
    mx.random.seed(7)
    fixed = [int(np.argmax(q[i])) for i in range(k)]
    trials, got, rejected, expected = 4000, [], [], []
    for _ in range(trials):
        if proposal == "sampled":
            d = Draft([int(rng.choice(vocab, p=q[i] / q[i].sum())) for i in range(k)], logq)
        else:
            d = Draft(fixed)
        expect: dict = {}
        n, _ = _accept_sampled(target_logits, d, params, expect)
        got.append(n)
        rejected.append(n < k)
        expected.append((expect["accepted"], expect["rejected"]))
    if proposal == "sampled":  # prefix-free rows: the same expectation whatever was drawn
        assert max(e[0] for e in expected) - min(e[0] for e in expected) < 1e-5
    e_acc, e_rej = expected[0]
    assert 0.0 < e_acc < k and 0.0 < e_rej <= 1.0
    sd = np.std(got) / math.sqrt(trials)
    assert abs(np.mean(got) - e_acc) < 4 * sd + 1e-3, (np.mean(got), e_acc)
    sd_r = math.sqrt(e_rej * (1 - e_rej) / trials)
    assert abs(np.mean(rejected) - e_rej) < 4 * sd_r + 1e-3, (np.mean(rejected), e_rej)


def test_auto_judges_sampled_rounds_by_their_expected_acceptance(pair, monkeypatch):
    """At temperature the drafter's fitted acceptance is built from each round's expected
    accepted drafts, not from its coin flips."""
    from agent.engine import speculative

    target, draft = pair
    seen: list[dict] = []
    real = speculative._accept_sampled

    def recorded(logits, d, params, expect=None, at=-1):
        out = real(logits, d, params, expect, at)
        if expect is not None:
            seen.append(dict(expect, k=len(d.tokens), n=out[0]))
        return out

    monkeypatch.setattr(speculative, "_accept_sampled", recorded)
    spec = Speculator(DraftModel(draft), SpecPolicy(mode="on", fixed_k=4))
    session = Session(target, speculator=spec)
    prompt = session.render([{"role": "user", "content": PROMPTS[0]}])
    mx.random.seed(3)
    session.complete(prompt, max_tokens=40, stop_tokens=set(),
                     params=SamplingParams(temperature=1.0))
    fit = spec.fits["model"]
    # the last round may end past max_tokens, where the session stops reading: not judged
    assert len(seen) - 1 <= fit.rounds <= len(seen) and fit.rounds >= 3
    seen = seen[:fit.rounds]
    d = speculative._RoundFit.DECAY
    want_acc = want_rej = 0.0
    for e in seen:
        want_acc, want_rej = d * want_acc + e["accepted"], d * want_rej + e["rejected"]
    assert fit.accepted == pytest.approx(want_acc, rel=1e-6)
    assert fit.rejected == pytest.approx(want_rej, rel=1e-6)
    # and the figures are the expectations, not the sampled counts
    sampled = 0.0
    for e in seen:
        sampled = d * sampled + e["n"]
    assert fit.accepted != pytest.approx(sampled, rel=1e-9)


@pytest.mark.parametrize("kind", ["model", "combined"])
def test_a_cancel_while_the_draft_model_reads_a_long_prompt_acts_between_its_chunks(pair, monkeypatch, kind):
    """The draft model reads a new prompt in the session's schedule of chunks, a cancel
    checked between them: Esc does not wait for the whole prompt. What it fed stays a prefix
    of the prompt, and the next call decodes plain's tokens."""
    import agent.engine.drafters as drafters_mod
    from agent.cancel import CancelToken

    target, draft = pair
    prompt = [(7 * i) % 200 + 3 for i in range(900)]
    plain, _, _ = run(Session(target), prompt, max_tokens=12, stop_tokens=set())
    cancel, fed = CancelToken(), []
    real = drafters_mod.prefill

    def prefill(model, tokens, cache, chunk=512):
        real(model, tokens, cache, chunk=chunk)
        fed.append(len(tokens))
        if len(fed) == 2:
            cancel.cancel()

    monkeypatch.setattr(drafters_mod, "prefill", prefill)
    drafter = make_drafter(kind, draft)
    s = Session(target, speculator=Speculator(drafter, SpecPolicy(mode="on", fixed_k=4)))
    events = list(s.generate(prompt, max_tokens=12, stop_tokens=set(), cancel=cancel))
    assert events[-1].finish_reason == "cancelled" and len(fed) == 2
    assert all(n <= 96 for n in fed)  # chunks of the CPU schedule, not the whole prompt
    dm = drafter if kind == "model" else drafter.model
    assert dm.cache.offset == len(dm.fed) == sum(fed) and dm.fed == prompt[: sum(fed)]
    monkeypatch.setattr(drafters_mod, "prefill", real)
    again, _, _ = run(s, prompt, max_tokens=12, stop_tokens=set())
    assert again == plain

"""Plain engine: oracle equality with mlx-lm, sampling filters, stats, prefix reuse."""

from __future__ import annotations

import mlx.core as mx
import pytest

from agent.engine.sampling import SamplingParams, log_probs
from agent.engine.session import Session
from agent.events import GenerationStats, PrefillProgress, TextDelta


def oracle_greedy(lm, prompt: list[int], n: int) -> list[int]:
    from mlx_lm.generate import generate_step

    out = []
    for tok, _ in generate_step(mx.array(prompt), lm.model, max_tokens=n):
        out.append(int(tok))
    return out


def run(session: Session, prompt, **kw):
    events = list(session.generate(prompt, **kw))
    toks = [t for e in events if isinstance(e, TextDelta) for t in e.tokens]
    stats = [e for e in events if isinstance(e, GenerationStats)]
    assert len(stats) == 1
    return toks, stats[0], events


def chat_prompt(lm, text: str) -> list[int]:
    return Session(lm).render([{"role": "user", "content": text}])


@pytest.mark.parametrize("fixture", ["llama", "qwen2"])
def test_greedy_equals_mlx_lm_random_models(fixture, request, tokenizer_dir):
    from agent import models

    lm = request.getfixturevalue(fixture) if fixture == "llama" else models.load(
        str(request.getfixturevalue("qwen2_dir")), device="cpu"
    )
    prompt = chat_prompt(lm, "def add(a, b):\n    return a + b\n")
    want = oracle_greedy(lm, prompt, 120)
    got, stats, _ = run(Session(lm), prompt, max_tokens=120, stop_tokens=set())
    assert len(got) == 120 and got == want


@pytest.mark.embedded
def test_greedy_equals_mlx_lm_embedded(embedded):
    prompt = chat_prompt(embedded, "Write a Python function that reverses a string.")
    want = oracle_greedy(embedded, prompt, 100)
    got, stats, _ = run(Session(embedded), prompt, max_tokens=100)
    n = min(len(got), len(want))
    assert n >= 30 and got[:n] == want[:n]


@pytest.mark.embedded
def test_embedded_answers_coding_request(embedded):
    prompt = chat_prompt(embedded, "Write a Python function that returns the sum of a list.")
    _, stats, events = run(Session(embedded), prompt, max_tokens=32)  # its answer opens with the code
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert "def " in text
    assert stats.decode_tps > 0 and stats.prefill_tps > 0 and stats.ttft_s > 0


def test_max_tokens_and_stats(llama):
    prompt = chat_prompt(llama, "hello")
    toks, stats, _ = run(Session(llama), prompt, max_tokens=7, stop_tokens=set())
    assert stats.finish_reason == "length" and len(toks) == 7 == stats.generated_tokens
    assert stats.prompt_tokens == len(prompt) and stats.cached_tokens == 0
    assert stats.peak_memory_gb > 0


def test_prefill_progress_events(llama):
    s = Session(llama, prefill_chunk=16)
    prompt = chat_prompt(llama, "x = 1\n" * 30)
    _, _, events = run(s, prompt, max_tokens=2)
    prog = [e for e in events if isinstance(e, PrefillProgress)]
    assert prog and prog[-1].done == prog[-1].total == len(prompt) - 1
    assert [p.done for p in prog] == sorted(p.done for p in prog)


def test_prefix_reuse_warm_equals_cold(llama):
    p1 = chat_prompt(llama, "first question about lists")
    warm = Session(llama)
    t1, _, _ = run(warm, p1, max_tokens=20, stop_tokens=set())
    p2 = p1 + t1 + chat_prompt(llama, "and a follow up")[:10]
    t2_warm, stats, _ = run(warm, p2, max_tokens=30, stop_tokens=set())
    t2_cold, cold_stats, _ = run(Session(llama), p2, max_tokens=30, stop_tokens=set())
    assert t2_warm == t2_cold
    assert stats.cached_tokens >= len(p1) and cold_stats.cached_tokens == 0


def test_interrupted_generation_leaves_consistent_cache(llama):
    s = Session(llama)
    prompt = chat_prompt(llama, "interrupt me")
    gen = s.generate(prompt, max_tokens=50, stop_tokens=set())
    for e in gen:
        if isinstance(e, TextDelta):
            break
    gen.close()
    assert s.tcache.offset <= len(s.tokens)
    again, _, _ = run(s, prompt, max_tokens=15, stop_tokens=set())
    cold, _, _ = run(Session(llama), prompt, max_tokens=15, stop_tokens=set())
    assert again == cold


def test_sampling_filters():
    logits = mx.log(mx.array([[0.5, 0.3, 0.15, 0.05]]))
    lp = log_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert mx.isinf(lp[0, 2:]).all().item() and abs(mx.exp(lp).sum().item() - 1) < 1e-5
    lp = log_probs(logits, SamplingParams(temperature=1.0, top_p=0.7))
    assert mx.isfinite(lp[0, :2]).all().item() and mx.isinf(lp[0, 2:]).all().item()
    lp = log_probs(logits, SamplingParams(temperature=1.0, min_p=0.35))
    assert mx.isfinite(lp[0, :2]).all().item() and mx.isinf(lp[0, 2:]).all().item()
    lp = log_probs(logits, SamplingParams(temperature=1.0))
    assert mx.allclose(mx.exp(lp), mx.array([[0.5, 0.3, 0.15, 0.05]]), atol=1e-5).item()
    with pytest.raises(ValueError):
        SamplingParams(top_p=0).validate()


@pytest.mark.parametrize("scale, narrow", [(8.0, True), (3.0, None), (0.02, False)])
def test_eager_top_p_keeps_the_same_tokens_as_the_full_sort(scale, narrow):
    """The verify pass's top-p (from the most likely TOP_P_CANDIDATES tokens when they cover
    top_p) keeps exactly the tokens a full sort keeps, and falls back to it when the nucleus is
    wider (the nearly flat rows)."""
    from agent.engine import sampling

    mx.random.seed(7)
    logits = mx.random.normal((6, 20000)) * scale
    for p in (SamplingParams(0.7, top_p=0.95), SamplingParams(1.0, top_p=0.5),
              SamplingParams(0.3, top_p=0.99, top_k=5000, min_p=0.001)):
        full, fast = log_probs(logits, p), log_probs(logits, p, eager=True)
        assert mx.array_equal(mx.isinf(full), mx.isinf(fast)).item()
        assert mx.allclose(mx.where(mx.isinf(full), 0, full), mx.where(mx.isinf(fast), 0, fast)).item()
    kept = mx.sum(mx.isfinite(log_probs(logits, SamplingParams(1.0, top_p=0.95))), axis=-1)
    if narrow is not None:  # peaked rows take the candidates' path, nearly flat ones the sort
        assert mx.all((kept < sampling.TOP_P_CANDIDATES) == narrow).item()


def test_stop_strings_cut_text(llama):
    prompt = chat_prompt(llama, "stop test")
    toks, _, events = run(Session(llama), prompt, max_tokens=40, stop_tokens=set())
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    needle = text[10:13]
    assert len(needle) == 3
    _, stats, ev2 = run(Session(llama), prompt, max_tokens=40, stop_tokens=set(),
                        stop_strings=[needle])
    text2 = "".join(e.text for e in ev2 if isinstance(e, TextDelta))
    assert stats.finish_reason == "stop_string"
    assert text2.endswith(needle) and text2 == text[: text.find(needle) + 3]


def test_layers_at_different_offsets_reset_the_cache(llama):
    """A Ctrl-C inside a forward pass can leave layers at different offsets: start over."""
    from agent.engine.cache import ModelCache
    from agent.engine.step import prefill

    mc = ModelCache(llama)
    prefill(llama.model, list(range(5, 15)), mc.cache)
    mc.cache[-1].trim(3)  # as if the last layer had not been reached
    mc.rewind_to(8)
    assert {c.offset for c in mc.cache} == {0}


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(repetition_penalty=1.3)])
def test_a_bounded_plain_run_queues_no_step_after_its_last_token(llama, params):
    """`plain_decode(limit=n)` yields the same n tokens as the endless run and feeds the model
    n steps (pending and the first n - 1 tokens): the pipelined path queues the next step
    before it yields a token, so without the bound a run of n costs n + 1."""
    from mlx_lm.models.cache import make_prompt_cache

    from agent.engine.step import forward, plain_decode

    prompt = chat_prompt(llama, "count to ten")
    caches = []
    for limit in (None, 5):
        cache = make_prompt_cache(llama.model)
        mx.eval(forward(llama.model, prompt[:-1], cache))
        start = cache[0].offset
        gen = plain_decode(llama.model, cache, prompt[-1], params, history=prompt, limit=limit)
        toks = [t for _, t in zip(range(5), gen)]
        if limit is not None:
            assert next(gen, None) is None  # the bound ends the run
        gen.close()
        caches.append((toks, cache[0].offset - start))
    (endless, fed_endless), (bounded, fed_bounded) = caches
    assert bounded == endless and len(bounded) == 5
    assert fed_bounded == 5
    assert fed_endless == (5 if params.penalized else 6)  # the penalized path is not pipelined

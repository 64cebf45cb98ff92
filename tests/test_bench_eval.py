"""The lookup and grammar benches on tiny models: the naive baseline loop is exact, and the
grammar bench's figures come from real decoding (valid calls, identical speculative runs)."""

from __future__ import annotations

import pytest

from agent.bench import grammar as bench_grammar, lookup as bench_lookup
from agent.engine.session import Session
from agent.events import TextDelta


def test_naive_draft_prefers_the_longest_recent_ngram():
    seq = [1, 2, 3, 9, 9, 2, 3, 7, 7, 1, 2, 3]
    assert bench_lookup.naive_draft(seq, 2) == [9, 9]  # 3-gram [1,2,3] at 0
    assert bench_lookup.naive_draft([5, 2, 3, 8, 0, 2, 3], 3) == [8, 0, 2]  # 2-gram
    assert bench_lookup.naive_draft([4, 6, 4], 2) == [6, 4]  # 1-gram
    assert bench_lookup.naive_draft([1, 2, 3], 4) == []


def test_naive_loop_is_greedy_identical_to_plain(llama):
    prompt = Session(llama).render([{"role": "user", "content": "abc abc abc abc " * 4}])
    want = []
    for ev in Session(llama).generate(prompt, max_tokens=40, stop_tokens=set()):
        if isinstance(ev, TextDelta):
            want += ev.tokens
    got, tps = bench_lookup.naive_decode(llama, prompt, 40)
    assert got == want and tps > 0


def test_naive_loop_ends_before_a_stop_token_like_the_session(llama):
    prompt = Session(llama).render([{"role": "user", "content": "abc abc abc abc " * 4}])
    free, _ = bench_lookup.naive_decode(llama, prompt, 40)
    stop = frozenset({free[11]})  # a token the reply reaches: it ends there, excluded
    got, _ = bench_lookup.naive_decode(llama, prompt, 40, stop=stop)
    want = []
    for ev in Session(llama).generate(prompt, max_tokens=40, stop_tokens=set(stop)):
        if isinstance(ev, TextDelta):
            want += ev.tokens
    assert got == want == free[: free.index(free[11])]


def test_bench_workload_interleaves_three_exact_loops(llama):
    from agent.config import Config

    w = bench_lookup.Workload("w", "tune", "python", "a.py", "Copy it.", "x = 1\ny = 2\n" * 4)
    row = bench_lookup.bench_workload(llama, Config(), w, 45, through_eos=True)
    assert row["ours_identical"] and row["naive_identical"] and row["tokens"] == 45
    assert row["plain_tps"] > 0 and row["ours_tps"] > 0 and row["naive_tps"] > 0


def test_bench_workload_times_the_reply_up_to_its_end_of_turn_token(llama):
    """By default the three loops stop where the reply ends, as the product does."""
    import dataclasses

    from mlx_lm.tokenizer_utils import TokenizerWrapper

    from agent.config import Config

    w = bench_lookup.Workload("w", "tune", "python", "a.py", "Copy it.", "x = 1\ny = 2\n" * 4)
    prompt = Session(llama).render([{"role": "user", "content": w.prompt_text()}])
    reply, _ = bench_lookup.naive_decode(llama, prompt, 45)
    i = next(i for i in range(5, 45) if reply[i] not in reply[:i])  # first seen at i
    end = reply[i]  # the model's end-of-turn token from here on
    tok = TokenizerWrapper(llama.tokenizer._tokenizer, eos_token_ids=[end])
    lm = dataclasses.replace(llama, tokenizer=tok)
    row = bench_lookup.bench_workload(lm, Config(), w, 45)
    assert row["tokens"] == i  # (through_eos: all 45, in the test above)
    assert row["ours_identical"] and row["naive_identical"]


def test_paused_clock_leaves_out_the_other_loops_turns():
    import time

    clock = bench_lookup.PausedClock()
    t0 = clock()
    clock.pause()
    time.sleep(0.2)  # another loop's turn
    assert clock() - t0 < 0.05
    clock.resume()
    time.sleep(0.02)
    assert 0.02 <= clock() - t0 < 0.15


def test_workloads_have_both_subsets_and_distinct_languages():
    ws = bench_lookup.load_workloads()
    assert len(ws) >= 10
    for subset in ("tune", "check"):
        assert len({w.lang for w in ws if w.subset == subset}) >= 5


def test_check_call_rejects_unfinished_and_off_schema_calls():
    tool = bench_grammar.Schema("enums", bench_grammar.TRICKY["enums"])
    ok = '{"name":"enums","arguments":{"level":"info","color":"red"}}</tool_call>'
    assert bench_grammar.check_call(tool, ok) == ""
    assert "unfinished" in bench_grammar.check_call(tool, ok[:-12])
    assert "schema" in bench_grammar.check_call(tool, ok.replace("info", "loud"))


@pytest.mark.parametrize("name", ["enums", "ref_defs", "nullable"])
def test_constrained_calls_on_a_random_model_are_valid_and_spec_identical(llama, name):
    from agent.backends.grammar import ll_tokenizer
    from agent.engine.drafters import PromptLookup
    from agent.engine.speculative import SpecPolicy, Speculator

    tool = bench_grammar.schemas()[name]
    ll_tok = ll_tokenizer(llama.tokenizer)
    prompt = bench_grammar.call_prompt(llama, tool)
    plain, text, _ = bench_grammar._decode(llama, ll_tok, tool, prompt, None)
    spec = Speculator(PromptLookup(), SpecPolicy(mode="on"))
    again, _, stats = bench_grammar._decode(llama, ll_tok, tool, prompt, spec)
    assert bench_grammar.check_call(tool, text) == ""
    assert again == plain and stats.forced_tokens > 0

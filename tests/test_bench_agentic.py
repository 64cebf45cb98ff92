"""`bench agentic`: the recorded sessions decode back exactly, the replay's modes give plain's
greedy output token for token, and the suffix index holds earlier sessions' replies only."""

from __future__ import annotations

import json
import random

from agent.bench import agentic
from agent.bench.agentic import Recorded, Turn, decode, encode
from agent.config import Config


def test_the_committed_replays_are_multi_turn_sessions_of_the_default_model():
    model, sessions = agentic.load()
    assert model == Config().model
    assert {s.edit_format for s in sessions} == {"whole", "tool"}
    assert {s.subset for s in sessions} == {"tune", "check"}
    multi = [s for s in sessions if len(s.turns) > 1]
    assert multi
    for s in multi:  # each model call's prompt is the history so far: it extends the last one
        for a, b in zip(s.turns, s.turns[1:]):
            assert len(b.prompt) > len(a.prompt) and b.prompt[: len(a.prompt)] == a.prompt


def test_encode_decode_round_trip():
    rng = random.Random(0)
    base = [rng.randrange(500) for _ in range(50)]
    s1 = Recorded("a", "tune", "x", True, [Turn(base + [1, 2], [3, 4], "stop"),
                                           Turn(base + [1, 2, 3, 4, 9], [5], "length")], "tool")
    s2 = Recorded("b", "check", "y", False, [Turn(base[:20] + [7], [8], "stop")])
    data = json.loads(json.dumps(encode("m", [s1, s2], {})))
    assert data["sessions"][0]["turns"][1]["keep"] == 52  # a delta on the last prompt (all 52 kept)
    model, got = decode(data)
    assert model == "m" and got == [s1, s2]


def test_replay_is_identical_across_modes_and_the_index_holds_earlier_sessions(pair, tmp_path):
    target, draft = pair
    text = "def add(a, b):\n    return a + b\n"
    p1 = target.tokenizer.encode(text * 3)
    reply1 = target.tokenizer.encode(text)
    t1 = [Turn(p1, reply1, "stop"), Turn(p1 + reply1 + p1[:5], reply1[:4], "stop")]
    p2 = list(target.tokenizer.encode(text * 2)) + [3, 4]
    sessions = [Recorded("one", "tune", "c", True, t1, "tool"),
                Recorded("two", "check", "c", False, [Turn(p2, reply1, "stop")], "tool"),
                Recorded("one", "tune", "c", True, [Turn(p1, reply1, "stop")], "whole")]
    path = tmp_path / "replays.json"
    path.write_text(json.dumps(encode("tiny", sessions, {})))
    r = agentic.run(Config(), [], 16, False, lambda m: None, path, target, draft)
    assert r["modes"] == ["plain", "lookup", "suffix", "lookup+suffix", "draft", "all"]
    assert r["identical_to_plain"] is True
    held = [s["suffix_index_tokens"] for s in r["sessions"]]
    # Session one starts with nothing; two with one's recorded replies; the whole-format
    # session of task one with two's only (never its own task's).
    assert held == [0, len(reply1) + 4 + 1 * 2, len(reply1) + 1]
    for s in r["sessions"]:
        assert s["plain_tps"] > 0 and s["tokens"] > 0
    assert r["lookup+suffix_vs_plain_median"] > 0


def test_trained_pair_bench_samples_at_temperature_beside_mlx_lm(pair):
    """`bench spec --pair qwen-coder --temperature`: the same machinery at T > 0 and top-p,
    each run seeded alike; acceptance for both engines, no identity claim."""
    from agent.bench.pair import bench_trained
    from agent.engine.sampling import SamplingParams

    target, draft = pair
    out = bench_trained(target, draft, 12, [2, 3], log=lambda m: None,
                        params=SamplingParams(temperature=0.7, top_p=0.95), seed=1)
    assert out["identical_to_plain"] is None and out["mlx_lm_identical"] is None
    assert 0 <= out["acceptance_rate"] <= 1 and 0 <= out["mlx_lm_acceptance_best_k"] <= 1
    for w in out["workloads"]:
        assert w["tokens"] == 12 and w["plain_tps"] > 0 and w["spec_tps"] > 0
        assert all(0 <= a <= 1 for a in w["mlx_lm_acceptance"].values())
    assert out["min_speedup_vs_plain"] > 0


def test_trained_pair_bench_repeats_report_medians_over_seeds(pair):
    """`bench spec --pair qwen-coder --repeat 2`: every configuration runs twice per workload;
    tok/s are the medians of the runs listed beside them, counts are summed over both."""
    import statistics

    from agent.bench.pair import bench_trained
    from agent.engine.sampling import SamplingParams

    target, draft = pair
    out = bench_trained(target, draft, 8, [2], log=lambda m: None,
                        params=SamplingParams(temperature=0.7, top_p=0.95), seed=3, repeat=2)
    for w in out["workloads"]:
        runs = w["runs_tps"]
        assert w["repeats"] == 2 and all(len(v) == 2 for v in runs.values())
        assert w["plain_tps"] == statistics.median(runs["plain"] + runs["plain2"])
        assert w["spec_tps"] == statistics.median(runs["ours"])
        assert w["tree_tps"] == statistics.median(runs["tree"])
        assert w["mlx_lm_tps"][2] == statistics.median(w["mlx_lm_runs_tps"][2])
        assert w["rounds"] >= 1 and w["accepted"] <= w["drafted"]
    greedy = bench_trained(target, draft, 8, [2], log=lambda m: None, repeat=2)
    assert greedy["identical_to_plain"] is True and greedy["mlx_lm_identical"] is True

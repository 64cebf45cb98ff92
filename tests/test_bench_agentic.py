"""`bench agentic`: the recorded sessions decode back exactly, the replay's modes give plain's
greedy output token for token, and the suffix index holds earlier sessions' replies only."""

from __future__ import annotations

import argparse
import json
import random

import pytest

from agent.bench import agentic
from agent.bench.agentic import Recorded, Turn, decode, encode
from agent.config import Config


def test_the_committed_replays_are_multi_turn_sessions_of_the_default_model():
    model, sessions = agentic.load()
    assert model == Config().model
    assert {s.edit_format for s in sessions} == {"whole", "tool"}
    assert {s.suite for s in sessions} == {"tasks", "exercism"}
    assert {s.subset for s in sessions} == {"tune", "check"}
    multi = [s for s in sessions if len(s.turns) > 1]
    assert multi
    for s in multi:  # each model call's prompt is the history so far: it extends the last one,
        for a, b in zip(s.turns, s.turns[1:]):  # or leaves failed attempts out (a fresh sample)
            extends = len(b.prompt) > len(a.prompt) and b.prompt[: len(a.prompt)] == a.prompt
            assert extends or b.params.get("temperature", 0) > 0 or \
                agentic._common(a.prompt, b.prompt) >= len(b.prompt) // 2
    sampled = [t for s in sessions for t in s.turns if t.params]
    assert sampled and all(t.params["temperature"] > 0 for t in sampled)


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
    assert r["modes"] == ["plain", "lookup", "suffix", "lookup+suffix", "lookup-again", "draft",
                          "all"]
    assert r["identical_to_plain"] is True
    held = [s["suffix_index_tokens"] for s in r["sessions"]]
    # Session one starts with nothing; two with one's recorded replies; the whole-format
    # session of task one with two's only (never its own task's).
    assert held == [0, len(reply1) + 4 + 1 * 2, len(reply1) + 1]
    for s in r["sessions"]:
        assert s["plain_tps"] > 0 and s["tokens"] > 0
    assert r["lookup+suffix_vs_plain_median"] > 0
    # medians per group: the tasks' tool sessions, their whole-file one, the multi-turn ones
    assert {g: v["sessions"] for g, v in r["groups"].items()} == {
        "tasks/tool": 2, "tasks/whole": 1, "multi-turn": 1}


def _two_sessions(target, path):
    text = "def add(a, b):\n    return a + b\n"
    p1 = target.tokenizer.encode(text * 3)
    reply = target.tokenizer.encode(text)
    sessions = [Recorded("one", "tune", "c", True, [Turn(p1, reply, "stop"),
                                                    Turn(p1 + reply + p1[:5], reply[:4], "stop")],
                         "tool"),
                Recorded("two", "check", "c", False, [Turn(p1[:9], reply, "stop")], "whole")]
    path.write_text(json.dumps(encode("tiny", sessions, {})))


def test_replay_repeats_chosen_modes_and_resumes_from_its_record(pair, tmp_path):
    """`--modes` keeps plain and the modes named; `--repeat 2` decodes each turn twice per
    drafter mode (plain once), every decode compared with plain; `--out` appends a row per
    session, and a second run naming it replays only the sessions not in it."""
    target, _ = pair
    path, out = tmp_path / "replays.json", tmp_path / "rec.jsonl"
    _two_sessions(target, path)
    log: list[str] = []
    r = agentic.run(Config(), ["multi-turn"], 16, False, log.append, path, target, None,
                    modes=["lookup", "lookup+suffix", "lookup-again"], repeat=2, out=out)
    assert r["modes"] == ["plain", "lookup", "lookup+suffix", "lookup-again"]
    assert [s["session"] for s in r["sessions"]] == ["one"]  # the only multi-turn session
    assert r["identical_to_plain"] is True and r["repeat"] == 2
    row = r["sessions"][0]
    # each drafter mode decoded every turn twice, plain once
    assert row["plain_decoded"] > 0
    for m in r["modes"][1:]:
        assert row[f"{m}_decoded"] == 2 * row["plain_decoded"]
    assert r["lookup_again_vs_lookup_min"] > 0 and r["lookup_suffix_vs_lookup_median"] > 0
    # lookup alone from its two runs: every token over every second of both
    both = (row["lookup_decoded"] + row["lookup-again_decoded"]) / (
        row["lookup_decoded"] / row["lookup_tps"]
        + row["lookup-again_decoded"] / row["lookup-again_tps"])
    assert min(row["lookup_tps"], row["lookup-again_tps"]) <= both <= max(
        row["lookup_tps"], row["lookup-again_tps"])
    assert r["lookup_suffix_vs_lookup_pooled_min"] == pytest.approx(row["lookup+suffix_tps"] / both)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["header"]["modes"] == r["modes"] and len(lines) == 2
    # resumed over every session: "one" is in the record, so only "two" is replayed
    log.clear()
    again = agentic.run(Config(), [], 16, False, log.append, path, target, None,
                        modes=["lookup", "lookup+suffix", "lookup-again"], repeat=2, out=out)
    assert [s["session"] for s in again["sessions"]] == ["one", "two"]
    assert again["sessions"][0] == row  # kept from the record, not decoded again
    assert any("1 already in" in m for m in log)
    assert len(out.read_text().splitlines()) == 3
    # a row cut short (a run killed while writing it) is dropped, and that session runs again
    out.write_text(out.read_text()[:-40])
    third = agentic.run(Config(), [], 16, False, log.append, path, target, None,
                        modes=["lookup", "lookup+suffix", "lookup-again"], repeat=2, out=out)
    assert [s["session"] for s in third["sessions"]] == ["one", "two"]
    assert [json.loads(x).get("session") for x in out.read_text().splitlines()] == [
        None, "one", "two"]


def test_replay_refuses_what_does_not_fit_before_decoding(pair, tmp_path, capsys):
    """A mode, a session name or a record of other settings: one line, exit status 2."""
    target, _ = pair
    path, out = tmp_path / "replays.json", tmp_path / "rec.jsonl"
    _two_sessions(target, path)
    with pytest.raises(ValueError, match="no such mode: tree"):
        agentic.run(Config(), [], 16, False, print, path, target, None, modes=["tree"])
    with pytest.raises(ValueError, match="no recorded session for: three"):
        agentic.run(Config(), ["three"], 16, False, print, path, target, None)
    with pytest.raises(ValueError, match="needs a draft model"):
        agentic.run(Config(), [], 16, False, print, path, target, None, modes=["draft"])
    agentic.run(Config(), ["two"], 8, False, print, path, target, None, modes=["lookup"], out=out)
    with pytest.raises(ValueError, match=r"other settings \(modes\)"):
        agentic.run(Config(), [], 8, False, print, path, target, None, modes=["suffix"], out=out)
    out.write_text("not json\n")
    with pytest.raises(ValueError, match="not a bench agentic record"):
        agentic.run(Config(), [], 8, False, print, path, target, None, out=out)
    out.write_text('{"header": 1}\n')
    with pytest.raises(ValueError, match="no header line"):
        agentic.run(Config(), [], 8, False, print, path, target, None, out=out)
    args = argparse.Namespace(sessions="nope", record=False, modes="", out="", tokens=8,
                              quick=False, repeat=1, json=False)
    assert agentic.main(args, Config()) == 2
    err = capsys.readouterr().err
    assert "no recorded session for: nope" in err and "Traceback" not in err


def test_trained_pair_bench_samples_at_temperature_beside_mlx_lm(pair):
    """`bench spec --pair qwen-coder --temperature`: the same machinery at T > 0 and top-p,
    each run seeded alike; acceptance for both engines. Our runs draw with the seed's keys
    (the draft model with the target's noise), so they write plain's text; mlx-lm's own
    sampler writes other text, so no identity is claimed for it."""
    from agent.bench.pair import bench_trained
    from agent.engine.sampling import SamplingParams

    target, draft = pair
    out = bench_trained(target, draft, 12, [2, 3], log=lambda m: None,
                        params=SamplingParams(temperature=0.7, top_p=0.95), seed=1)
    assert out["identical_to_plain"] is True and out["mlx_lm_identical"] is None
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
    # every repeat's runs write that repeat's plain text (each repeat has its own seed)
    assert out["identical_to_plain"] is True
    greedy = bench_trained(target, draft, 8, [2], log=lambda m: None, repeat=2)
    assert greedy["identical_to_plain"] is True and greedy["mlx_lm_identical"] is True


def test_record_writes_every_model_call_of_tasks_and_exercises_and_keeps_the_rest(tmp_path):
    """`bench agentic --record`: each session's model calls (exact prompt and reply tokens)
    go into the file, Exercism sessions marked as such; sessions not recorded again stay."""
    from types import SimpleNamespace

    from agent.events import GenerationStats, TextDelta

    def stats(n: int) -> GenerationStats:
        return GenerationStats(prompt_tokens=3, cached_tokens=0, generated_tokens=n,
                               prefill_s=0.1, prefill_tps=1.0, decode_s=0.1, decode_tps=1.0,
                               ttft_s=0.1, peak_memory_gb=0.0, finish_reason="stop")

    class FakeSession:
        def generate(self, prompt, *a, **kw):
            reply = [len(prompt), len(prompt) + 1]
            yield TextDelta("x", tuple(reply[:1]))
            yield TextDelta("y", tuple(reply[1:]))
            yield stats(2)

    def factory(cfg):  # one engine (one session) per factory, as `local_model_factory` loads
        session = FakeSession()
        return lambda ctx: SimpleNamespace(session=session)

    def run_task(task, cfg, model_for, limit):  # two model calls, the second on a longer prompt
        m = model_for(None)
        list(m.session.generate([1, 2, 3]))
        list(m.session.generate([1, 2, 3, 4, 5, 6]))
        return SimpleNamespace(passed=task.name == "a")

    def run_exercise(ex, cfg, model_for, limit):
        list(model_for(None).session.generate([9] * 10))
        return SimpleNamespace(passed_2=False)

    tasks = [SimpleNamespace(name=n, subset="tune", category="c") for n in ("a", "b")]
    runner = SimpleNamespace(eval_config=lambda c: c, local_model_factory=factory,
                             run_task=run_task)
    tasks_mod = SimpleNamespace(
        load_tasks=lambda subset, names=None: [t for t in tasks if not names or t.name in names])
    ex_mod = SimpleNamespace(load_exercises=lambda root, which: [
        SimpleNamespace(name=n, subset="tune") for n in which.split(",")],
        default_dir=lambda: tmp_path)
    ex_run = SimpleNamespace(run_exercise=run_exercise, settings_of=lambda c: {})
    out = tmp_path / "replays.json"
    out.write_text(json.dumps(encode("m", [Recorded("old", "check", "c", True,
                                                    [Turn([5, 5], [6], "stop")])], {})))
    cfg = Config()
    n = agentic.record(cfg, [], "all", out, 1.0, lambda m: None, runner, tasks_mod,
                       formats=("whole",), exercism=(ex_mod, ex_run))
    assert n == 2 + len(agentic.EXERCISM_SESSIONS)
    _, sessions = agentic.load(out)
    assert [s.task for s in sessions] == ["old", "a", "b", *agentic.EXERCISM_SESSIONS]
    a = sessions[1]
    assert a.suite == "tasks" and a.passed and a.edit_format == "whole"
    assert [(t.prompt, t.reply) for t in a.turns] == [([1, 2, 3], [3, 4]), ([1, 2, 3, 4, 5, 6], [6, 7])]
    ex = sessions[3]
    assert ex.suite == "exercism" and not ex.passed and ex.turns == [Turn([9] * 10, [10, 11], "stop")]
    # Recording one exercise again replaces its session and keeps every other one.
    agentic.record(cfg, ["bowling"], "all", out, 1.0, lambda m: None, runner, tasks_mod,
                   exercism=(ex_mod, ex_run))
    _, again = agentic.load(out)
    assert sorted(s.task for s in again) == sorted(s.task for s in sessions)
    assert again[-1].task == "bowling" and again[-1].suite == "exercism"


def test_record_refuses_a_name_that_is_no_task_when_no_exercises_are_at_hand(tmp_path):
    """Without the Exercism folder, a name that is not an eval task is an error (it would
    otherwise record nothing and say so only by a count of 0); the file stays untouched."""
    from agent.eval import runner, tasks

    out = tmp_path / "replays.json"
    with pytest.raises(tasks.TaskError, match="no_such_task"):
        agentic.record(Config(), ["no_such_task"], "all", out, 1.0, lambda m: None, runner, tasks)
    assert not out.exists()


def test_quick_replays_one_session_the_first_of_several_calls(pair, tmp_path):
    """`--quick` without names: one session, not the task's sessions in both edit formats."""
    target, _ = pair
    p = target.tokenizer.encode("def add(a, b):\n    return a + b\n" * 2)
    sessions = [Recorded("one", "tune", "c", True, [Turn(p, p[:6], "stop")], "whole"),
                Recorded("two", "tune", "c", True, [Turn(p, p[:6], "stop")] * 2, "whole"),
                Recorded("two", "tune", "c", True, [Turn(p, p[:6], "stop")] * 2, "tool")]
    path = tmp_path / "replays.json"
    path.write_text(json.dumps(encode("tiny", sessions, {})))
    r = agentic.run(Config(), [], 8, True, lambda m: None, path, target, None, modes=["lookup"])
    assert [(s["session"], s["edit_format"]) for s in r["sessions"]] == [("two", "whole")]

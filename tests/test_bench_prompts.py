"""`bench spec --prompts FILE`: speculation measured on the user's prompts, every configuration
side by side on tiny models, the seed's rules for the recommendation, `.specrc` written
without losing a line, bad files refused in one line."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from agent.bench.prompts import (Arm, PromptsError, read_prompts, recommend, run,
                                 write_config)
from agent.config import Config
from agent.engine import SpecSettings

ROOT = Path(__file__).resolve().parent.parent


def test_prompts_files_of_each_kind(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('Write a sort.\n\n{"messages": [{"role": "user", "content": "hi"}]}\n'
                 '[{"role": "system", "content": "terse"}, {"role": "user", "content": "2+2?"}]\n')
    assert read_prompts(f) == [[{"role": "user", "content": "Write a sort."}],
                               [{"role": "user", "content": "hi"}],
                               [{"role": "system", "content": "terse"},
                                {"role": "user", "content": "2+2?"}]]


@pytest.mark.parametrize("text,says", [
    ("", "no prompts"), ('{"messages": 5}\n', ":1: expected"), ("ok\n{not json\n", ":2: not JSON"),
    ('[{"role": "robot", "content": "x"}]\n', "needs a role"),
    ('[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]\n', "assistant's"),
    ("[" * 100000 + "\n", "not JSON")])
def test_a_bad_prompts_file_is_one_error_naming_the_line(tmp_path, text, says):
    f = tmp_path / "p.jsonl"
    f.write_text(text)
    with pytest.raises(PromptsError, match="p.jsonl") as e:
        read_prompts(f)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_cli_refuses_a_bad_file_in_one_line_exit_2(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text("{broken\n")
    r = subprocess.run([sys.executable, "-m", "agent.cli", "bench", "spec", "--prompts", str(f)],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "p.jsonl:1: not JSON" in r.stderr
    r = subprocess.run([sys.executable, "-m", "agent.cli", "bench", "cache", "--write-config"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "--write-config" in r.stderr


def test_every_configuration_runs_every_prompt_and_greedy_equals_plain(pair):
    target, draft = pair
    prompts = [[{"role": "user", "content": "def add(a, b):\n    return a + b\n" * 3}],
               [{"role": "user", "content": "one two three one two three"}]]
    calls = []
    results = run(target, draft, prompts, Config(), max_tokens=10, progress=lambda: calls.append(1))
    names = [a.name for a in results]
    assert names == ["plain", "lookup", *(f"draft K={k}" for k in range(2, 9)), "combined", "auto"]
    assert len(calls) == len(prompts) * len(results)
    for a in results:
        assert a.replies == 2 and a.identical == 2, a.name  # exact: every reply is plain's
        assert a.tokens == results[0].tokens and a.seconds > 0 and a.tps > 0
    fixed = {a.name: a for a in results}
    assert fixed["draft K=4"].rounds > 0 and fixed["draft K=4"].drafted == 4 * fixed["draft K=4"].rounds
    assert [a.name for a in run(target, None, prompts[:1], Config(), 4)] == ["plain", "lookup", "auto"]


def _arm(name: str, tps: float, acc: float = 0.0, same: int = 10, drafter: str = "model", k: int = 0):
    settings = None if name == "plain" else SpecSettings(speculation="on", drafter=drafter,
                                                          num_draft_tokens=k)
    return Arm(name, settings, tokens=int(tps * 100), seconds=100.0, rounds=100 if settings else 0,
               accepted=int(acc * 100), drafted=500, identical=same, replies=10)


def test_the_recommendation_follows_the_seed_rules():
    plain = _arm("plain", 10)
    fast_draft = _arm("draft K=6", 25, acc=3.4, k=6)
    got = recommend([plain, _arm("lookup", 12, 1.0, drafter="lookup"), fast_draft],
                    draft_model="qwen2.5-coder-0.5b")
    assert got.arm == "draft K=6" and got.settings == {
        "speculation": "on", "drafter": "model", "num_draft_tokens": 6,
        "draft_model": "qwen2.5-coder-0.5b", "draft_confidence": 0.0}
    # a draft below 2.5 accepted a round: try another draft; the fastest other one wins
    weak = recommend([plain, _arm("lookup", 12, 1.0, drafter="lookup"), _arm("draft K=4", 30, acc=2.2, k=4)])
    assert weak.arm == "lookup" and "below 2.5" in weak.why
    # not identical to plain at T=0: never recommended
    assert recommend([plain, _arm("lookup", 20, 1.0, same=9, drafter="lookup")]).arm == "plain"
    # under 1.05x plain: speculation off
    off = recommend([plain, _arm("lookup", 10.3, 1.0, drafter="lookup")])
    assert off.settings == {"speculation": "off"} and "1.05" in off.why


def test_write_config_sets_keys_and_keeps_every_other_line(tmp_path):
    rc = tmp_path / ".specrc"
    rc.write_text('# mine\nmodel = "qwen2.5-coder-1.5b"\nspeculation = "auto"\n\n[mcp]\nenable = ["git"]\n')
    write_config(rc, {"speculation": "on", "num_draft_tokens": 6})
    text = rc.read_text()
    assert text.startswith('# mine\nmodel = "qwen2.5-coder-1.5b"\nspeculation = "on"\n')
    assert tomllib.loads(text) == {"model": "qwen2.5-coder-1.5b", "speculation": "on",
                                   "num_draft_tokens": 6, "mcp": {"enable": ["git"]}}
    bad = tmp_path / "bad"
    bad.write_text("x = = 1\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        write_config(bad, {"speculation": "off"})
    assert bad.read_text() == "x = = 1\n"  # untouched
    new = tmp_path / "new" / ".specrc"
    new.parent.mkdir()
    write_config(new, {"speculation": "off"})
    assert tomllib.loads(new.read_text()) == {"speculation": "off"}

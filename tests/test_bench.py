"""`spec-agent bench spec --quick --json`: one JSON object with the figures, greedy identical."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.embedded
@pytest.mark.slow
def test_bench_quick_json(embedded):
    r = subprocess.run([sys.executable, "-m", "agent.cli", "bench", "spec", "--quick", "--json",
                        "--tokens", "16"], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for key in ("speedup_vs_plain", "speedup_vs_mlx_lm", "acceptance_rate", "mean_accepted",
                "identical_to_plain", "lookup_speedup_vs_plain", "k"):
        assert key in out, key
    assert out["identical_to_plain"] is True
    assert out["lookup_identical_to_plain"] is True
    assert out["sampled_identical"] is True  # at T=0.7 the draft model writes plain's text
    assert 0 <= out["acceptance_rate"] <= 1 and out["k"] >= 1
    assert {w["workload"] for w in out["workloads"]} == {"code", "json", "prose", "edit"}
    assert all(w["mlx_lm_tps"] for w in out["workloads"])


def test_loop_detection():
    from agent.bench.common import loop_period

    assert loop_period([1, 2, 3] * 10) == 3
    assert loop_period([7] * 30) == 1
    assert loop_period(list(range(40))) == 0
    assert loop_period([1, 2] * 3) == 0  # too short to judge


def test_measure_auto_refuses_an_unknown_workload(capsys):
    from agent.bench import measure_auto

    assert measure_auto.main(["--workloads", "tool_call,nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown workload(s) nope" in err and "tool_call" in err

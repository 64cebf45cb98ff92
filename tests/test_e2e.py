"""End to end: the real CLI with the embedded model in a temp repo (-p, --yes, JSON output).

The model is tiny; these tests assert the run and its output are well-formed, not that the
task gets solved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from scripted import git, git_repo  # noqa: F401

from agent.core.git import is_agent_commit
from agent.exit_codes import for_stop_reason


@pytest.mark.embedded
def test_print_mode_json_in_a_temp_repo(embedded, git_repo):
    cmd = [sys.executable, "-m", "agent.cli", "-p", "Add a docstring to the function add in calc.py.",
           "-C", str(git_repo), "-m", "embedded", "--yes", "--max-turns", "3", "--max-tokens", "64",
           "--output-format", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=git_repo, env=dict(os.environ))
    obj = json.loads(r.stdout)  # exactly one JSON object on stdout
    # The tiny model may not finish in 3 turns of 64 tokens: exit 3 with the reason then.
    assert obj["type"] == "result" and obj["stop_reason"] in ("answered", "max_turns", "max_tokens")
    assert r.returncode == for_stop_reason(obj["stop_reason"]), r.stderr
    assert obj["is_error"] is (obj["stop_reason"] != "answered") and 1 <= obj["num_turns"] <= 3
    usage = obj["usage"]
    assert usage["output_tokens"] > 0 and usage["decode_tps"] > 0 and usage["model_turns"] == obj["num_turns"]
    assert 0.0 <= usage["cache_hit_rate"] <= 1.0 and "acceptance_rate" in usage
    if obj["num_turns"] > 1:
        assert usage["cache_hit_rate"] > 0  # later turns reuse the conversation's KV cache
    # every commit the run added is marked as the agent's, and nothing was left half-done
    for sha in git(git_repo, "log", "--format=%H").split()[:-1]:  # all but the initial commit
        assert is_agent_commit(git(git_repo, "log", "-1", "--format=%B", sha))

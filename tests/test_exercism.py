"""The Exercism harness without a model: grading, the two-try protocol with a scripted model,
resuming, and the fixed split."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from agent.config import Config
from agent.eval import exercism as exm
from agent.eval.exercism_run import read_results, run_all, run_exercise, summarize
from agent.eval.runner import eval_config
from scripted import ScriptedModel

FULL = exm.default_dir()  # all 100, where this checkout has them beside it
ROOT = FULL if FULL.is_dir() else Path(__file__).parent / "exercism"  # else five of them, vendored
NAMES = ["accumulate", "acronym", "bob", "error-handling"]  # error-handling: a support file


def _reply(ex: exm.Exercise, code: str) -> str:
    return f"{ex.solution[0]}\n```python\n{code.rstrip()}\n```\n"


def _example(ex: exm.Exercise) -> str:
    return (ex.folder / ex.example).read_text(encoding="utf-8")


def test_split_is_fixed_disjoint_and_covers_all():
    sp = exm.split()
    tune, check = set(sp["tune"]), set(sp["check"])
    assert len(tune) == len(check) == 50 and not tune & check
    here = {e.name for e in exm.load_exercises(ROOT, "all")}
    assert here <= tune | check and (ROOT != FULL or here == tune | check)
    assert set(sp["tune10"]) <= tune and len(sp["tune10"]) == 10
    assert sp["check20"] == sorted(check)[:20]


@pytest.mark.parametrize("name", NAMES)
def test_reference_passes_stub_fails(tmp_path, name):
    ex = exm.load_exercises(ROOT, name)[0]
    repo = tmp_path / "repo"
    exm.make_repo(ex, repo)
    passed, out = exm.grade(ex, repo)
    assert not passed and "failed" in out
    shutil.copyfile(ex.folder / ex.example, repo / ex.solution[0])
    passed, out = exm.grade(ex, repo)
    assert passed, out


def test_files_the_tests_need_are_kept_beside_them(tmp_path):
    """error-handling's tests import test_utils.py, which its config lists as neither solution
    nor test: it is in the repository as the tests are (out of git's view, restored after the
    agent) and beside them when graded."""
    ex = exm.load_exercises(ROOT, "error-handling")[0]
    assert ex.support == ("test_utils.py",)
    repo = tmp_path / "repo"
    exm.make_repo(ex, repo)
    from tools import git

    assert git.run(repo, "ls-files", timeout=30).stdout.split() == list(ex.solution)
    (repo / "test_utils.py").write_text("raise SystemExit\n")  # the agent's edit does not count
    exm.restore_tests(ex, repo)
    assert (repo / "test_utils.py").read_text() == (ex.folder / "test_utils.py").read_text()
    shutil.copyfile(ex.folder / ex.example, repo / ex.solution[0])
    (repo / "test_utils.py").write_text("raise SystemExit\n")
    passed, out = exm.grade(ex, repo)
    assert passed, out


def test_tampered_tests_do_not_count(tmp_path):
    ex = exm.load_exercises(ROOT, "acronym")[0]
    repo = tmp_path / "repo"
    exm.make_repo(ex, repo)
    (repo / ex.tests[0]).write_text("def test_nothing():\n    pass\n")
    (repo / "conftest.py").write_text(
        "import pytest\n\n@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_runtest_call(item):\n    pytest.skip('tampered')\n")
    (repo / "pytest.ini").write_text("[pytest]\naddopts = -k nothing\n")
    passed, _ = exm.grade(ex, repo)
    assert not passed
    exm.restore_tests(ex, repo)
    assert (repo / ex.tests[0]).read_bytes() == (ex.folder / ex.tests[0]).read_bytes()


def test_test_file_is_out_of_the_models_view(tmp_path):
    from tools import ToolContext
    from agent.core.attach import repo_files

    ex = exm.load_exercises(ROOT, "bob")[0]
    exm.make_repo(ex, tmp_path)
    assert repo_files(ToolContext(tmp_path, 10.0, in_git=True)) == [ex.solution[0]]


def test_a_hung_test_run_is_killed(tmp_path):
    code, _ = exm.run_command(["bash", "-c", "sleep 30 & sleep 30"], tmp_path, 0.5)
    assert code is None


def _cfg() -> Config:
    return eval_config(replace(Config(), sandbox="off"))


def test_two_tries_second_sees_the_test_output():
    ex = exm.load_exercises(ROOT, "armstrong-numbers")[0]
    model = ScriptedModel([_reply(ex, "def is_armstrong_number(number):\n    return False\n"),
                           _reply(ex, _example(ex))])
    r = run_exercise(ex, _cfg(), lambda ctx: model, 60.0)
    assert (r.passed_1, r.passed_2, r.tries, r.well_formed) == (False, True, 2, True)
    first = model.seen[0][-1]["content"]
    assert "Use the above instructions to modify the supplied files: armstrong_numbers.py" in first
    assert '<file path="armstrong_numbers.py">' in first
    assert "armstrong_numbers_test.py" not in first  # the tests are not shown in try 1
    second = model.seen[-1][-1]["content"]
    assert "The tests are correct" in second and "FAILED" in second


def test_one_try_only_sends_no_test_output():
    ex = exm.load_exercises(ROOT, "armstrong-numbers")[0]
    model = ScriptedModel([_reply(ex, "def is_armstrong_number(number):\n    return False\n"),
                           _reply(ex, _example(ex))])
    r = run_exercise(ex, _cfg(), lambda ctx: model, 60.0, n_tries=1)
    assert (r.passed_1, r.passed_2, r.tries) == (False, False, 1)
    assert len(model.seen) == 1 and "FAILED" in r.detail[0]["test_output"]


def test_with_a_test_command_the_agent_runs_the_tests_inside_the_try():
    """Not Aider's protocol (its model sees test output only in try 2): with test_cmd set,
    the agent's own lint-and-test loop runs the exercise's tests after each edit, and a
    worse fix is undone before the harness grades."""
    import sys

    ex = exm.load_exercises(ROOT, "armstrong-numbers")[0]
    wrong = _reply(ex, "def is_armstrong_number(number):\n    return False\n")
    worse = _reply(ex, "def is_armstrong_number(number):\n    return number.missing\n")
    model = ScriptedModel([wrong, worse, _reply(ex, _example(ex))])
    cfg = replace(_cfg(), test_cmd=f"{sys.executable} -m pytest -q -p no:cacheprovider",
                  max_fix_rounds=1)
    r = run_exercise(ex, cfg, lambda ctx: model, 60.0, n_tries=1)
    assert r.passed_1 is False and r.detail[0]["fed_back"] == ["test", "kept"]
    assert any(w.startswith("kept attempt 1") for w in r.detail[0]["warnings"])
    assert "The tests failed" in model.seen[1][-1]["content"]
    # the fix passed fewer tests than the first reply, so the first reply's file was graded
    assert r.detail[0]["solution"].strip() == "def is_armstrong_number(number):\n    return False"


def test_try_2_runs_the_failing_tests_it_was_shown():
    """Try 2's message is a test run's failures: the agent runs those tests again after each
    edit of that try (infer_test_cmd, sandboxed), so a reply that writes try 1's failed file
    out again is tested and sent back rather than ending the try."""
    import sys

    from tools import sandbox

    if not (sys.platform.startswith("linux") and sandbox.available()[0]):
        pytest.skip("no working sandbox: inferred test commands run only sandboxed")
    ex = exm.load_exercises(ROOT, "armstrong-numbers")[0]
    wrong = _reply(ex, "def is_armstrong_number(number):\n    return False\n")
    model = ScriptedModel([wrong, wrong, _reply(ex, _example(ex)), "Fixed."])
    cfg = replace(_cfg(), sandbox="auto")
    r = run_exercise(ex, cfg, lambda ctx: model, 120.0)
    assert (r.passed_1, r.passed_2) == (False, True)
    assert r.detail[0]["fed_back"] == [] and r.detail[1]["fed_back"] == ["unchanged", "test"]
    assert any("shows failing tests" in w for w in r.detail[1]["warnings"])
    assert "The tests failed" in model.seen[2][-1]["content"]
    # without it, try 2 ends on the rewrite
    model = ScriptedModel([wrong, wrong, _reply(ex, _example(ex))])
    r = run_exercise(ex, replace(cfg, infer_test_cmd=False), lambda ctx: model, 120.0)
    assert (r.passed_1, r.passed_2) == (False, False) and len(model.seen) == 2


def test_no_edit_is_not_well_formed_and_fails():
    ex = exm.load_exercises(ROOT, "bob")[0]
    model = ScriptedModel(["I would write a function.", "Still no code."])
    r = run_exercise(ex, _cfg(), lambda ctx: model, 60.0)
    assert (r.passed_1, r.passed_2, r.well_formed) == (False, False, False)


def test_resume_skips_recorded_exercises(tmp_path):
    out = tmp_path / "r.jsonl"
    exercises = exm.load_exercises(ROOT, "accumulate,acronym")
    replies = {e.name: _reply(e, _example(e)) for e in exercises}

    def model_for(ctx):
        name = next(n for n in replies if (ctx.root / (n + ".py")).exists())
        return ScriptedModel([replies[name]])

    first = run_all(exercises[:1], _cfg(), 60.0, out, model_for=model_for)
    assert [r.name for r in first] == ["accumulate"] and first[0].passed_1
    with out.open("a") as f:
        f.write('{"name": "torn')  # a run killed mid-write
    second = run_all(exercises, _cfg(), 60.0, out, model_for=model_for)
    assert [r.name for r in second] == ["acronym"]
    records = read_results(out)
    assert [r["name"] for r in records] == ["accumulate", "acronym"]
    s = summarize(records)["all"]
    assert (s["exercises"], s["pass_rate_1"], s["pass_rate_2"]) == (2, 1.0, 1.0)
    json.dumps(s)


def test_unknown_names_are_one_clear_error():
    with pytest.raises(exm.ExercismError, match="unknown exercise"):
        exm.load_exercises(ROOT, "no-such-exercise")


def test_summary_only_runs_nothing(tmp_path, capsys):
    from agent.cli import main

    out = tmp_path / "r.jsonl"
    ex = exm.load_exercises(ROOT, "accumulate")[0]
    run_all([ex], _cfg(), 60.0, out, model_for=lambda ctx: ScriptedModel([_reply(ex, _example(ex))]))
    before = out.read_text()
    argv = ["eval", "--suite", "exercism", "--dir", str(ROOT), "--subset", "accumulate,acronym",
            "--summary-only", "--json", "--out", str(out)]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["all"]["exercises"] == 1 and out.read_text() == before
    assert main(["eval", "--suite", "exercism", "--subset", "nope", "--dir", str(ROOT)]) == 2

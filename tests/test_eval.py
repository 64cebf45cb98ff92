"""The eval harness: every task's check can fail and can pass, and the runner scores a scripted
model that solves a task as passed and one that breaks it as failed."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from scripted import ScriptedModel, call, fake_stats

from agent.config import Config
from agent.core.backend import Capabilities
from agent.eval.report import summarize, table
from agent.eval.runner import eval_config, run_suite, run_task
from agent.eval.tasks import SUBSETS, TaskError, apply_reference, check, load_tasks, make_repo
from agent.events import TextDelta

TASKS = load_tasks()
CFG = eval_config(Config(sandbox="off"), max_turns=4)


def test_suite_covers_the_issue_categories_in_both_subsets():
    assert len(TASKS) >= 15
    cats = {"docstring", "rename", "bugfix", "parameter", "types", "config", "cli", "test",
            "dead_code", "question"}
    for subset in SUBSETS:
        assert {t.category for t in TASKS if t.subset == subset} == cats


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_check_fails_untouched_and_passes_on_reference(task, tmp_path):
    root = tmp_path / "repo"
    initial = make_repo(task, root)
    ok, why = check(task, root, "I did nothing.", initial)
    assert not ok and why
    answer = apply_reference(task, root)
    ok, why = check(task, root, answer, initial)
    assert ok, why


def solving_turns(task) -> list[str]:
    turns = [call("write_file", path=p, content=c) for p, c in task.reference_files.items()]
    return turns + [task.reference_answer or "Done."]


def breaking_turns(task) -> list[str]:
    first = next(iter(task.files))
    return [call("write_file", path=first, content="broken = True\n"), "Done, it is fixed."]


@pytest.mark.parametrize("name", ["off_by_one_slice", "rename_across_files", "question_constant"])
def test_runner_passes_a_solving_model_and_fails_a_breaking_one(name, tmp_path):
    task = load_tasks(names=[name])[0]
    good = run_task(task, CFG, lambda ctx: ScriptedModel(solving_turns(task)), 30, tmp_path)
    assert good.passed, good.detail
    assert good.stop_reason == "answered" and good.tool_calls == good.valid_calls
    assert good.turns == len(solving_turns(task))
    bad = run_task(task, CFG, lambda ctx: ScriptedModel(breaking_turns(task)), 30, tmp_path)
    assert not bad.passed and bad.detail


def test_invalid_calls_are_counted(tmp_path):
    task = load_tasks(names=["json_config"])[0]
    turns = ['<tool_call>{"name": "read_file", "arguments": {"pth": 1}}</tool_call>',
             '<tool_call>{"name": "nope"}</tool_call>', *solving_turns(task)]
    r = run_task(task, CFG, lambda ctx: ScriptedModel(turns), 30, tmp_path)
    assert r.passed and (r.tool_calls, r.valid_calls) == (3, 1) and r.validity == pytest.approx(1 / 3)


class StuckModel:
    """Writes forever until cancelled (a model that never ends its turn)."""

    capabilities = Capabilities()  # (agent/core/backend.py: nothing beyond turns)

    def generate(self, messages, cancel=None):
        while not cancel.cancelled:
            yield TextDelta("and again ", (1,))
            time.sleep(0.01)
        yield replace(fake_stats(), finish_reason="cancelled")


def test_a_task_past_its_time_limit_fails(tmp_path):
    task = load_tasks(names=["docstring_function"])[0]
    t0 = time.perf_counter()
    r = run_task(task, CFG, lambda ctx: StuckModel(), 0.3, tmp_path)
    assert time.perf_counter() - t0 < 10
    assert not r.passed and r.timed_out and r.stop_reason == "timeout"


def test_report_table_and_json(tmp_path):
    tasks = load_tasks(names=["docstring_function", "docstring_class"])
    scripts = iter([solving_turns(tasks[0]), breaking_turns(tasks[1])])
    results = run_suite(tasks, CFG, 30, model_for=lambda ctx: ScriptedModel(next(scripts)))
    s = summarize(results)
    assert s["tune"]["pass_rate"] == 1.0 and s["check"]["pass_rate"] == 0.0
    assert s["all"]["passed"] == 1 and s["all"]["tasks"] == 2
    text = table(results, s)
    assert "docstring_function" in text and "PASS" in text and "fail" in text
    json.dumps([r.to_dict() for r in results])


def test_unknown_task_and_bad_file(tmp_path, monkeypatch):
    with pytest.raises(TaskError, match="unknown task"):
        load_tasks(names=["no_such_task"])
    bad = tmp_path / "tasks"
    bad.mkdir()
    (bad / "broken.toml").write_text('category = "x"\n')
    monkeypatch.setattr("agent.eval.tasks.TASK_DIR", Path(bad))
    with pytest.raises(TaskError, match="broken.toml"):
        load_tasks()


class ForkFailingModel:
    capabilities = Capabilities()  # (agent/core/backend.py: nothing beyond turns)

    def generate(self, messages, cancel=None):
        raise BlockingIOError(11, "Resource temporarily unavailable")
        yield


def test_a_task_the_harness_cannot_run_is_recorded_and_the_suite_goes_on():
    tasks = load_tasks(names=["json_config", "docstring_class"])
    models = iter([ForkFailingModel(), ScriptedModel(solving_turns(tasks[1]))])
    results = run_suite(tasks, CFG, 30, model_for=lambda ctx: next(models))
    assert results[0].stop_reason == "crashed" and "BlockingIOError" in results[0].detail
    assert results[1].passed

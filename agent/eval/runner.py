"""Run eval tasks with the real agent core (the `Conversation` that `-p` drives) and check them.

Each task gets a fresh throwaway git repository, a `Runtime` built from the Config (the same
path `-p` takes), and a model from `model_for(ctx)`: the local engine (one loaded session
shared by every task, so prefix caches carry across tasks) or, in tests, a scripted model.
A task that runs past its time limit is cancelled between decoding rounds and fails.
Parallel runs use one process per worker, each with its own engine; the default is one
worker unless the machine has many cores. This module prints nothing itself (`log`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ..cancel import CancelToken
from ..config import Config
from .tasks import Task, check, make_repo

ModelFactory = Callable[[Any], Any]  # ToolContext -> a Model (agent.core.conversation.Model)


@dataclass
class TaskResult:
    name: str
    subset: str
    category: str
    passed: bool
    detail: str  # why the check failed ('' when it passed)
    stop_reason: str
    turns: int
    output_tokens: int
    tool_calls: int  # calls the model wrote
    valid_calls: int  # of those, calls that parsed and fit the tool's schema
    wall_s: float
    decode_tps: float
    acceptance_rate: float
    drafted: int
    accepted: int
    timed_out: bool
    answer: str

    @property
    def validity(self) -> float:
        return self.valid_calls / self.tool_calls if self.tool_calls else 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"tool_call_validity": self.validity}


def eval_config(cfg: Config, max_turns: int | None = None) -> Config:
    """The run's Config: no one to ask, so full-auto; commits on (the agent's normal path)."""
    out = replace(cfg, approval_mode="full-auto", auto_commit=True)
    return replace(out, max_turns=max_turns) if max_turns else out


def _calls(messages: list[dict[str, str]], start: int) -> tuple[int, int]:
    """(calls written, calls valid) in the assistant messages from index `start` on."""
    from ..core.callformat import parse_calls

    written = valid = 0
    for m in messages[start:]:
        if m["role"] == "assistant":
            calls = parse_calls(m["content"])
            written += len(calls)
            valid += sum(1 for c in calls if not c.error)
    return written, valid


def run_task(task: Task, cfg: Config, model_for: ModelFactory, time_limit_s: float,
             workdir: Path | None = None) -> TaskResult:
    """Run one task in a fresh repository under `workdir` (a temp dir when None)."""
    from ..events import AgentResult
    from ..runtime import Runtime

    base = Path(tempfile.mkdtemp(prefix=f"spec-agent-eval-{task.name}-", dir=workdir))
    root = base / "repo"
    try:
        initial = make_repo(task, root)
        rt = Runtime(cfg, root, warn=lambda m: None)
        rt.model = model_for(rt.ctx)
        conv = rt.new_conversation()
        start = len(conv.messages)
        cancel = CancelToken()
        timer = threading.Timer(time_limit_s, cancel.cancel)
        t0 = time.perf_counter()
        timer.start()
        result: AgentResult | None = None
        try:
            for ev in conv.send(task.instruction, cancel):
                if isinstance(ev, AgentResult):
                    result = ev
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        timed_out = cancel.cancelled
        answer = result.result if result is not None else ""
        passed, detail = check(task, root, answer, initial)
        if timed_out:
            passed, detail = False, f"time limit of {time_limit_s:.0f} s reached"
        usage = result.usage if result is not None else {}
        written, valid = _calls(conv.messages, start)
        return TaskResult(
            name=task.name, subset=task.subset, category=task.category, passed=passed,
            detail=detail, stop_reason="timeout" if timed_out else getattr(result, "stop_reason", ""),
            turns=result.num_turns if result is not None else 0,
            output_tokens=usage.get("output_tokens", 0), tool_calls=written, valid_calls=valid,
            wall_s=wall, decode_tps=usage.get("decode_tps", 0.0),
            acceptance_rate=usage.get("acceptance_rate", 0.0),
            drafted=usage.get("drafted_tokens", 0), accepted=usage.get("accepted_tokens", 0),
            timed_out=timed_out, answer=answer[:500])
    finally:
        shutil.rmtree(base, ignore_errors=True)


def crashed(task: Task, error: BaseException) -> TaskResult:
    """A failed result for a task the harness could not run to the end."""
    return TaskResult(
        name=task.name, subset=task.subset, category=task.category, passed=False,
        detail=f"harness error: {type(error).__name__}: {error}"[:200], stop_reason="crashed",
        turns=0, output_tokens=0, tool_calls=0, valid_calls=0, wall_s=0.0, decode_tps=0.0,
        acceptance_rate=0.0, drafted=0, accepted=0, timed_out=False, answer="")


def local_model_factory(cfg: Config) -> ModelFactory:
    """Load the engine the Config names once; each task gets a `LocalModel` on its session."""
    from ..backends.local import LocalModel
    from ..core.prompt import tools_for
    from ..runtime import Runtime, sampling_params, tool_format

    loader = Runtime(cfg, Path(tempfile.gettempdir()), warn=lambda m: None)
    loader.load()
    session = loader.session

    def model_for(ctx: Any) -> Any:
        return LocalModel(session, sampling_params(cfg), cfg.max_tokens, ctx,
                          constrain=cfg.constrained_calls, tool_choice=cfg.tool_choice,
                          tool_format=tool_format(cfg), tools=tools_for(cfg.edit_format))

    return model_for


def default_jobs() -> int:
    """Workers the machine has room for: one engine wants about four cores to itself."""
    return max(1, (os.cpu_count() or 1) // 4)


_WORKER: dict[str, Any] = {}


def _worker_run(task: Task, cfg: Config, time_limit_s: float) -> TaskResult:
    """One task in a worker process (loads that process's engine on first use)."""
    if "model_for" not in _WORKER:
        _WORKER["model_for"] = local_model_factory(cfg)
    return run_task(task, cfg, _WORKER["model_for"], time_limit_s)


def run_suite(tasks: list[Task], cfg: Config, time_limit_s: float, *,
              model_for: ModelFactory | None = None, jobs: int = 1,
              log: Callable[[str], None] = lambda m: None) -> list[TaskResult]:
    """Run `tasks` (in order with one job; in worker processes with more) and check each."""
    def note(r: TaskResult) -> None:
        log(f"  {r.name:24} {'PASS' if r.passed else 'fail'}  {r.turns} turns  "
            f"{r.wall_s:6.1f} s  {r.detail}")

    if jobs <= 1 or model_for is not None:
        model_for = model_for or local_model_factory(cfg)
        results = []
        for task in tasks:
            try:
                results.append(run_task(task, cfg, model_for, time_limit_s))
            except (OSError, RuntimeError) as e:  # the machine, not the agent: record, go on
                results.append(crashed(task, e))
            note(results[-1])
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_worker_run, t, cfg, time_limit_s) for t in tasks]
        results = []
        for f in futures:
            results.append(f.result())
            note(results[-1])
    return results

"""`spec-agent eval --suite exercism`: run the agent through Aider's two-try protocol.

Per exercise (agent/eval/exercism.py builds the repository and grades): try 1 sends the
instructions; the harness restores the test file and grades; on a failure try 2 sends the
test output in the same conversation and the harness grades again. One exercise has one time
limit for both tries (the conversation is cancelled between decoding rounds when it runs
out). A record per exercise is appended to the JSON-lines file as soon as it is done, so a
rerun with the same file skips what is recorded (except harness crashes, which are retried).

An edit is *well formed* when the model's reply changed a file: a whole-file block or an
edit/write call that applied. An exercise's `well_formed` is true when every try it had
applied an edit and none was rejected (Aider's "percent of responses well formed").
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from ..cancel import CancelToken
from ..config import Config
from .exercism import Exercise, grade, make_repo, restore_tests

EDIT_TOOLS = ("write_file", "edit_file")
MAX_WARNINGS = 20  # kept per try in a record


@dataclass
class Try:
    passed: bool = False
    edits: int = 0  # edits that applied
    rejected: int = 0  # edits that did not (a failed edit call, a whole-file block refused)
    stop_reason: str = ""
    output_tokens: int = 0
    input_tokens: int = 0
    decode_s: float = 0.0
    drafted: int = 0
    accepted: int = 0
    turns: int = 0
    test_output: str = ""
    reply: str = ""  # the model's last message of the try (clipped)
    solution: str = ""  # the solution file(s) as graded (clipped)
    # What went back to the model inside the try: a failed check's kind (syntax, ruff, names),
    # "refused" (a whole-file block not applied; fed back unless it quoted the file), "unchanged"
    # (a file written out again as it was); not fed back but recorded here: "kept" (the
    # message's best tested attempt written back over a worse last one).
    fed_back: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the agent's warnings (clipped)


@dataclass
class ExerciseResult:
    name: str
    subset: str
    passed_1: bool
    passed_2: bool
    well_formed: bool
    tries: int
    output_tokens: int
    input_tokens: int
    wall_s: float
    decode_tps: float
    acceptance_rate: float
    timed_out: bool
    error: str = ""  # a harness crash ('' normally)
    detail: list[dict[str, Any]] = field(default_factory=list)  # per try
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _one_try(conv, text: str, cancel: CancelToken) -> Try:
    from ..events import AgentResult, CheckRun, ToolCallFinished, Warning

    t = Try()
    for ev in conv.send(text, cancel):
        if isinstance(ev, Warning) and len(t.warnings) < MAX_WARNINGS:
            t.warnings.append(ev.message[:300])
        if isinstance(ev, ToolCallFinished) and ev.name in EDIT_TOOLS:
            t.edits += ev.ok
            t.rejected += not ev.ok
        elif isinstance(ev, Warning) and "not applied" in ev.message:
            t.rejected += 1
            t.fed_back.append("refused")
        elif isinstance(ev, Warning) and "out unchanged" in ev.message:
            t.fed_back.append("unchanged")
        elif isinstance(ev, Warning) and ev.message.startswith("kept attempt"):
            t.fed_back.append("kept")  # a worse last attempt undone (core/attempts.py)
        elif isinstance(ev, CheckRun) and ev.fed_back:
            t.fed_back.append(ev.kind)
        elif isinstance(ev, AgentResult):
            u = ev.usage
            t.stop_reason, t.turns, t.reply = ev.stop_reason, ev.num_turns, ev.result[:1500]
            t.output_tokens, t.input_tokens = u.get("output_tokens", 0), u.get("input_tokens", 0)
            tps = u.get("decode_tps", 0.0)
            t.decode_s = t.output_tokens / tps if tps else 0.0
            t.drafted, t.accepted = u.get("drafted_tokens", 0), u.get("accepted_tokens", 0)
    return t


def run_exercise(ex: Exercise, cfg: Config, model_for: Callable[[Any], Any], time_limit_s: float,
                 settings: dict[str, Any] | None = None, n_tries: int = 2) -> ExerciseResult:
    """The tries of one exercise (both, or the first only) in a fresh repository (removed
    afterwards)."""
    from ..runtime import Runtime

    base = Path(tempfile.mkdtemp(prefix=f"spec-agent-exercism-{ex.name}-"))
    repo = base / "repo"
    try:
        make_repo(ex, repo)
        rt = Runtime(cfg, repo, warn=lambda m: None)
        rt.model = model_for(rt.ctx)
        conv = rt.new_conversation()
        cancel = CancelToken()
        timer = threading.Timer(time_limit_s, cancel.cancel)
        t0 = time.perf_counter()
        timer.start()
        tries: list[Try] = []
        try:
            message = ex.instructions()
            for _ in range(n_tries):
                t = _one_try(conv, message, cancel)
                restore_tests(ex, repo)
                t.passed, t.test_output = grade(ex, repo)
                t.solution = _solution(ex, repo)
                tries.append(t)
                if t.passed or cancel.cancelled:
                    break
                message = ex.retry_message(t.test_output)
        finally:
            timer.cancel()
        return _result(ex, tries, time.perf_counter() - t0, cancel.cancelled, settings or {})
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _solution(ex: Exercise, repo: Path) -> str:
    parts = []
    for name in ex.solution:
        try:
            parts.append((repo / name).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            parts.append("")
    return "\n".join(parts)[:2000]


def _result(ex: Exercise, tries: list[Try], wall: float, timed_out: bool,
            settings: dict[str, Any]) -> ExerciseResult:
    out = sum(t.output_tokens for t in tries)
    decode_s = sum(t.decode_s for t in tries)
    drafted, accepted = sum(t.drafted for t in tries), sum(t.accepted for t in tries)
    detail = []
    for t in tries:
        d = asdict(t)
        d["test_output"] = t.test_output[-600:]
        detail.append(d)
    return ExerciseResult(
        name=ex.name, subset=ex.subset, passed_1=tries[0].passed,
        passed_2=any(t.passed for t in tries),
        well_formed=all(t.edits and not t.rejected for t in tries), tries=len(tries),
        output_tokens=out, input_tokens=sum(t.input_tokens for t in tries), wall_s=wall,
        decode_tps=out / decode_s if decode_s else 0.0,
        acceptance_rate=accepted / drafted if drafted else 0.0, timed_out=timed_out,
        detail=detail, settings=settings)


def crashed(ex: Exercise, error: BaseException, settings: dict[str, Any]) -> ExerciseResult:
    return ExerciseResult(ex.name, ex.subset, False, False, False, 0, 0, 0, 0.0, 0.0, 0.0, False,
                          error=f"{type(error).__name__}: {error}"[:300], settings=settings)


# ---- the results file ------------------------------------------------------------------------


def read_results(path: Path | None) -> list[dict[str, Any]]:
    """The records in a JSON-lines file (none when it does not exist; a torn last line, from
    a run killed mid-write, is skipped)."""
    if path is None or not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "name" in rec:
            out.append(rec)
    return out


def append_result(path: Path | None, r: ExerciseResult) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    torn = path.is_file() and path.stat().st_size and not path.read_bytes().endswith(b"\n")
    with path.open("a", encoding="utf-8") as f:  # a torn last line stays apart from this one
        f.write(("\n" if torn else "") + json.dumps(r.to_dict(), ensure_ascii=False) + "\n")


def pending(exercises: list[Exercise], records: list[dict[str, Any]]) -> list[Exercise]:
    """The exercises without a record (a crashed one is run again)."""
    done = {r["name"] for r in records if not r.get("error")}
    return [e for e in exercises if e.name not in done]


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Pass rates and totals per subset ("tune", "check") and over all the records (the last
    record of each exercise counts)."""
    last = {r["name"]: r for r in records}
    out: dict[str, Any] = {}
    for subset in ("tune", "check", "all"):
        rs = [r for r in last.values() if subset in ("all", r.get("subset"))]
        if not rs:
            continue
        n, tokens = len(rs), sum(r["output_tokens"] for r in rs)
        decode_s = sum(r["output_tokens"] / r["decode_tps"] for r in rs if r["decode_tps"] > 0)
        out[subset] = dict(
            exercises=n, passed_1=sum(r["passed_1"] for r in rs),
            passed_2=sum(r["passed_2"] for r in rs),
            pass_rate_1=sum(r["passed_1"] for r in rs) / n,
            pass_rate_2=sum(r["passed_2"] for r in rs) / n,
            well_formed_rate=sum(r["well_formed"] for r in rs) / n,
            output_tokens=tokens, input_tokens=sum(r["input_tokens"] for r in rs),
            wall_s=sum(r["wall_s"] for r in rs), decode_tps=tokens / decode_s if decode_s else 0.0,
            timeouts=sum(r["timed_out"] for r in rs), errors=sum(bool(r.get("error")) for r in rs))
    return out


def run_all(exercises: list[Exercise], cfg: Config, time_limit_s: float, out: Path | None, *,
            model_for: Callable[[Any], Any] | None = None, jobs: int = 1, n_tries: int = 2,
            settings: dict[str, Any] | None = None,
            log: Callable[[str], None] = lambda m: None) -> list[ExerciseResult]:
    """Run the exercises not yet in `out`, appending each record as it is done."""
    todo = pending(exercises, read_results(out))
    log(f"exercism: {len(todo)} to run, {len(exercises) - len(todo)} already in {out}")
    settings = settings or {}
    results: list[ExerciseResult] = []

    def done(r: ExerciseResult) -> None:
        append_result(out, r)
        results.append(r)
        log(f"  {r.name:24} try1 {'PASS' if r.passed_1 else 'fail'}  try2 "
            f"{'PASS' if r.passed_2 else 'fail'}  {r.wall_s:6.1f} s  {r.output_tokens} tok"
            + (f"  {r.error}" if r.error else "") + ("  timeout" if r.timed_out else ""))

    if not todo:
        return results
    if jobs <= 1 or model_for is not None:
        if model_for is None:
            from .runner import local_model_factory

            model_for = local_model_factory(cfg)
        for ex in todo:
            try:
                done(run_exercise(ex, cfg, model_for, time_limit_s, settings, n_tries))
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:  # the machine, not the agent
                done(crashed(ex, e, settings))
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_worker_run, ex, cfg, time_limit_s, settings, n_tries): ex
                   for ex in todo}
        for f in as_completed(futures):
            try:
                done(f.result())
            except Exception as e:  # noqa: BLE001 - a worker's crash is recorded, the run goes on
                done(crashed(futures[f], e, settings))
    return results


_WORKER: dict[str, Any] = {}


def _worker_run(ex: Exercise, cfg: Config, time_limit_s: float,
                settings: dict[str, Any], n_tries: int = 2) -> ExerciseResult:
    if "model_for" not in _WORKER:
        from .runner import local_model_factory

        _WORKER["model_for"] = local_model_factory(cfg)
    return run_exercise(ex, cfg, _WORKER["model_for"], time_limit_s, settings, n_tries)


SETTING_KEYS = ("model", "draft_model", "speculation", "drafter", "num_draft_tokens",
                "temperature", "top_p", "top_k", "min_p", "max_tokens", "max_turns",
                "edit_format", "tool_format",
                "auto_lint", "max_fix_rounds", "resample_temperature", "fix_mode", "test_cmd",
                "infer_test_cmd", "lead_refused")


def settings_of(cfg: Config) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name in SETTING_KEYS}


def table(summary: dict[str, Any]) -> str:
    lines = []
    for subset, s in summary.items():
        lines.append(
            f"{subset:6} {s['exercises']:3d} exercises  pass_rate_1 {s['pass_rate_1']:.1%} "
            f"({s['passed_1']})  pass_rate_2 {s['pass_rate_2']:.1%} ({s['passed_2']})  "
            f"well-formed {s['well_formed_rate']:.0%}  {s['output_tokens']} tokens  "
            f"{s['decode_tps']:.1f} tok/s  {s['wall_s']:.0f} s  timeouts {s['timeouts']}"
            + (f"  errors {s['errors']}" if s["errors"] else ""))
    return "\n".join(lines)


def main(args, cfg: Config) -> int:
    from .exercism import ExercismError, default_dir, load_exercises
    from .runner import eval_config

    exercises = load_exercises(args.dir or default_dir(), args.subset or "all")
    cfg = eval_config(cfg, args.max_turns)
    limit = args.time_limit or 600.0
    log = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    log(f"exercism: {len(exercises)} exercises, model {cfg.model}, {args.jobs or 1} job(s), "
        f"time limit {limit:.0f} s per exercise")
    t0 = time.perf_counter()
    if args.summary_only and args.out is None:
        raise ExercismError("--summary-only needs --out FILE.jsonl")
    n_tries = getattr(args, "tries", 2)
    results = [] if args.summary_only else run_all(
        exercises, cfg, limit, args.out, jobs=args.jobs or 1, n_tries=n_tries,
        settings=settings_of(cfg) | {"tries": n_tries}, log=log)
    names = {e.name for e in exercises}
    records = [r for r in read_results(args.out) if r["name"] in names] if args.out else \
        [r.to_dict() for r in results]
    summary = summarize(records)
    doc = dict(settings=settings_of(cfg), wall_s=time.perf_counter() - t0, summary=summary)
    print(json.dumps(doc, indent=1) if args.json else table(summary))
    return 0

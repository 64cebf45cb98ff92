"""`spec-agent eval`: run the task suite and report a table or one JSON object.

The summary gives pass rates per subset (`tune`: tasks used while improving the agent;
`check`: held out) and the totals of tokens, tool calls, wall time and speculation figures.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import fields
from typing import Any

from ..config import Config
from .runner import TaskResult, default_jobs, eval_config, run_suite
from .tasks import SUBSETS, load_tasks


def summarize(results: list[TaskResult]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for subset in (*SUBSETS, "all"):
        rs = [r for r in results if subset in ("all", r.subset)]
        if not rs:
            continue
        calls, valid = sum(r.tool_calls for r in rs), sum(r.valid_calls for r in rs)
        tokens, drafted = sum(r.output_tokens for r in rs), sum(r.drafted for r in rs)
        decode_s = sum(r.output_tokens / r.decode_tps for r in rs if r.decode_tps > 0)
        out[subset] = dict(
            tasks=len(rs), passed=sum(r.passed for r in rs),
            pass_rate=sum(r.passed for r in rs) / len(rs),
            turns=sum(r.turns for r in rs), output_tokens=tokens, tool_calls=calls,
            tool_call_validity=valid / calls if calls else 1.0,
            wall_s=sum(r.wall_s for r in rs), decode_tps=tokens / decode_s if decode_s else 0.0,
            acceptance_rate=sum(r.accepted for r in rs) / drafted if drafted else 0.0,
            timeouts=sum(r.timed_out for r in rs))
    return out


def table(results: list[TaskResult], summary: dict[str, Any]) -> str:
    head = (f"{'task':24} {'subset':6} {'result':6} {'turns':>5} {'tokens':>6} {'calls':>7} "
            f"{'wall s':>7} {'tok/s':>6} {'accept':>6}  stop / why")
    lines = [head, "-" * len(head)]
    for r in results:
        why = r.stop_reason + (f": {r.detail}" if r.detail else "")
        lines.append(
            f"{r.name:24} {r.subset:6} {'PASS' if r.passed else 'fail':6} {r.turns:5d} "
            f"{r.output_tokens:6d} {f'{r.valid_calls}/{r.tool_calls}':>7} {r.wall_s:7.1f} "
            f"{r.decode_tps:6.1f} {r.acceptance_rate:6.2f}  {why[:70]}")
    lines.append("")
    for subset, s in summary.items():
        lines.append(
            f"{subset:6} pass {s['passed']}/{s['tasks']} ({s['pass_rate']:.0%})  valid calls "
            f"{s['tool_call_validity']:.0%} of {s['tool_calls']}  {s['output_tokens']} tokens  "
            f"{s['decode_tps']:.1f} tok/s  acceptance {s['acceptance_rate']:.2f}  "
            f"{s['wall_s']:.0f} s  timeouts {s['timeouts']}")
    return "\n".join(lines)


def _settings(cfg: Config) -> dict[str, Any]:
    keys = ("model", "draft_model", "speculation", "drafter", "num_draft_tokens", "temperature",
            "max_tokens", "max_turns", "constrained_calls", "tool_choice")
    return {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name in keys}


def main(args, cfg: Config) -> int:
    names = [n for n in (args.tasks or "").split(",") if n]
    tasks = load_tasks(args.subset or "all", names or None)
    if args.time_limit is None:
        args.time_limit = 300.0
    cfg = eval_config(cfg, args.max_turns)
    jobs = args.jobs or default_jobs()
    log = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    log(f"eval: {len(tasks)} tasks, model {cfg.model}, {jobs} job(s), "
        f"time limit {args.time_limit:.0f} s per task")
    t0 = time.perf_counter()
    results = run_suite(tasks, cfg, args.time_limit, jobs=jobs, log=log)
    summary = summarize(results)
    doc = dict(settings=_settings(cfg), jobs=jobs, time_limit_s=args.time_limit,
               wall_s=time.perf_counter() - t0, summary=summary,
               tasks=[r.to_dict() for r in results])
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1) if args.json else table(results, summary))
    return 0

"""`spec-agent bench cache`: what the prefix caches save at about 4k tokens of context.

With the configured model (the default model unless `-m` names another) and drafter, it builds
an agent conversation as the agent would send it (its real system prompt, then read_file calls
whose results are files of this repository) of about 4k tokens (`run_bench(context=...)`), and
measures in one run:
- prefill speed of a fresh 1k-token prompt and of the fresh ≈4k-token prompt;
- time to first token of the next turn: cold (a fresh session, no caches), warm (the session
  that ran the previous turn) and in a new process that finds only the disk cache;
- the prompt tokens the warm turns re-read, and whether their outputs equal the cold one's.
The disk cache lives in a temporary folder: the user's prefix cache is neither read nor
changed. Not here: decoding speed (`bench spec`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FILES = ["agent/engine/step.py", "agent/engine/sampling.py", "agent/cancel.py",
         "agent/engine/speculative.py", "agent/engine/drafters.py", "agent/engine/session.py"]
TASK = "The engine's step module needs docstrings on every function. Read it and the modules " \
       "around it first."
NEXT = "Thanks. Now add the missing docstrings to agent/engine/step.py."
REPLY_TOKENS = 32


def conversation(render, context: int) -> list[dict]:
    """System prompt, task, then read_file calls and their results until the rendered prompt
    is about `context` tokens (the last file is cut to fit)."""
    from tools import ToolResult

    from ..core.callformat import CLOSE, OPEN, format_result
    from ..core.prompt import system_prompt

    msgs = [{"role": "system", "content": system_prompt(REPO)}, {"role": "user", "content": TASK}]
    for path in FILES:
        call = OPEN + json.dumps({"name": "read_file", "arguments": {"path": path}}) + CLOSE
        text = (REPO / path).read_text()
        base = len(render(msgs + [{"role": "assistant", "content": call},
                                  {"role": "user", "content": format_result("read_file", ToolResult(True, ""))}]))
        room = context - base
        if room < 64:
            break
        lines = text.splitlines(keepends=True)
        while len(render([{"role": "user", "content": "".join(lines)}])) > room + 8:
            lines = lines[: max(1, int(len(lines) * 0.9))]
        msgs += [{"role": "assistant", "content": call},
                 {"role": "user", "content": format_result("read_file", ToolResult(True, "".join(lines)))}]
    return msgs


def _turn(session, prompt: list[int], n: int = REPLY_TOKENS) -> dict:
    done = session.complete(prompt, max_tokens=n)
    stats = done.stats
    return dict(tokens=done.tokens, ttft_s=stats.ttft_s, cached=stats.cached_tokens,
                prompt_tokens=stats.prompt_tokens, prefill_tps=stats.prefill_tps)


def _session(cfg, target, draft, store):
    from ..engine import Session, SpecSettings, make_speculator

    def quiet(message: str) -> None:  # pairing warnings: the parent process showed them
        pass

    spec = make_speculator(SpecSettings.from_config(cfg), target, draft, warn=quiet)
    return Session(target, speculator=spec, store=store, kv_bits=cfg.kv_bits)


def _load(cfg):
    from .. import models

    target = models.load(cfg.model, device=cfg.device)
    draft = models.load(cfg.draft_model, device=cfg.device) if cfg.draft_model else None
    return target, draft


def _new_process(job: dict, root: Path) -> dict:
    """Run the warm turn in a fresh interpreter on the disk cache at `root`."""
    spec = root / "job.json"
    spec.write_text(json.dumps(job))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "agent.bench.cache", str(spec)], cwd=REPO,
                          capture_output=True, text=True, env=dict(os.environ))
    if proc.returncode != 0:
        raise RuntimeError(f"the new process failed: {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout)
    out["wall_s"] = time.perf_counter() - t0
    return out


def child(job_file: str) -> int:
    """The new process: load the models, open the store on the parent's folder, run one turn."""
    from ..config import Config
    from ..engine import PrefixStore

    job = json.loads(Path(job_file).read_text())
    cfg = Config(**job["cfg"])
    t0 = time.perf_counter()
    target, draft = _load(cfg)
    load_s = time.perf_counter() - t0
    store = PrefixStore(Path(job["root"]), cfg.prefix_cache_mb, cfg.disk_cache_mb)
    out = _turn(_session(cfg, target, draft, store), job["prompt"])
    out.update(load_s=load_s, tier=store.last_tier)
    print(json.dumps(out))
    return 0


def run_bench(cfg, context: int = 4096, log=lambda m: print(m, file=sys.stderr)) -> dict:
    from ..engine import PrefixStore, Session, loaded_blas, render_chat

    target, draft = _load(cfg)

    def render(messages: list[dict]) -> list[int]:
        return render_chat(target.tokenizer, messages)

    msgs = conversation(render, context - REPLY_TOKENS - 64)
    p1 = render(msgs)
    out = dict(model=target.name, draft_model=draft.name if draft else "", blas=loaded_blas(),
               kv_bits=cfg.kv_bits, speculation=cfg.speculation)
    log(f"conversation: {len(msgs)} messages, {len(p1)} tokens")

    first = _turn(Session(target), p1[:1024], n=1)  # plain fresh prefill of 1k tokens
    out["prefill_tps_1k"] = first["prefill_tps"]
    log(f"fresh 1k-token prefill: {first['prefill_tps']:.1f} tok/s")

    with tempfile.TemporaryDirectory(prefix="spec-agent-bench-cache-") as tmp:
        root = Path(tmp)
        store = PrefixStore(root, cfg.prefix_cache_mb, cfg.disk_cache_mb, log)
        warm_session = _session(cfg, target, draft, store)
        t1 = _turn(warm_session, p1)
        log(f"turn 1 (cold, {len(p1)} tokens): first token after {t1['ttft_s']:.2f} s")
        msgs += [{"role": "assistant", "content": target.tokenizer.decode(t1["tokens"])},
                 {"role": "user", "content": NEXT}]
        p2 = render(msgs)
        warm = _turn(warm_session, p2)
        log(f"turn 2 warm: first token after {warm['ttft_s']:.2f} s, "
            f"{len(p2) - warm['cached']} tokens re-read")
        store.flush()
        cold = _turn(_session(cfg, target, draft, None), p2)
        log(f"turn 2 cold ({len(p2)} tokens): first token after {cold['ttft_s']:.2f} s")
        fresh = None
        if store.disk is not None:
            fresh = _new_process(dict(cfg=asdict(cfg), root=str(root), prompt=p2), root)
            log(f"turn 2 in a new process: first token after {fresh['ttft_s']:.2f} s "
                f"(model load {fresh['load_s']:.1f} s, cache from {fresh['tier'] or 'nowhere'})")
        disk_bytes = store.disk.nbytes() if store.disk is not None else 0
    out.update(
        context_tokens=len(p2),
        prefill_tps_4k=cold["prefill_tps"],
        ttft_cold_s=cold["ttft_s"],
        ttft_warm_s=warm["ttft_s"],
        ttft_new_process_s=fresh["ttft_s"] if fresh else None,
        speedup=cold["ttft_s"] / warm["ttft_s"],
        speedup_new_process=cold["ttft_s"] / fresh["ttft_s"] if fresh else None,
        reprefilled_tokens=len(p2) - warm["cached"],
        reprefilled_tokens_new_process=len(p2) - fresh["cached"] if fresh else None,
        identical_output=warm["tokens"] == cold["tokens"],
        identical_output_new_process=fresh["tokens"] == cold["tokens"] if fresh else None,
        generated_tokens=len(cold["tokens"]),
        ttft_turn1_cold_s=t1["ttft_s"],
        new_process_model_load_s=fresh["load_s"] if fresh else None,
        new_process_wall_s=fresh["wall_s"] if fresh else None,
        disk_cache_mb=disk_bytes / 2**20,
    )
    return out


def main(args, cfg) -> int:
    result = run_bench(cfg)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"context {result['context_tokens']} tokens ({result['model']}, BLAS {result['blas']})")
    print(f"  prefill            1k: {result['prefill_tps_1k']:.1f} tok/s   "
          f"4k: {result['prefill_tps_4k']:.1f} tok/s")
    print(f"  first token  cold {result['ttft_cold_s']:.2f} s | warm {result['ttft_warm_s']:.2f} s "
          f"({result['speedup']:.1f}x, {result['reprefilled_tokens']} tokens re-read)")
    if result["ttft_new_process_s"] is not None:
        print(f"  new process        {result['ttft_new_process_s']:.2f} s "
              f"({result['speedup_new_process']:.1f}x, {result['reprefilled_tokens_new_process']} re-read)")
    print(f"  identical output   {result['identical_output']}")
    return 0


if __name__ == "__main__":
    sys.exit(child(sys.argv[1]))

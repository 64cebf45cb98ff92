"""Restricted draft head on the trained Qwen pair: step time, agreement, acceptance.

Usage: .venv/bin/python lab/probes/measure_draft_head.py steps|agree|spec [--reps R] [--tokens N]
  steps  draft step time (0.5B, DraftModel.propose with K=5, greedy, no confidence stop) on the
         pair bench's four prompts, full head vs first-N heads, interleaved so machine noise hits every configuration alike; also the 1.5B's 6-token
         verify pass, for the cost model.
  agree  teacher-forced greedy agreement of the 0.5B with the 1.5B's argmax at every position
         of stdlib source files: full head vs head restricted to [0, N) + ids seen so far.
         Tune files and check files are kept apart.
  spec   the pair bench's workloads decoded for real: plain, ours with the full draft head and
         ours with draft_vocab=N (adaptive K), greedy; acceptance, mean accepted, identity.
Runs under the CLI's BLAS (re-executes with OpenBLAS preloaded, as `spec-agent` does). Prints
JSON lines.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import os
import statistics
import sys
import time

from agent import store
from agent.engine.blas import ensure_openblas

TUNE_FILES = ("textwrap", "shlex", "heapq")
CHECK_FILES = ("bisect", "colorsys", "json.decoder")
NS = (8192, 16384, 32768, 65536)


def _load(name: str):
    from agent import models

    return models.load(name, device="cpu")


def _prompts(tok) -> dict[str, list[int]]:
    from agent.bench.pair import workloads
    from agent.engine.session import render_chat

    return {k: render_chat(tok, m, t) for k, (m, t) in workloads().items()}


def steps(reps: int) -> None:
    import mlx.core as mx

    from agent.engine.drafters import DraftModel
    from agent.engine.sampling import SamplingParams
    from agent.engine.step import forward, prefill

    draft = _load("qwen2.5-coder-0.5b")
    vocab = draft.vocab_size
    configs = [("full", 0)] + [(str(n), n) for n in NS]
    times: dict[str, list[float]] = {c[0]: [] for c in configs}
    for name, prompt in _prompts(draft.tokenizer).items():
        models = {}
        for label, n in configs:
            dm = DraftModel(draft, 0.0, vocab, n)
            if models:  # the prompt's KV is computed once: each drafter starts from a copy
                first = next(iter(models.values()))
                dm.adopt([copy.deepcopy(c) for c in first.cache.cache], first.fed)
            else:
                dm.prepare(prompt)
            models[label] = dm
        for r in range(reps + 1):
            for label, dm in models.items():
                t = time.perf_counter()
                dm.propose(prompt, 5, SamplingParams())
                if r:  # the first round per drafter warms up
                    times[label].append((time.perf_counter() - t) / 5)
        sizes = {k: (m.head.size if m.head else vocab) for k, m in models.items()}
        print(json.dumps({"workload": name, "prompt_tokens": len(prompt), "head_rows": sizes}))
    out = {k: round(1000 * statistics.median(v), 1) for k, v in times.items()}
    print(json.dumps({"draft_step_ms_median": out, "samples": len(times["full"]),
                      "load": os.getloadavg()}))
    del models, draft
    target = _load("qwen2.5-coder-1.5b")
    from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

    prompt = next(iter(_prompts(target.tokenizer).values()))
    cache = make_prompt_cache(target.model)
    prefill(target.model, prompt[:-1], cache)
    vt = []
    for r in range(reps + 1):
        t = time.perf_counter()
        mx.eval(forward(target.model, prompt[-1:] + [16, 17, 18, 19, 20], cache))
        if r:
            vt.append(time.perf_counter() - t)
        trim_prompt_cache(cache, 6)
    print(json.dumps({"verify6_ms_median": round(1000 * statistics.median(vt), 1),
                      "load": os.getloadavg()}))


def _file_ids(tok, module: str, n: int) -> list[int]:
    path = importlib.import_module(module).__file__
    return tok.encode(open(path, encoding="utf-8").read(), add_special_tokens=False)[:n]


def _argmax_rows(model, ids: list[int]):
    import mlx.core as mx
    import numpy as np

    return np.array(model(mx.array([ids]))[0].astype(mx.float32))


def agree(tokens: int) -> None:
    import numpy as np

    draft, target = _load("qwen2.5-coder-0.5b"), _load("qwen2.5-coder-1.5b")
    vocab = min(draft.vocab_size, target.vocab_size)
    for split, files in (("tune", TUNE_FILES), ("check", CHECK_FILES)):
        hits = {n: 0 for n in (0, *NS)}
        covered = {n: 0 for n in NS}
        total = 0
        for module in files:
            ids = _file_ids(target.tokenizer, module, tokens)
            want = _argmax_rows(target.model, ids).argmax(axis=-1)
            logits = _argmax_rows(draft.model, ids)[:, :vocab]
            first = np.full(vocab, len(ids), dtype=np.int64)  # first position of each id
            for pos in range(len(ids) - 1, -1, -1):
                first[ids[pos]] = pos
            col = np.arange(vocab)
            for t in range(len(ids) - 1):
                row = logits[t]
                hits[0] += int(row.argmax() == want[t])
                for n in NS:
                    allowed = (col < n) | (first <= t)
                    hits[n] += int(np.where(allowed, row, -np.inf).argmax() == want[t])
                    covered[n] += int(allowed[want[t]])
                total += 1
        print(json.dumps({"split": split, "files": files, "positions": total,
                          "agreement": {("full" if n == 0 else n): round(h / total, 4)
                                        for n, h in hits.items()},
                          "target_argmax_covered": {n: round(c / total, 4)
                                                    for n, c in covered.items()}}))


def spec(tokens: int, n_first: int) -> None:
    from agent.bench.common import timed
    from agent.engine.drafters import DraftModel
    from agent.engine.prefix_store import PrefixStore
    from agent.engine.session import Session
    from agent.engine.speculative import SpecPolicy, Speculator

    target, draft = _load("qwen2.5-coder-1.5b"), _load("qwen2.5-coder-0.5b")
    vocab = min(target.vocab_size, draft.vocab_size)
    policy = SpecPolicy(mode="on")
    specs = {label: Speculator(DraftModel(draft, 0.3, vocab, n), policy)
             for label, n in (("full", 0), (f"N{n_first}", n_first))}
    pstore = PrefixStore(None, memory_mb=4096, disk_mb=0)
    for name, prompt in _prompts(target.tokenizer).items():
        plain = timed(Session(target, store=pstore), prompt, tokens)
        row = {"workload": name, "plain_tps": round(plain.tps, 2)}
        for label, sp in specs.items():
            run = timed(Session(target, speculator=sp, store=pstore), prompt, tokens)
            s = run.stats
            row[label] = dict(tps=round(run.tps, 2), identical=run.tokens == plain.tokens,
                              acceptance_rate=round(s.acceptance_rate, 3),
                              mean_accepted=round(s.mean_accepted, 2), rounds=s.rounds,
                              drafted=s.drafted, accepted=s.accepted,
                              draft_s=round(s.draft_s, 2), verify_s=round(s.verify_s, 2))
        row["load"] = os.getloadavg()
        print(json.dumps(row), flush=True)


def main() -> None:
    warn = ensure_openblas("auto", store.home() / "blas-coretype.json")
    if warn:
        print(warn, file=sys.stderr)
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["steps", "agree", "spec"])
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=0)
    ap.add_argument("--n", type=int, default=32768)
    a = ap.parse_args()
    if a.what == "steps":
        steps(a.reps)
    elif a.what == "agree":
        agree(a.tokens or 640)
    else:
        spec(a.tokens or 48, a.n)


if __name__ == "__main__":
    main()

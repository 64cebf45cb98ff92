"""The ceiling of draft-model speculation on this machine: what one round costs against plain.

Usage: .venv/bin/python lab/probes/measure_ceiling.py [--reps R] [--ks 4,6,8,12]

Times, interleaved so machine noise hits each alike, on the pair bench's "function" prompt:
the 1.5B target's one-token step (plain decoding), its verify pass over K+1 tokens, and one
draft step of the 0.5B as the engine drafts (DraftModel with the default restricted head).
With c = draft step / target step and v(K) = verify(K+1) / target step, a round that drafts K
tokens and keeps all of them yields K+1 tokens for K*c + v(K) target steps, so no acceptance
rate can make draft-model speculation faster than (K+1) / (K*c + v(K)) times plain decoding;
as K grows this tends to 1/c. Prints one JSON line per measurement and one with the bounds.
Runs under the CLI's BLAS (re-executes with OpenBLAS preloaded, as `spec-agent` does).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from agent import store
from agent.engine.blas import ensure_openblas


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--ks", default="4,6,8,12")
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    warn = ensure_openblas("auto", store.home() / "blas-coretype.json")
    if warn:
        print(warn, file=sys.stderr)

    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

    from agent import models
    from agent.bench.pair import workloads
    from agent.config import Config
    from agent.engine.drafters import DraftModel
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import render_chat
    from agent.engine.step import forward, prefill

    target = models.load("qwen2.5-coder-1.5b", device="cpu")
    draft = models.load("qwen2.5-coder-0.5b", device="cpu")
    messages, tools = workloads()["function"]
    prompt = render_chat(target.tokenizer, messages, tools)
    cache = make_prompt_cache(target.model)
    prefill(target.model, prompt[:-1], cache)
    dm = DraftModel(draft, 0.0, min(draft.vocab_size, target.vocab_size), Config().draft_vocab)
    dm.prepare(prompt)
    filler = list(range(16, 16 + max(ks)))

    def target_pass(n: int) -> float:
        t = time.perf_counter()
        mx.eval(forward(target.model, prompt[-1:] + filler[: n - 1], cache))
        took = time.perf_counter() - t
        trim_prompt_cache(cache, n)
        return took

    def draft_step() -> float:
        t = time.perf_counter()
        dm.propose(prompt, 4, SamplingParams())
        return (time.perf_counter() - t) / 4

    times: dict[str, list[float]] = {"target_1": [], "draft_step": [],
                                     **{f"verify_{k + 1}": [] for k in ks}}
    for r in range(args.reps + 1):  # the first round warms up
        got = {"target_1": target_pass(1), "draft_step": draft_step(),
               **{f"verify_{k + 1}": target_pass(k + 1) for k in ks}}
        if r:
            for k, v in got.items():
                times[k].append(v)
    ms = {k: round(1000 * statistics.median(v), 1) for k, v in times.items()}
    print(json.dumps({"median_ms": ms, "reps": args.reps, "context": len(prompt),
                      "load": os.getloadavg()}))
    step = ms["target_1"]
    c = ms["draft_step"] / step
    bounds = {k: round((k + 1) / (k * c + ms[f"verify_{k + 1}"] / step), 2) for k in ks}
    print(json.dumps({"c": round(c, 3), "v": {k: round(ms[f"verify_{k + 1}"] / step, 2) for k in ks},
                      "max_speedup_all_accepted": bounds, "limit_1_over_c": round(1 / c, 2)}))


if __name__ == "__main__":
    main()

"""`--speculation auto` against plain decoding, one seed at a time, on the trained pair's bench
workloads: the check of "auto never loses" where one run is not enough.

At a temperature above 0 each run samples its own text, so a single run's ratio to plain
mixes the drafter's speed with the luck of the text (a sampled tool call that leaves the
schema the prompt holds gives lookup nothing to copy). Here every seed runs plain, then
`auto` with the chosen drafter, from the same seed and the same cached prompt, and the
ratios are reported per seed and as their mean and minimum. One JSON line per (workload,
seed) on stdout, a summary line per workload at the end.

Usage: .venv/bin/python -m agent.bench.measure_auto [--workloads tool_call,edit]
    [--drafter lookup|model|combined] [--seeds 1,2,3,4] [--tokens 48] [--temperature 0.7]
    [--top-p 0.95] [--mlx-lm-k 4] [--tree auto]

`--mlx-lm-k K`: mlx-lm's `speculative_generate_step` with the same draft model at K, from the
same seed after each of our runs (its own sampler; its ratio to plain beside ours).
`--tree auto`: our runs may draft token trees (`tree = "auto"`, sized as the CLI sizes them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import mlx.core as mx

from ..config import Config
from ..engine import (Combined, DraftModel, PrefixStore, PromptLookup, SamplingParams, Session,
                      SpecPolicy, Speculator, TreeBudget, render_chat)
from .common import timed
from .pair import _mlx_lm, load_pair, workloads


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="function,explain,tool_call,edit")
    ap.add_argument("--drafter", choices=("lookup", "model", "combined"), default="lookup")
    ap.add_argument("--seeds", default="1,2,3,4")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--mlx-lm-k", type=int, default=0, help="also run mlx-lm at this K (0: no)")
    ap.add_argument("--tree", choices=("off", "auto"), default="off")
    args = ap.parse_args(argv)
    known = workloads()
    names = args.workloads.split(",")
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(known)}",
              file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",")]
    from .. import store as model_store
    from ..engine import ensure_openblas

    # As the CLI does (may re-exec this module): without it the reference BLAS decodes ~3x
    # slower and speculation's verify pass costs ~K single steps.
    warning = ensure_openblas("auto", model_store.home() / "blas-coretype.json")
    if warning:
        print(warning, file=sys.stderr)

    def log(s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    target, draft, _ = load_pair("qwen-coder", log)
    cfg = Config()
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p)

    def speculator() -> Speculator:
        """A fresh speculator per run: each seed meets `auto` as a new session does."""
        lookup = PromptLookup()
        tree = TreeBudget(cap=cfg.tree_nodes) if args.tree == "auto" else None
        if args.drafter == "lookup":
            return Speculator(lookup, SpecPolicy(mode="auto"), tree)
        model = DraftModel(draft, cfg.draft_confidence,
                           min(target.vocab_size, draft.vocab_size), cfg.draft_vocab,
                           target.vocab_size)
        return Speculator(model if args.drafter == "model" else Combined(model, lookup),
                          SpecPolicy(mode="auto"), tree)

    store = PrefixStore(None, memory_mb=4096, disk_mb=0)
    for name in names:
        messages, tools = known[name]
        prompt = render_chat(target.tokenizer, messages, tools)
        mx.random.seed(0)
        timed(Session(target, store=store), prompt, 2, params)  # the prompt's KV, shared
        ratios = []
        for seed in seeds:
            mx.random.seed(seed)
            plain = timed(Session(target, store=store), prompt, args.tokens, params)
            spec = speculator()
            mx.random.seed(seed)
            ours = timed(Session(target, speculator=spec, store=store), prompt, args.tokens,
                         params)
            st = ours.stats
            ratios.append(ours.tps / plain.tps)
            theirs = None
            if args.mlx_lm_k:
                mx.random.seed(seed)
                theirs = _mlx_lm(target, draft, store, prompt, args.tokens, args.mlx_lm_k,
                                 params)[0].tps / plain.tps
            print(json.dumps(dict(
                workload=name, seed=seed, drafter=args.drafter, tree=args.tree, plain_tps=round(plain.tps, 3),
                auto_tps=round(ours.tps, 3), ratio=round(ratios[-1], 3), rounds=st.rounds,
                drafted=st.drafted, accepted=st.accepted, on_at_end=spec.enabled,
                off_reason=spec.off_reason, k=spec.k_for("model"),
                mlx_lm_ratio=None if theirs is None else round(theirs, 3),
                expected=None if spec.expected() is None else round(spec.expected()[0], 3))),
                flush=True)
        print(json.dumps(dict(workload=name, drafter=args.drafter, seeds=len(seeds),
                              temperature=args.temperature, tokens=args.tokens,
                              mean_ratio=round(statistics.fmean(ratios), 3),
                              min_ratio=round(min(ratios), 3))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

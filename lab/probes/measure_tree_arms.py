"""Chains, trees in every round, and trees measured against chains (`TreeArms`), side by
side on the trained pair's bench workloads, with the draft model alone and combined with
prompt lookup, in one process.

Per workload and seed: plain, the six configurations (their order reversed on odd seeds),
plain again; every run from the same seed and the same cached prompt. Speculators are kept
across workloads and seeds, as a session keeps them. One JSON line per (workload, seed) is
appended to `--out` (tok/s per configuration, the plain mean, rounds, drafted, accepted,
whether the output equals the first plain run's, and the measured arms' round counts per
drafter kind); progress on stderr.

Usage: .venv/bin/python lab/probes/measure_tree_arms.py --out FILE [--temperature 0.7]
    [--tokens 64] [--seeds 1,2]
"""

from __future__ import annotations

import argparse
import json
import sys

import mlx.core as mx


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python lab/probes/measure_tree_arms.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--seeds", default="0")
    args = ap.parse_args(argv)

    from agent.engine.blas import ensure_openblas

    ensure_openblas()
    from agent.config import Config
    from agent.engine.prefix_store import PrefixStore
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session, render_chat
    from agent.bench.common import timed
    from agent.bench.pair import load_pair, probe_cost, speculator, workloads

    def log(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    target, draft, _ = load_pair("qwen-coder", log)
    cost = probe_cost(target, Config().tree_nodes, log)
    t = args.temperature
    params = SamplingParams(temperature=t, top_p=args.top_p) if t > 0 else SamplingParams()
    trees = {"chain": "off", "tree": "every", "measured": "auto"}  # label -> `speculator`'s
    configs = {f"{'comb' if lookup else 'draft'}_{label}":
               speculator(target, draft, cost, lookup, tree)
               for lookup in (False, True) for label, tree in trees.items()}
    pstore = PrefixStore(None, memory_mb=4096, disk_mb=0)
    with open(args.out, "a") as out:
        for name, (messages, tools) in workloads().items():
            prompt = render_chat(target.tokenizer, messages, tools)
            for seed in (int(s) for s in args.seeds.split(",")):
                row: dict = dict(workload=name, seed=seed, temperature=t, tokens=args.tokens)
                mx.random.seed(seed)
                first = timed(Session(target, store=pstore), prompt, args.tokens, params)
                order = list(configs) if seed % 2 == 0 else list(reversed(configs))
                for label in order:
                    spec = configs[label]
                    mx.random.seed(seed)
                    r = timed(Session(target, speculator=spec, store=pstore), prompt,
                              args.tokens, params)
                    row[label] = r.tps
                    row[label + "_stats"] = dict(
                        rounds=r.stats.rounds, drafted=r.stats.drafted,
                        accepted=r.stats.accepted, same=r.tokens == first.tokens,
                        arms={kind: {a: v[2] for a, v in arms.sums.items()}
                              for kind, arms in spec.tree_arms.items()})
                mx.random.seed(seed)
                second = timed(Session(target, store=pstore), prompt, args.tokens, params)
                row["plain"] = (first.tps + second.tps) / 2
                print(json.dumps(row), file=out, flush=True)
                log(f"{name} seed {seed}: plain {row['plain']:.2f} tok/s, ratios "
                    + " ".join(f"{k} {row[k] / row['plain']:.2f}" for k in configs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

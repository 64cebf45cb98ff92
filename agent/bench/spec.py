"""`spec-agent bench spec`: plain vs speculative decoding, side by side, in one process.

Two parts, each interleaved per workload so machine noise hits every configuration alike:
1. Draft-model speculation on a *controlled pair* (see synthetic.py; lookup off): plain,
   ours (product defaults), ours at fixed K, and mlx-lm's `speculative_generate_step` at each fixed
   K in 2..8 on the same loaded models. Ratios are per workload and then averaged.
2. Prompt lookup with the embedded model on a copy-heavy edit, against plain decoding.
Reports ratios (the machines are noisy) and tok/s; `--json` prints one object.
`--pair qwen-coder` (the default when those store models are present, except with `--quick`)
runs the trained pair instead (bench_pair.py).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import mlx.core as mx

from .. import models
from ..engine import (DraftModel, LoadedModel, PromptLookup, SamplingParams, Session, SpecPolicy, Speculator,
                      loaded_blas, render_chat)
from .common import Run, forward_ms, loop_period, timed, totals

WORKLOADS = {
    "code": "Write a Python function that merges two sorted lists.",
    "json": 'Call the tool: {"name": "edit_file", "arguments": {"path": "src/app.py", "edits": []}}',
    "prose": "Explain in plain words why the sky is blue, for a curious child.",
    "edit": "Rename x to total:\ndef f(items):\n    x = 0\n    for i in items:\n        x += i\n    return x\n",
}
COPY_EDIT = '''Here is a file:

```python
import os
import sys


def read_config(path):
    """Read key=value lines from path into a dict."""
    result = {}
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition("=")
            result[key.strip()] = value.strip()
    return result


def main(argv):
    if len(argv) < 2:
        print("usage: config.py FILE")
        return 2
    config = read_config(argv[1])
    for key in sorted(config):
        print(key, config[key])
    return 0
```

Rewrite the whole file, unchanged except that the function main is renamed to run.'''


def _mlx_lm(target: LoadedModel, draft: LoadedModel, prompt: list[int], n: int, k: int,
            sampler=None) -> Run:
    from mlx_lm.generate import speculative_generate_step

    toks, first = [], 0.0
    for tok, _, _ in speculative_generate_step(mx.array(prompt), target.model, draft.model,
                                               num_draft_tokens=k, max_tokens=n,
                                               sampler=sampler):
        toks.append(int(tok))
        first = first or time.perf_counter()
    elapsed = time.perf_counter() - first
    return Run(toks, (len(toks) - 1) / elapsed if elapsed > 0 else 0.0)


def _prompt(lm: LoadedModel, text: str) -> list[int]:
    return render_chat(lm.tokenizer, [{"role": "user", "content": text}])


def bench_pair(target: LoadedModel, draft: LoadedModel, n: int, ks: list[int], log,
               fixed_k: int = 0, mode: str = "auto", repeat: int = 1) -> dict:
    """Part 1: draft-model speculation vs plain vs mlx-lm on every workload, interleaved.
    `mode`: ours runs the product's `--speculation` (auto: off where it does not pay).
    `repeat` > 1: ours and plain run again in turns (ours, plain, ...) and the workload's
    figures are medians (plain over every plain run, ours over its runs)."""
    from ..config import Config

    # Product defaults (rounds ended by the draft's confidence); persists across workloads.
    conf = 0.0 if fixed_k else Config().draft_confidence  # pinned K: exactly K, as mlx-lm
    ours = Speculator(DraftModel(draft, conf),
                      SpecPolicy(mode=mode, fixed_k=fixed_k))
    rows = []
    for name, text in WORKLOADS.items():
        prompt = _prompt(target, text)
        plain = timed(Session(target), prompt, n)
        mine = timed(Session(target, speculator=ours), prompt, n)
        theirs = {k: _mlx_lm(target, draft, prompt, n, k) for k in ks}
        plain2 = timed(Session(target), prompt, n)  # plain again: bracket the others in time
        base = (plain.tps + plain2.tps) / 2
        ours_runs, plain_runs = [mine.tps], [plain.tps, plain2.tps]
        for _ in range(repeat - 1):
            again = timed(Session(target, speculator=ours), prompt, n)
            ours_runs.append(again.tps)
            plain_runs.append(timed(Session(target), prompt, n).tps)
            if again.tokens != plain.tokens:
                mine = again  # the identity check sees every run
        if repeat > 1:
            base = statistics.median(plain_runs)
        s = mine.stats
        row = dict(workload=name, plain_tps=base, spec_tps=statistics.median(ours_runs),
                   spec_runs_tps=ours_runs, plain_runs_tps=plain_runs,
                   loop_period=loop_period(plain.tokens),
                   identical_to_plain=mine.tokens == plain.tokens,
                   mlx_lm_identical=all(r.tokens == plain.tokens for r in theirs.values()),
                   acceptance_rate=s.acceptance_rate, mean_accepted=s.mean_accepted, k=s.k,
                   drafted=s.drafted, accepted=s.accepted, rounds=s.rounds,
                   mlx_lm_tps={k: r.tps for k, r in theirs.items()})
        rows.append(row)
        log(f"  {name:6}{' (loops)' if row['loop_period'] else ''} plain {base:6.2f} tok/s | ours {row['spec_tps']:6.2f} "
            f"({row['spec_tps'] / base:.2f}x; K={s.k}, acceptance "
            f"{s.acceptance_rate:.2f}, mean {s.mean_accepted:.2f}) | mlx-lm "
            + " ".join(f"K{k}:{r.tps:.2f}" for k, r in theirs.items()))
    all_rows = rows
    rows = [r for r in rows if not r["loop_period"]] or all_rows  # headline: non-looping text
    tot = totals(rows, ks)  # mlx-lm's best fixed K across workloads, our acceptance
    best_k = tot["mlx_lm_best_k"]
    return dict(
        rows=all_rows,
        excluded_looping=[r["workload"] for r in all_rows if r not in rows],
        speedup_vs_plain=statistics.mean(r["spec_tps"] / r["plain_tps"] for r in rows),
        speedup_vs_mlx_lm=statistics.mean(r["spec_tps"] / r["mlx_lm_tps"][best_k] for r in rows),
        **tot,
        # every workload, looping ones too: the auto policy must never lose
        min_speedup_vs_plain=min(r["spec_tps"] / r["plain_tps"] for r in all_rows),
        speculation=mode,
        identical_to_plain=all(r["identical_to_plain"] for r in rows),
        k=ours.k_for("model"),
    )


def bench_sampled(target: LoadedModel, draft: LoadedModel, n: int, k: int, temp: float,
                  seeds: int, log) -> dict:
    """Temperature > 0 at one fixed K for both engines: ours (keyed draws, the draft drawing
    with the target's noise, so each seed's text is plain's: `sampled_identical`) vs mlx-lm's
    sample-and-match (its own text). Figures are summed over `seeds` seeded runs each,
    interleaved."""
    from mlx_lm.sample_utils import make_sampler

    prompt = _prompt(target, WORKLOADS["prose"])
    params = SamplingParams(temperature=temp)
    fixed = SpecPolicy(mode="on", fixed_k=k)
    time_plain = time_ours = time_theirs = 0.0
    drafted = accepted = 0
    same = True
    for seed in range(seeds):
        mx.random.seed(seed)
        plain = timed(Session(target), prompt, n, params)
        mx.random.seed(seed)
        mine = timed(Session(target, speculator=Speculator(
            DraftModel(draft, target_width=target.vocab_size), fixed)), prompt, n, params)
        mx.random.seed(seed)
        theirs = _mlx_lm(target, draft, prompt, n, k, sampler=make_sampler(temp=temp))
        time_plain += 1 / plain.tps
        time_ours += 1 / mine.tps
        time_theirs += 1 / theirs.tps
        drafted += mine.stats.drafted
        accepted += mine.stats.accepted
        same = same and mine.tokens == plain.tokens
    log(f"  T={temp:g}, K={k}, {seeds} seeds: plain {seeds / time_plain:.2f} tok/s | ours "
        f"{seeds / time_ours:.2f} (acceptance {accepted / max(drafted, 1):.2f}) | mlx-lm "
        f"{seeds / time_theirs:.2f}")
    return dict(sampled_temperature=temp, sampled_k=k, sampled_seeds=seeds,
                sampled_speedup_vs_plain=time_plain / time_ours,
                sampled_speedup_vs_mlx_lm=time_theirs / time_ours,
                sampled_acceptance_rate=accepted / max(drafted, 1), sampled_identical=same)


def bench_lookup(lm: LoadedModel, n: int, log, mode: str = "auto") -> dict:
    """Part 2: prompt lookup on a copy-heavy edit with the embedded model."""
    prompt = _prompt(lm, COPY_EDIT)
    plain = timed(Session(lm), prompt, n)
    spec = timed(Session(lm, speculator=Speculator(PromptLookup(), SpecPolicy(mode=mode))), prompt, n)
    plain2 = timed(Session(lm), prompt, n)
    base = (plain.tps + plain2.tps) / 2
    s = spec.stats
    log(f"  lookup: plain {base:.2f} tok/s | lookup {spec.tps:.2f} tok/s (acceptance "
        f"{s.acceptance_rate:.2f}, mean {s.mean_accepted:.2f}, K={s.k})")
    return dict(lookup_speedup_vs_plain=spec.tps / base, lookup_plain_tps=base,
                lookup_tps=spec.tps, lookup_acceptance_rate=s.acceptance_rate,
                lookup_mean_accepted=s.mean_accepted,
                lookup_identical_to_plain=spec.tokens == plain.tokens)


def controlled_models(quick: bool, eps: float, log) -> tuple[LoadedModel, LoadedModel, dict]:
    from .. import store
    from .synthetic import controlled_pair, train_tokenizer

    shape = (dict(hidden=256, draft_layers=1, extra_layers=8, vocab=2048) if quick else
             dict(hidden=1024, draft_layers=2, extra_layers=22, vocab=8192))
    root = store.home() / "bench" / ("h{hidden}-d{draft_layers}-x{extra_layers}-v{vocab}".format(**shape)
                                     + f"-e{eps:g}")
    tok = store.home() / "bench" / f"tokenizer-{shape['vocab']}"
    if not (tok / "tokenizer.json").is_file():
        log(f"training a {shape['vocab']}-token BPE tokenizer ...")
        train_tokenizer(tok, shape["vocab"])
    if not (root / "target" / "model.safetensors").is_file():
        log(f"building the controlled pair in {root} ...")
        controlled_pair(root, tok, hidden=shape["hidden"], draft_layers=shape["draft_layers"],
                        extra_layers=shape["extra_layers"], eps=eps)
    target = models.load(str(root / "target"), device="cpu")
    draft = models.load(str(root / "draft"), device="cpu")
    return target, draft, dict(shape, eps=eps)


def run_bench(quick: bool = False, tokens: int | None = None, eps: float = 0.5,
              fixed_k: int = 0, log=lambda m: print(m, file=sys.stderr), mode: str = "auto",
              repeat: int = 1) -> dict:
    """`fixed_k`: pin K for ours and run mlx-lm at that K only (equal-K comparison)."""
    n = tokens or (24 if quick else 64)
    ks = [fixed_k] if fixed_k else [2, 4] if quick else list(range(2, 9))
    target, draft, shape = controlled_models(quick, eps, log)
    ctx = _prompt(target, WORKLOADS["code"])
    t1, t8, d1 = (forward_ms(target, 1, ctx), forward_ms(target, 8, ctx), forward_ms(draft, 1, ctx))
    log(f"controlled pair {shape}: target step {t1:.1f} ms, 8-token verify {t8:.1f} ms, "
        f"draft step {d1:.1f} ms (cost ratio {d1 / t1:.3f}); BLAS: {loaded_blas()}")
    out = dict(pair=shape, blas=loaded_blas(), tokens=n, target_step_ms=t1,
               target_verify8_ms=t8, draft_step_ms=d1, draft_cost_ratio=d1 / t1)
    out.update(bench_pair(target, draft, n, ks, log, fixed_k, mode, repeat))
    out.update(bench_sampled(target, draft, n, out["mlx_lm_best_k"], 0.7, 1 if quick else 4, log))
    from .. import store

    if store.is_present():
        emb = models.load(None, device="cpu")
        out.update(bench_lookup(emb, 48 if quick else 160, log, mode))
    else:
        log(f"embedded model missing: lookup part skipped ({store.PULL_HINT})")
        out["lookup_speedup_vs_plain"] = None
    rows = out.pop("rows")
    out["workloads"] = rows
    return out


def _pick_pair(args) -> str:
    """--pair auto: the trained pair when both its models are in the store (not with --quick),
    else the controlled pair."""
    from .. import store
    from .pair import PAIR

    choice = getattr(args, "pair", None) or "auto"
    if choice != "auto":
        return choice
    names = PAIR["qwen-coder"]
    if not args.quick and all(store.is_present(store.lookup(n)) for n in names):
        return "qwen-coder"
    return "controlled"


def _mode(cfg) -> str:
    """Ours runs as `--speculation` says (auto by default); off would compare plain with
    itself, so it means auto here too."""
    return cfg.speculation if cfg.speculation in ("auto", "on") else "auto"


def main(args, cfg) -> int:
    from ..config import ConfigError

    pair = _pick_pair(args)
    if pair != "controlled":
        from .pair import print_report, run

        result = run(pair, args.tokens, cfg.num_draft_tokens, log=lambda m: print(m, file=sys.stderr),
                     mode=_mode(cfg), temperature=cfg.temperature, top_p=cfg.top_p,
                     repeat=args.repeat)
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            print_report(result)
        return 0
    if cfg.temperature > 0:
        raise ConfigError("--temperature with `bench spec`: give --pair qwen-coder (the "
                          "controlled pair measures T=0.7 at a fixed K already)")
    result = run_bench(quick=args.quick, tokens=args.tokens, eps=args.eps,
                       fixed_k=cfg.num_draft_tokens, mode=_mode(cfg), repeat=args.repeat)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"draft-model speculation (controlled pair, acceptance {result['acceptance_rate']:.2f}):")
    print(f"  speedup vs plain   {result['speedup_vs_plain']:.2f}x (speculation {result['speculation']}; "
          f"worst workload {result['min_speedup_vs_plain']:.2f}x)")
    print(f"  speedup vs mlx-lm  {result['speedup_vs_mlx_lm']:.2f}x (mlx-lm best K={result['mlx_lm_best_k']},"
          f" {result['mlx_lm_speedup_vs_plain']:.2f}x plain)")
    print(f"  mean accepted/round {result['mean_accepted']:.2f}; recommended K {result['k']}")
    print(f"  identical to plain  {result['identical_to_plain']}")
    print(f"  at T={result['sampled_temperature']:g}, K={result['sampled_k']}: "
          f"{result['sampled_speedup_vs_plain']:.2f}x plain, "
          f"{result['sampled_speedup_vs_mlx_lm']:.2f}x mlx-lm")
    if result.get("lookup_speedup_vs_plain") is not None:
        print(f"prompt lookup (embedded model, copy-heavy edit): "
              f"{result['lookup_speedup_vs_plain']:.2f}x plain")
    return 0

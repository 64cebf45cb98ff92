"""`spec-agent bench spec --pair qwen-coder`: the trained pair (Qwen2.5-Coder-1.5B-Instruct
target, 0.5B draft, both from the model store) on real coding workloads, in one process.

Per workload, interleaved so machine noise hits every configuration alike: plain decoding;
ours with the draft model (product defaults); ours combining the draft with prompt lookup; prompt
lookup alone; the draft alone and the combined drafter again with token trees (`tree = "auto"`,
the node budget from one verify-cost probe of the target made before the first workload, so no
run pays for it); mlx-lm's `speculative_generate_step` at each fixed K; plain again (the two
plain runs bracket the others and are averaged). The prompt's KV is computed once per
workload and model and shared through an in-memory prefix store, so only decoding differs
between runs; tok/s is decode speed (after the first token). `--repeat N` runs that whole turn
N times per workload and reports medians (plain over its 2N runs), with every run's figure
beside them.

Greedy by default, where every run must equal plain token for token. With `--temperature`
(and `--top-p`) every run samples at those settings, each from the same seed (`mx.random.seed`
before it). Our runs draw with keys of (seed, position), the draft model with the target's
noise (`sampling.keyed_noise`), so each of them writes plain's text for the seed too (up to
float rounding between a verify pass and a single step, which can flip a draw; `identical`
reports it); mlx-lm samples through its own sampler (`make_sampler`) and writes other texts.
Repeat r samples from seed + r, so the medians are over N texts. mlx-lm's acceptance is derived from what it
yields: draft tokens kept / (K x rounds), a round being each token of the target's own (or
as many as K-sized rounds the kept drafts need, where `max_tokens` cut the last one short).
"""

from __future__ import annotations

import inspect
import statistics
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import mlx.core as mx

from .. import models, store
from ..engine import (Combined, DraftModel, LoadedModel, ModelNotFoundError, PrefixStore, PromptLookup,
                      SamplingParams, Session, SpecPolicy, Speculator, TreeBudget, VerifyCost, render_chat)
from .common import Run, timed, totals

PAIR = {"qwen-coder": ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")}
EDIT_TOOL = {
    "type": "function",
    "function": {
        "name": "edit_file",
        "description": "Replace one exact snippet of a file with new text.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path relative to the repo"},
                "old": {"type": "string", "description": "exact text to replace"},
                "new": {"type": "string", "description": "replacement text"},
            },
            "required": ["path", "old", "new"],
        },
    },
}


def workloads() -> dict[str, tuple[list[dict], list[dict] | None]]:
    """name -> (chat messages, tools): write a function, explain real code, a JSON tool call,
    a copy-heavy edit of a real file of this project."""
    errors_py = (Path(__file__).parents[1] / "engine" / "errors.py").read_text()
    dedent_src = inspect.getsource(textwrap.dedent)
    user = lambda text: [{"role": "user", "content": text}]  # noqa: E731
    return {
        "function": (user("Write a Python function that merges two sorted lists into one "
                          "sorted list."), None),
        "explain": (user(f"Explain what this function does, step by step:\n```python\n"
                         f"{dedent_src}```"), None),
        "tool_call": (user("In src/app.py, rename the function `main` to `run` (it is defined "
                           "as `def main(argv):`). Use the edit_file tool."), [EDIT_TOOL]),
        "edit": (user(f"Here is agent/engine/errors.py:\n```python\n{errors_py}```\nRewrite the "
                      "whole file, unchanged except that PairingError is renamed to "
                      "DraftPairingError."), None),
    }


def load_pair(name: str, log) -> tuple[LoadedModel, LoadedModel, dict]:
    target_name, draft_name = PAIR[name]
    for n in (target_name, draft_name):
        if not store.is_present(store.lookup(n)):
            raise ModelNotFoundError(f"model '{n}' is not downloaded yet; fetch it with: "
                                     f"{store.PULL_HINT} {n}")
    times = {}
    out = []
    for n in (target_name, draft_name):
        t = time.perf_counter()
        out.append(models.load(n, device="cpu"))
        times[n] = time.perf_counter() - t
        log(f"loaded {n} in {times[n]:.1f} s ({out[-1].source}, {out[-1].nbytes / 1e9:.2f} GB)")
    return out[0], out[1], dict(name=name, target=target_name, draft=draft_name, load_s=times)


def _mlx_lm(target: LoadedModel, draft: LoadedModel, pstore: PrefixStore, prompt: list[int],
            n: int, k: int, params: SamplingParams = SamplingParams()) -> tuple[Run, int]:
    """mlx-lm's speculative decoding from the shared prompt KV; (run, tokens from the draft).
    `params`: its sampler at the same temperature and top-p (greedy at 0)."""
    from mlx_lm.sample_utils import make_sampler

    from mlx_lm.generate import speculative_generate_step
    from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

    tcache, tn = pstore.fetch_nearest(pstore.key_for(target), prompt[:-1])
    dcache, dn = pstore.fetch_nearest(pstore.key_for(draft), prompt[:-1])
    if tcache is None or dcache is None:  # nothing shared: start from empty caches
        tcache, dcache, tn, dn = make_prompt_cache(target.model), make_prompt_cache(draft.model), 0, 0
    start = min(tn, dn)
    trim_prompt_cache(tcache, tn - start)
    trim_prompt_cache(dcache, dn - start)
    toks, kept, first = [], 0, 0.0
    for tok, _, from_draft in speculative_generate_step(
            mx.array(prompt[start:]), target.model, draft.model, num_draft_tokens=k,
            max_tokens=n, prompt_cache=tcache + dcache,
            sampler=make_sampler(temp=params.temperature, top_p=params.top_p)):
        toks.append(int(tok))
        kept += bool(from_draft)
        first = first or time.perf_counter()
    elapsed = time.perf_counter() - first
    return Run(toks, (len(toks) - 1) / elapsed if elapsed > 0 else 0.0), kept


def _mlx_acceptance(run: Run, kept: int, k: int) -> float:
    """Draft tokens mlx-lm kept over those it drafted: each round yields its kept drafts and
    one token of the target's, so rounds = yielded - kept, except that `max_tokens` can cut
    the last round before its target token (a round keeps at most K drafts)."""
    rounds = max(len(run.tokens) - kept, -(-kept // k))
    return kept / (k * rounds) if rounds > 0 else 0.0


def _merged(runs: list[Run]) -> Run:
    """Repeats of one configuration as one run: the median tok/s, the first run's tokens (the
    identity check looks at every run), drafts, acceptances and rounds summed."""
    first = runs[0]
    if len(runs) == 1:
        return first
    stats = first.stats
    if stats is not None:
        stats = replace(stats, drafted=sum(r.stats.drafted for r in runs),
                        accepted=sum(r.stats.accepted for r in runs),
                        rounds=sum(r.stats.rounds for r in runs), k=runs[-1].stats.k)
    return Run(first.tokens, statistics.median(r.tps for r in runs), stats)


def _row(name: str, reps: list[tuple[dict, dict, dict]]) -> dict:
    """One workload's figures over its repeats, each (our runs by label, mlx-lm's runs by K,
    mlx-lm's kept drafts by K): tok/s are medians (plain over both plain runs of every
    repeat), counts are summed."""
    labels = ("ours", "combined", "lookup", "tree", "combined_tree")
    runs = {label: _merged([rep[0][label] for rep in reps]) for label in labels}
    plain = reps[0][0]["plain"]
    base = statistics.median(rep[0][p].tps for rep in reps for p in ("plain", "plain2"))
    ks = list(reps[0][1])
    theirs = {k: _merged([rep[1][k] for rep in reps]) for k in ks}
    kept = {k: sum(rep[2][k] for rep in reps) for k in ks}
    acc = {k: statistics.mean(_mlx_acceptance(rep[1][k], rep[2][k], k) for rep in reps)
           for k in ks}
    # each repeat against its own plain run (sampled repeats draw from seeds of their own)
    same_all = lambda label: all(rep[0][label].tokens == rep[0]["plain"].tokens  # noqa: E731
                                 for rep in reps)
    s, c, lk = runs["ours"].stats, runs["combined"].stats, runs["lookup"].stats
    t, ct = runs["tree"].stats, runs["combined_tree"].stats
    per_round = lambda st: st.drafted / st.rounds if st.rounds else 0.0  # noqa: E731
    row = dict(
        workload=name, plain_tps=base, spec_tps=runs["ours"].tps,
        combined_tps=runs["combined"].tps, lookup_tps=runs["lookup"].tps,
        tree_tps=runs["tree"].tps, combined_tree_tps=runs["combined_tree"].tps,
        identical_to_plain=same_all("ours"), combined_identical=same_all("combined"),
        lookup_identical=same_all("lookup"), plain_repeatable=same_all("plain2"),
        tree_identical=same_all("tree"), combined_tree_identical=same_all("combined_tree"),
        tree_mean_accepted=t.mean_accepted, tree_nodes_per_round=per_round(t),
        tree_rounds=t.rounds, combined_tree_mean_accepted=ct.mean_accepted,
        combined_tree_nodes_per_round=per_round(ct), chain_nodes_per_round=per_round(s),
        mlx_lm_identical=all(rep[1][k].tokens == rep[0]["plain"].tokens
                             for rep in reps for k in ks),
        acceptance_rate=s.acceptance_rate, mean_accepted=s.mean_accepted, k=s.k,
        drafted=s.drafted, accepted=s.accepted, rounds=s.rounds,
        combined_acceptance_rate=c.acceptance_rate, combined_mean_accepted=c.mean_accepted,
        lookup_acceptance_rate=lk.acceptance_rate, lookup_mean_accepted=lk.mean_accepted,
        mlx_lm_tps={k: r.tps for k, r in theirs.items()}, mlx_lm_draft_kept=kept,
        mlx_lm_acceptance=acc, tokens=len(plain.tokens),
    )
    if len(reps) > 1:  # every run's tok/s, in repeat order
        row["runs_tps"] = {label: [rep[0][label].tps for rep in reps]
                           for label in ("plain", *labels, "plain2")}
        row["mlx_lm_runs_tps"] = {k: [rep[1][k].tps for rep in reps] for k in ks}
    return row


def bench_trained(target: LoadedModel, draft: LoadedModel, n: int, ks: list[int], log,
                  fixed_k: int = 0, mode: str = "auto",
                  params: SamplingParams = SamplingParams(), seed: int = 0,
                  repeat: int = 1) -> dict:
    """Every configuration on every workload, in turns; `repeat` > 1 runs the whole turn
    again per workload (sampled: repeat r from seed + r, so each repeat is another text;
    greedy: the same text, for the machine's noise) and reports medians."""
    from ..config import Config

    cost = probe_cost(target, Config().tree_nodes, log)

    def ours(with_lookup: bool, trees: bool) -> Speculator:
        return speculator(target, draft, cost, with_lookup, "auto" if trees else "off", mode,
                          fixed_k)

    draft_only, combined = ours(False, False), ours(True, False)
    draft_tree, combined_tree = ours(False, True), ours(True, True)
    lookup = Speculator(PromptLookup(), SpecPolicy(mode=mode))

    def seeded(s, run, *a):
        mx.random.seed(s)  # every run of a repeat samples from the same seed
        return run(*a)

    pstore = PrefixStore(None, memory_mb=4096, disk_mb=0)
    rows = []
    for name, (messages, tools) in workloads().items():
        prompt = render_chat(target.tokenizer, messages, tools)
        reps = []
        for r in range(max(repeat, 1)):
            s = seed if params.greedy else seed + r
            t = time.perf_counter()
            runs = {"plain": seeded(s, timed, Session(target, store=pstore), prompt, n, params)}
            if not r:
                prefill_s = time.perf_counter() - t
            for label, spec in (("ours", draft_only), ("combined", combined), ("lookup", lookup),
                                ("tree", draft_tree), ("combined_tree", combined_tree)):
                runs[label] = seeded(s, timed, Session(target, speculator=spec, store=pstore),
                                     prompt, n, params)
            theirs, kept = {}, {}
            for k in ks:
                theirs[k], kept[k] = seeded(s, _mlx_lm, target, draft, pstore, prompt, n, k,
                                            params)
            runs["plain2"] = seeded(s, timed, Session(target, store=pstore), prompt, n, params)
            reps.append((runs, theirs, kept))
        row = _row(name, reps)
        row.update(prompt_tokens=len(prompt), first_run_s=prefill_s, repeats=len(reps),
                   text=target.tokenizer.decode(reps[0][0]["plain"].tokens))
        rows.append(row)
        log(f"  {name:9} plain {row['plain_tps']:5.2f} tok/s | ours {row['spec_tps']:5.2f} "
            f"(acc {row['acceptance_rate']:.2f}, mean {row['mean_accepted']:.2f}, K={row['k']}) | "
            f"ours+lookup {row['combined_tps']:5.2f} | lookup {row['lookup_tps']:5.2f} | tree "
            f"{row['tree_tps']:5.2f} ({row['tree_nodes_per_round']:.1f} nodes, mean "
            f"{row['tree_mean_accepted']:.2f}) | tree+lookup {row['combined_tree_tps']:5.2f} | mlx-lm "
            + " ".join(f"K{k}:{v:.2f}" for k, v in row["mlx_lm_tps"].items())
            + f" | identical {row['identical_to_plain']}"
            + ("" if params.greedy else
               " | mlx-lm acc " + " ".join(f"K{k}:{a:.2f}" for k, a in row["mlx_lm_acceptance"].items())))
    out = summarize(rows, ks, draft_only.k_for("model"))
    out["verify_cost_s"] = {n: round(v, 4) for n, v in sorted(cost.seconds.items())}
    if not params.greedy:  # mlx-lm's sampler writes its own text: identity is not a measure
        out.update(mlx_lm_identical=None)
    return out


def speculator(target: LoadedModel, draft: LoadedModel, cost: VerifyCost, with_lookup: bool,
               tree: str = "off", mode: str = "auto", fixed_k: int = 0) -> Speculator:
    """A speculator with its own draft model as `spec-agent` runs one by default (restricted
    head, rounds ended by the draft's confidence unless K is pinned: then exactly K, as
    mlx-lm), combined with prompt lookup or not; `tree`: "off" (chains), "auto" (trees sized
    by the probed `cost`, measured against chains round by round) or "every" (a tree in every
    round that can branch)."""
    from ..config import Config

    cfg = Config()
    conf = 0.0 if fixed_k else cfg.draft_confidence
    dm = DraftModel(draft, conf, min(target.vocab_size, draft.vocab_size), cfg.draft_vocab,
                    target.vocab_size)
    budget = None if tree == "off" else TreeBudget(
        cap=cfg.tree_nodes, cost=VerifyCost(cost.seconds), measured=tree == "auto")
    return Speculator(Combined(dm, PromptLookup()) if with_lookup else dm,
                      SpecPolicy(mode=mode, fixed_k=fixed_k), budget)


def probe_cost(target: LoadedModel, cap: int, log) -> VerifyCost:
    """The target's verify cost for passes of 1, 2, 4, ... up to cap+1 positions, measured once
    (what `tree = "auto"` probes at its first round)."""
    from ..engine import make_cache

    cost = VerifyCost()
    cost.probe(target.model, lambda: make_cache(target.model), cap + 1)
    one = cost.seconds[1]
    log("verify cost (x one position): " + ", ".join(
        f"{n}: {s / one:.2f}" for n, s in sorted(cost.seconds.items())))
    return cost


def summarize(rows: list[dict], ks: list[int], k: int) -> dict:
    """Headline figures: per-workload ratios averaged; mlx-lm's best fixed K by mean ratio."""
    ratio = lambda key: statistics.mean(r[key] / r["plain_tps"] for r in rows)  # noqa: E731
    tot = totals(rows, ks)
    best_k = tot["mlx_lm_best_k"]
    return dict(
        workloads=rows,
        speedup_vs_plain=ratio("spec_tps"),
        speedup_vs_mlx_lm=statistics.mean(r["spec_tps"] / r["mlx_lm_tps"][best_k] for r in rows),
        **tot,
        mlx_lm_acceptance_best_k=statistics.mean(r["mlx_lm_acceptance"][best_k] for r in rows),
        min_speedup_vs_plain=min(min(r[k] for k in ("spec_tps", "combined_tps", "lookup_tps",
                                                    "tree_tps", "combined_tree_tps"))
                                 / r["plain_tps"] for r in rows),
        combined_speedup_vs_plain=ratio("combined_tps"),
        combined_speedup_vs_mlx_lm=statistics.mean(r["combined_tps"] / r["mlx_lm_tps"][best_k]
                                                   for r in rows),
        lookup_speedup_vs_plain=ratio("lookup_tps"),
        tree_speedup_vs_plain=ratio("tree_tps"),
        tree_speedup_vs_mlx_lm=statistics.mean(r["tree_tps"] / r["mlx_lm_tps"][best_k]
                                               for r in rows),
        combined_tree_speedup_vs_plain=ratio("combined_tree_tps"),
        combined_tree_speedup_vs_mlx_lm=statistics.mean(r["combined_tree_tps"]
                                                        / r["mlx_lm_tps"][best_k] for r in rows),
        identical_to_plain=all(r["identical_to_plain"] and r["combined_identical"]
                               and r["lookup_identical"] and r["tree_identical"]
                               and r["combined_tree_identical"] for r in rows),
        mlx_lm_identical=all(r["mlx_lm_identical"] for r in rows),
        k=k,
    )


def run(pair: str, tokens: int | None, fixed_k: int, log, mode: str = "auto",
        temperature: float = 0.0, top_p: float = 1.0, seed: int = 0, repeat: int = 1) -> dict:
    from ..engine import loaded_blas

    n = tokens or 48
    ks = [fixed_k] if fixed_k else list(range(2, 7))
    params = SamplingParams(temperature=temperature, top_p=top_p)
    target, draft, info = load_pair(pair, log)
    log(f"trained pair {pair}: {n} tokens per workload, mlx-lm K={ks}, speculation {mode}, "
        f"temperature {temperature:g}, top-p {top_p:g}, seed {seed}, {repeat} repeat(s); "
        f"BLAS: {loaded_blas()}")
    out = dict(pair=info, blas=loaded_blas(), tokens=n, speculation=mode,
               temperature=temperature, top_p=top_p, seed=seed, repeat=repeat)
    out.update(bench_trained(target, draft, n, ks, log, fixed_k, mode, params, seed, repeat))
    return out


def print_report(r: dict) -> None:
    p = r["pair"]
    print(f"draft-model speculation, trained pair {p['target']} <- {p['draft']} "
          f"(acceptance {r['acceptance_rate']:.2f}, mean accepted {r['mean_accepted']:.2f}):")
    print(f"  ours vs plain           {r['speedup_vs_plain']:.2f}x")
    print(f"  ours vs mlx-lm best K   {r['speedup_vs_mlx_lm']:.2f}x (mlx-lm K={r['mlx_lm_best_k']}: "
          f"{r['mlx_lm_speedup_vs_plain']:.2f}x plain)")
    print(f"  ours+lookup vs plain    {r['combined_speedup_vs_plain']:.2f}x "
          f"({r['combined_speedup_vs_mlx_lm']:.2f}x mlx-lm best K)")
    print(f"  lookup alone vs plain   {r['lookup_speedup_vs_plain']:.2f}x")
    print(f"  ours, trees vs plain    {r['tree_speedup_vs_plain']:.2f}x "
          f"({r['tree_speedup_vs_mlx_lm']:.2f}x mlx-lm best K); with lookup "
          f"{r['combined_tree_speedup_vs_plain']:.2f}x ({r['combined_tree_speedup_vs_mlx_lm']:.2f}x)")
    print(f"  worst workload vs plain {r['min_speedup_vs_plain']:.2f}x (speculation {r['speculation']})")
    if r.get("temperature"):
        print(f"  at temperature {r['temperature']:g}, top-p {r['top_p']:g}, seed {r['seed']}: "
              f"acceptance ours {r['acceptance_rate']:.2f}, mlx-lm K={r['mlx_lm_best_k']} "
              f"{r['mlx_lm_acceptance_best_k']:.2f}")
    print(f"  identical to plain      {r['identical_to_plain']}")
    for w in r["workloads"]:
        print(f"  {w['workload']:9} plain {w['plain_tps']:.2f} tok/s, ours {w['spec_tps']:.2f} "
              f"(acceptance {w['acceptance_rate']:.2f}), ours+lookup {w['combined_tps']:.2f}, "
              f"lookup {w['lookup_tps']:.2f}, trees {w['tree_tps']:.2f} "
              f"({w['tree_nodes_per_round']:.1f} nodes/round against "
              f"{w['chain_nodes_per_round']:.1f}), trees+lookup {w['combined_tree_tps']:.2f}, mlx-lm "
              + " ".join(f"K{k}:{v:.2f}" for k, v in w["mlx_lm_tps"].items()))

"""How often a sampled draft token is accepted, under three rules, on the trained Qwen pair.

Usage: .venv/bin/python lab/probes/measure_coupling.py [--tokens N] [--seeds S]
  [--temperature T] [--top-p P]

For each of the pair bench's four workloads and each seed, the 1.5B samples N tokens with keyed
draws (what plain decoding writes with that seed); then one forward pass of each model over
the prompt and that text gives, at every position of the text, the target's distribution p and
the 0.5B's q (full head), both through `sampling.log_probs` at the settings. Per position:
  rejection  sum over tokens of min(p, q): rejection sampling with the draft drawn on its own
             (what the engine did before its drafts shared the target's keys);
  coupled    the probability that the Gumbel-max draws of p and of q with the same noise pick
             the same token (the engine's keyed drafts; Monte Carlo over 4000 noise draws,
             over the union of the two supports, where every argmax lies);
  match      sum of p * q: two independent draws agree (mlx-lm's sample-and-match).
Prints one JSON line per workload and seed, and a summary line (means over positions).
Runs under the CLI's BLAS (re-executes with OpenBLAS preloaded, as `spec-agent` does).
"""

from __future__ import annotations

import argparse
import json
import sys

from agent import store
from agent.engine.blas import ensure_openblas

DRAWS = 4000


def _rows(lm, prompt: list[int], text: list[int], params):
    """(len(text), V) log-probabilities of `lm` at each position of `text` after `prompt`."""
    import numpy as np
    from mlx_lm.models.cache import make_prompt_cache

    from agent.engine.sampling import log_probs
    from agent.engine.step import forward, prefill

    cache = make_prompt_cache(lm.model)
    prefill(lm.model, prompt[:-1], cache)
    logits = forward(lm.model, [prompt[-1], *text[:-1]], cache)
    return np.array(log_probs(logits, params))


def rates(lp, lq, rng) -> tuple[list[float], list[float], list[float]]:
    """Per row of two (n, V) log-probability arrays: (rejection, coupled, match)."""
    import numpy as np

    width = min(lp.shape[-1], lq.shape[-1])
    lp, lq = lp[:, :width], lq[:, :width]
    rej, cpl, mat = [], [], []
    for a, b in zip(lp, lq):
        p, q = np.exp(a.astype(np.float64)), np.exp(b.astype(np.float64))
        rej.append(float(np.minimum(p, q).sum()))
        mat.append(float((p * q).sum()))
        s = np.flatnonzero((p > 0) | (q > 0))
        g = rng.gumbel(size=(DRAWS, s.size))
        cpl.append(float(np.mean(np.argmax(a[s] + g, axis=1) == np.argmax(b[s] + g, axis=1))))
    return rej, cpl, mat


def main() -> None:
    warn = ensure_openblas("auto", store.home() / "blas-coretype.json")
    if warn:
        print(warn, file=sys.stderr)
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=0.95)
    a = ap.parse_args()

    import statistics
    from dataclasses import replace

    import numpy as np

    from agent import models
    from agent.bench.pair import workloads
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session, render_chat

    target = models.load("qwen2.5-coder-1.5b", device="cpu")
    draft = models.load("qwen2.5-coder-0.5b", device="cpu")
    params = SamplingParams(temperature=a.temperature, top_p=a.top_p)
    rng = np.random.default_rng(0)
    every: dict[str, list[float]] = {"rejection": [], "coupled": [], "match": []}
    for name, (messages, tools) in workloads().items():
        prompt = render_chat(target.tokenizer, messages, tools)
        for seed in range(a.seeds):
            p = replace(params, noise_seed=seed)
            text = Session(target).complete(prompt, max_tokens=a.tokens, params=p).tokens
            if not text:
                continue
            rej, cpl, mat = rates(_rows(target, prompt, text, params),
                                  _rows(draft, prompt, text, params), rng)
            for key, vals in (("rejection", rej), ("coupled", cpl), ("match", mat)):
                every[key] += vals
            print(json.dumps(dict(workload=name, seed=seed, positions=len(text),
                                  rejection=round(statistics.mean(rej), 4),
                                  coupled=round(statistics.mean(cpl), 4),
                                  match=round(statistics.mean(mat), 4))), flush=True)
    print(json.dumps(dict(summary=True, temperature=a.temperature, top_p=a.top_p,
                          positions=len(every["coupled"]),
                          **{k: round(statistics.mean(v), 4) for k, v in every.items()})))


if __name__ == "__main__":
    main()

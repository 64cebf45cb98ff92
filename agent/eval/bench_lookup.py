"""`spec-agent bench lookup`: prompt lookup on copy-heavy edits, against plain decoding and a
naive lookup loop, side by side in one process, with the same weights.

Per workload (interleaved, so machine noise hits all three alike): plain greedy decoding
(the product's `Session`), the product's lookup speculation (the drafter and policy that
`make_speculator` builds by default), and `naive_decode`: n-gram n=3 falling back to 2 and 1,
the most recent earlier occurrence, fixed K=8, greedy, written as the short loop it is. All
three emit exactly `tokens` tokens (EOS does not stop them) and must be token-identical.
Speedups are decode tok/s over plain; the summary gives the geometric mean per subset
(`tune` workloads guided the drafter; `check` workloads are held out).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

WORKLOADS = Path(__file__).parent / "lookup_workloads.toml"


@dataclass(frozen=True)
class Workload:
    name: str
    subset: str
    lang: str
    path: str
    instruction: str
    file: str

    def prompt_text(self) -> str:
        return (f"Here is the file {self.path}:\n\n```{self.lang}\n{self.file}```\n\n"
                f"{self.instruction} Reply with the new file in one code block.")


def load_workloads(subset: str = "all") -> list[Workload]:
    import tomllib

    data = tomllib.loads(WORKLOADS.read_text(encoding="utf-8"))
    return [Workload(**w) for w in data["workload"] if subset in ("all", w["subset"])]


def naive_draft(seq: list[int], k: int) -> list[int]:
    """The tokens after the most recent earlier occurrence of the last 3 (else 2, else 1)."""
    for n in (3, 2, 1):
        if len(seq) <= n:
            continue
        pattern = seq[-n:]
        for i in range(len(seq) - n - 1, -1, -1):
            if seq[i : i + n] == pattern:
                return seq[i + n : i + n + k]
    return []


def naive_decode(lm: Any, prompt: list[int], tokens: int, k: int = 8) -> tuple[list[int], float]:
    """The naive loop: draft by `naive_draft`, verify in one pass, keep the agreeing prefix
    and the target's next token. Returns (tokens, decode tok/s after the first token)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

    from ..engine.step import forward, prefill

    cache = make_prompt_cache(lm.model)
    prefill(lm.model, prompt[:-1], cache)
    seq, out, first = list(prompt), [], 0.0
    while len(out) < tokens:
        draft = naive_draft(seq, k)
        best = mx.argmax(forward(lm.model, [seq[-1], *draft], cache), axis=-1).tolist()
        n = 0
        while n < len(draft) and draft[n] == best[n]:
            n += 1
        trim_prompt_cache(cache, len(draft) - n)
        new = [*draft[:n], best[n]]
        seq += new
        out += new
        first = first or time.perf_counter()
    out = out[:tokens]
    elapsed = time.perf_counter() - first
    return out, (len(out) - 1) / elapsed if elapsed > 0 else 0.0


def _session_run(lm: Any, prompt: list[int], tokens: int, speculator: Any) -> tuple[list[int], Any]:
    from ..engine.session import Session
    from ..events import GenerationStats, TextDelta

    out, stats = [], None
    for ev in Session(lm, speculator=speculator).generate(prompt, max_tokens=tokens, stop_tokens=set()):
        if isinstance(ev, TextDelta):
            out += ev.tokens
        elif isinstance(ev, GenerationStats):
            stats = ev
    return out, stats


def product_speculator(lm: Any, cfg: Any) -> Any:
    """What the product runs for this model without a draft model: `make_speculator`."""
    from dataclasses import replace

    from ..runtime import make_speculator

    return make_speculator(replace(cfg, drafter="lookup", draft_model=""), lm, None)


def bench_workload(lm: Any, cfg: Any, w: Workload, tokens: int) -> dict[str, Any]:
    from ..engine.session import render_chat

    prompt = render_chat(lm.tokenizer, [{"role": "user", "content": w.prompt_text()}])
    plain, pstats = _session_run(lm, prompt, tokens, None)
    ours, ostats = _session_run(lm, prompt, tokens, product_speculator(lm, cfg))
    naive, naive_tps = naive_decode(lm, prompt, tokens)
    return dict(workload=w.name, subset=w.subset, prompt_tokens=len(prompt),
                plain_tps=pstats.decode_tps, ours_tps=ostats.decode_tps, naive_tps=naive_tps,
                ours_speedup=ostats.decode_tps / pstats.decode_tps,
                naive_speedup=naive_tps / pstats.decode_tps,
                ours_acceptance=ostats.acceptance_rate, ours_mean_accepted=ostats.mean_accepted,
                ours_identical=ours == plain, naive_identical=naive == plain)


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 0.0


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for subset in ("tune", "check", "all"):
        rs = [r for r in rows if subset in ("all", r["subset"])]
        if rs:
            out[subset] = dict(
                workloads=len(rs), ours_geomean=geomean([r["ours_speedup"] for r in rs]),
                naive_geomean=geomean([r["naive_speedup"] for r in rs]),
                ours_min_vs_naive=min(r["ours_speedup"] / r["naive_speedup"] for r in rs),
                identical=all(r["ours_identical"] and r["naive_identical"] for r in rs))
    return out


def run(lm: Any, cfg: Any, subset: str, tokens: int, log: Callable[[str], None]) -> dict[str, Any]:
    from ..engine.blas import loaded_blas

    rows = []
    for w in load_workloads(subset):
        rows.append(bench_workload(lm, cfg, w, tokens))
        r = rows[-1]
        log(f"  {r['workload']:22} {r['subset']:5} plain {r['plain_tps']:5.1f} tok/s | ours "
            f"{r['ours_speedup']:4.2f}x (acc {r['ours_acceptance']:.2f}) | naive "
            f"{r['naive_speedup']:4.2f}x | identical {r['ours_identical']}/{r['naive_identical']}")
    return dict(model=lm.name, blas=loaded_blas(), tokens=tokens, summary=summarize(rows),
                workloads=rows)


def main(args, cfg) -> int:
    from ..engine.loading import load_model

    lm = load_model(cfg.model, device=cfg.device)  # a model not pulled: one line, exit 2
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    result = run(lm, cfg, "all", args.tokens or (48 if args.quick else 200), log)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for subset, s in result["summary"].items():
        print(f"{subset:5} ({s['workloads']} workloads): ours {s['ours_geomean']:.2f}x plain, "
              f"naive {s['naive_geomean']:.2f}x plain (geometric means); ours/naive at worst "
              f"{s['ours_min_vs_naive']:.2f}; identical to plain: {s['identical']}")
    return 0

"""`spec-agent bench lookup`: prompt lookup on copy-heavy edits, against plain decoding and a
naive lookup loop, side by side in one process, with the same weights.

Per workload, three loops advanced in turns, `SLICE` tokens at a time (plain, ours, naive,
plain, ...), each timed over its own turns only, so that load from other processes falls on
all three alike: plain greedy decoding (the product's `Session`), the product's lookup
speculation (the drafter and policy that `make_speculator` builds by default), and
`naive_rounds`: n-gram n=3 falling back to 2 and 1, the most recent earlier occurrence, fixed
K=8, greedy, written as the short loop it is. Each decodes the model's reply, as the product
does: up to its end-of-turn token or `tokens` tokens, whichever comes first (`through_eos`
decodes exactly `tokens` tokens instead, past the reply into text nobody would see). The three
must be token-identical. Speedups are decode tok/s (after each loop's first batch) over
plain; the summary gives the geometric mean per subset (`tune` workloads guided the drafter;
`check` workloads are held out).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

WORKLOADS = Path(__file__).parent / "lookup_workloads.toml"
SLICE = 20  # tokens each loop decodes in its turn


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


def naive_rounds(lm: Any, prompt: list[int], k: int = 8,
                 stop: frozenset[int] = frozenset()) -> Iterator[list[int]]:
    """The naive loop: draft by `naive_draft`, verify in one pass, yield the agreeing prefix
    and the target's next token; ends before the first token in `stop` (endless without)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

    from ..engine import forward, prefill

    cache = make_prompt_cache(lm.model)
    prefill(lm.model, prompt[:-1], cache)
    seq = list(prompt)
    while True:
        draft = naive_draft(seq, k)
        best = mx.argmax(forward(lm.model, [seq[-1], *draft], cache), axis=-1).tolist()
        n = 0
        while n < len(draft) and draft[n] == best[n]:
            n += 1
        trim_prompt_cache(cache, len(draft) - n)
        new = [*draft[:n], best[n]]
        end = next((i for i, t in enumerate(new) if t in stop), None)
        if end is not None:  # the stop token ends the reply and is not part of it
            if end:
                yield new[:end]
            return
        seq += new
        yield new


def naive_decode(lm: Any, prompt: list[int], tokens: int, k: int = 8,
                 stop: frozenset[int] = frozenset()) -> tuple[list[int], float]:
    """Up to `tokens` tokens of the naive loop, and its decode tok/s after the first round."""
    run = Timed(naive_rounds(lm, prompt, k, stop))
    run.advance(tokens)
    return run.out[:tokens], run.tps()


class PausedClock:
    """`time.perf_counter` less the time spent paused: a speculator timing its own rounds
    with it does not count the other loops' turns."""

    def __init__(self) -> None:
        self.away, self.since = 0.0, 0.0  # paused seconds so far; when the pause began (0: not)

    def __call__(self) -> float:
        return (self.since or time.perf_counter()) - self.away

    def pause(self) -> None:
        self.since = self.since or time.perf_counter()

    def resume(self) -> None:
        if self.since:
            self.away += time.perf_counter() - self.since
            self.since = 0.0


@dataclass
class Timed:
    """One decoding loop advanced slice by slice; only its own slices are timed, from after
    its first batch (the prefill and first token) on."""

    batches: Iterator[list[int]]
    out: list[int] = field(default_factory=list)
    first: int = 0  # tokens in the first batch (not timed)
    elapsed: float = 0.0
    clock: PausedClock | None = None  # paused between this loop's turns

    def advance(self, upto: int) -> None:
        import mlx.core as mx

        if len(self.out) >= upto:
            return
        if self.clock is not None:
            self.clock.resume()
        t0 = time.perf_counter()
        for batch in self.batches:
            self.out += batch
            if not self.first:
                self.first, t0 = len(batch), time.perf_counter()
            if len(self.out) >= upto:
                break
        mx.synchronize()  # work this loop queued is its own, not the next loop's
        self.elapsed += time.perf_counter() - t0
        if self.clock is not None:
            self.clock.pause()

    def finish(self) -> None:
        """Run the loop to its end, untimed (a session reports its stats there)."""
        for batch in self.batches:
            self.out += batch

    def tps(self) -> float:
        return (len(self.out) - self.first) / self.elapsed if self.elapsed > 0 else 0.0


def _session_batches(lm: Any, prompt: list[int], tokens: int, speculator: Any,
                     stats: list, stop: frozenset[int]) -> Iterator[list[int]]:
    from ..engine import Session
    from ..events import GenerationStats, SpeculationChanged, TextDelta

    session = Session(lm, speculator=speculator)
    for ev in session.generate(prompt, max_tokens=tokens, stop_tokens=set(stop)):
        if isinstance(ev, TextDelta) and ev.tokens:
            yield list(ev.tokens)
        elif isinstance(ev, (GenerationStats, SpeculationChanged)):
            stats.append(ev)


def product_speculator(lm: Any, cfg: Any) -> Any:
    """What the product runs for this model without a draft model: `make_speculator`."""
    from dataclasses import replace

    from ..engine import SpecSettings, make_speculator

    return make_speculator(replace(SpecSettings.from_config(cfg), drafter="lookup"), lm, None)


def bench_workload(lm: Any, cfg: Any, w: Workload, tokens: int,
                   through_eos: bool = False) -> dict[str, Any]:
    """Plain, ours and naive advanced in turns, `SLICE` tokens at a time, so that load from
    other processes falls on all three alike even when it changes within seconds."""
    from ..engine import render_chat
    from ..events import SpeculationChanged

    prompt = render_chat(lm.tokenizer, [{"role": "user", "content": w.prompt_text()}])
    pstats: list = []
    ostats: list = []
    spec = product_speculator(lm, cfg)
    spec.clock = PausedClock()  # its speed checks must not see the other loops' turns
    stop = frozenset() if through_eos else frozenset(lm.eos_ids)
    runs = [Timed(_session_batches(lm, prompt, tokens, None, pstats, stop)),
            Timed(_session_batches(lm, prompt, tokens, spec, ostats, stop), clock=spec.clock),
            Timed(naive_rounds(lm, prompt, stop=stop))]
    for upto in range(SLICE, tokens + SLICE, SLICE):
        for r in runs:
            r.advance(min(upto, tokens))
    for r in runs[:2]:
        r.finish()
    plain, ours, naive = ([*r.out[:tokens]] for r in runs)
    p, o, n = (r.tps() for r in runs)
    st = ostats[-1]
    offs = sum(1 for e in ostats if isinstance(e, SpeculationChanged) and not e.enabled)
    return dict(workload=w.name, subset=w.subset, prompt_tokens=len(prompt), tokens=len(plain),
                plain_tps=p, ours_tps=o, naive_tps=n,
                # None: a reply of one batch, nothing timed to compare (left out of the means)
                ours_speedup=o / p if p and n else None, naive_speedup=n / p if p and n else None,
                ours_acceptance=st.acceptance_rate, ours_mean_accepted=st.mean_accepted,
                ours_auto_off=offs, ours_identical=ours == plain, naive_identical=naive == plain)


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 0.0


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for subset in ("tune", "check", "all"):
        rs = [r for r in rows if subset in ("all", r["subset"]) and r["ours_speedup"]]
        if rs:
            out[subset] = dict(
                workloads=len(rs), ours_geomean=geomean([r["ours_speedup"] for r in rs]),
                naive_geomean=geomean([r["naive_speedup"] for r in rs]),
                ours_min_vs_naive=min(r["ours_speedup"] / r["naive_speedup"] for r in rs),
                identical=all(r["ours_identical"] and r["naive_identical"] for r in rs))
    return out


def run(lm: Any, cfg: Any, subset: str, tokens: int, log: Callable[[str], None],
        through_eos: bool = False) -> dict[str, Any]:
    from ..engine import loaded_blas

    x = lambda v: f"{v:4.2f}x" if v else "  -  "  # noqa: E731  (None: a one-batch reply)
    rows = []
    for w in load_workloads(subset):
        rows.append(bench_workload(lm, cfg, w, tokens, through_eos))
        r = rows[-1]
        log(f"  {r['workload']:22} {r['subset']:5} {r['tokens']:3} tokens, plain "
            f"{r['plain_tps']:5.1f} tok/s | ours "
            f"{x(r['ours_speedup'])} (acc {r['ours_acceptance']:.2f}) | naive "
            f"{x(r['naive_speedup'])} | identical {r['ours_identical']}/{r['naive_identical']}"
            + (f" | auto-off x{r['ours_auto_off']}" if r["ours_auto_off"] else ""))
    return dict(model=lm.name, blas=loaded_blas(), tokens=tokens, through_eos=through_eos,
                summary=summarize(rows), workloads=rows)


def main(args, cfg) -> int:
    from .. import models

    lm = models.load(cfg.model, device=cfg.device)  # a model not pulled: one line, exit 2
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    tokens = args.tokens or (48 if args.quick else 400)
    result = run(lm, cfg, getattr(args, "subset", "all"), tokens, log,
                 getattr(args, "through_eos", False))
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for subset, s in result["summary"].items():
        print(f"{subset:5} ({s['workloads']} workloads): ours {s['ours_geomean']:.2f}x plain, "
              f"naive {s['naive_geomean']:.2f}x plain (geometric means); ours/naive at worst "
              f"{s['ours_min_vs_naive']:.2f}; identical to plain: {s['identical']}")
    return 0

"""How long a cancel (Esc) takes to stop a long prefill on the CPU, across context positions.

Usage: python lab/probes/measure_cancel.py [--model qwen2.5-coder-0.5b] [--tokens 17000]
       [--cycles 8] [--after 0.4,0.9] [--out lab/results/cancel-latency.jsonl]

A cancel is checked between prefill chunks, so the longest chunk bounds the wait. One
`Session`, one long prompt (this project's source, repeated), prefilled in one call: the time
of every chunk (between `PrefillProgress` events) by context position. Then `--cycles` calls
with the prompt grown past that, each cancelled a delay after the call (delays from `--after`
in turn), timed from the cancel to the generator's end: the wait a user's Esc sees at the
end of the context, overhead included. A cancelled prefill keeps the chunks it fed, so each
cycle resumes where the last stopped. Runs under the CLI's BLAS setup. One summary line is
appended to `--out`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BANDS = ((0, 4096), (4096, 8192), (8192, 12288), (12288, 16384), (16384, 1 << 30))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--tokens", type=int, default=17000)
    ap.add_argument("--cycles", type=int, default=8)
    ap.add_argument("--after", default="0.4,0.9", help="seconds from the call to the cancel, in turn")
    ap.add_argument("--out", type=Path, default=ROOT / "lab/results/cancel-latency.jsonl")
    args = ap.parse_args()

    from agent import models, store
    from agent.cancel import CancelToken
    from agent.engine import Session, ensure_openblas
    from agent.engine.session import chunk_at
    from agent.events import GenerationStats, PrefillProgress

    ensure_openblas("auto", store.home() / "blas-coretype.json")  # may re-exec, as the CLI does
    lm = models.load(args.model, device="cpu")
    text = "".join(p.read_text() for p in sorted((ROOT / "agent").rglob("*.py")))
    ids = lm.tokenizer.encode(text)
    longer = args.tokens + 4096
    source = (ids * (longer // len(ids) + 1))[:longer]
    session = Session(lm)

    chunks, last, at = [], time.perf_counter(), 0
    for ev in session.generate(source[: args.tokens], max_tokens=1):
        if isinstance(ev, PrefillProgress):
            now = time.perf_counter()
            chunks.append({"at": at, "tokens": ev.done - at, "s": round(now - last, 3)})
            last, at = now, ev.done
    print(json.dumps({"chunks": len(chunks), "max_s": max(c["s"] for c in chunks)}), flush=True)

    delays = [float(x) for x in args.after.split(",")]
    cycles = []
    for i in range(args.cycles):
        cancel, fired = CancelToken(), []
        start = session.tcache.offset

        def fire(delay: float = delays[i % len(delays)]) -> None:
            time.sleep(delay)
            fired.append(time.perf_counter())
            cancel.cancel()

        timer = threading.Thread(target=fire, daemon=True)
        timer.start()
        finish = ""
        for ev in session.generate(source, max_tokens=1, cancel=cancel):
            if isinstance(ev, GenerationStats):
                finish = ev.finish_reason
        end = time.perf_counter()
        timer.join()
        row = {"from_position": start, "to_position": session.tcache.offset, "finish": finish,
               "cancel_latency_s": round(end - fired[0], 3) if fired and fired[0] < end else None}
        print(json.dumps(row), flush=True)
        cycles.append(row)

    def band(lo: int, hi: int) -> dict:
        cs = [c for c in chunks if lo <= c["at"] < hi]
        return {"chunks": len(cs), "tokens": sorted({c["tokens"] for c in cs}),
                "max_s": max((c["s"] for c in cs), default=None),
                "median_s": statistics.median(c["s"] for c in cs) if cs else None}

    rev = subprocess.run(["git", "log", "-1", "--format=%h", "--", "agent"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()
    lat = [c["cancel_latency_s"] for c in cycles if c["cancel_latency_s"] is not None]
    summary = {"probe": "cancel-latency", "commit": rev, "date": time.strftime("%Y-%m-%d"), "model": args.model,
               "schedule": {pos: chunk_at(pos, "cpu", 512) for pos in (0, 2048, 4096, 8192, 12288, 16384)}, "prompt_tokens": args.tokens,
               "prefill_s": round(sum(c["s"] for c in chunks), 1),
               "bands": {f"{lo}-{hi if hi < 1 << 30 else 'end'}": band(lo, hi) for lo, hi in BANDS},
               "cancel_latency_max_s": max(lat, default=None), "cycles": cycles,
               "loadavg": [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]],
               "chunk_times": chunks}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as f:
        f.write(json.dumps(summary) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("chunk_times",)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

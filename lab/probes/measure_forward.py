"""Cost of one forward pass of the embedded model and its plain decode speed on this machine.

Usage: python lab/probes/measure_forward.py [f32|q4]   (run once with and once without
LD_PRELOAD=<libopenblas.so.0> to compare BLAS libraries). Figures for the CPU policy notes.
"""

from __future__ import annotations

import sys

from agent.bench.common import forward_ms
from agent.engine.blas import loaded_blas
from agent import models
from agent.engine.session import Session, render_chat


def main() -> None:
    dense = (sys.argv[1] if len(sys.argv) > 1 else "f32") == "f32"
    lm = models.load(None, device="cpu", dense=dense)
    context = list(range(1000, 1300 if dense else 1032))  # quantized prefill is slow on CPU
    prompt = render_chat(lm.tokenizer, [{"role": "user", "content":
                                         "Write a Python function that returns the sum of a list."}])
    stats = Session(lm).complete(prompt, max_tokens=100, stop_tokens=set()).stats
    one, eight = forward_ms(lm, 1, context, reps=6), forward_ms(lm, 8, context, reps=6)
    print(f"{lm.dtype} blas={loaded_blas()} cache={len(context)}: K=1 {one:.1f} ms, "
          f"K=8 {eight:.1f} ms, decode {stats.decode_tps:.1f} tok/s")


if __name__ == "__main__":
    main()

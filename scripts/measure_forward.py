"""Cost of one forward pass of the embedded model and its plain decode speed on this machine.

Usage: python scripts/measure_forward.py [f32|q4]   (run once with and once without
LD_PRELOAD=<libopenblas.so.0> to compare BLAS libraries). Figures for the CPU policy notes.
"""

from __future__ import annotations

import statistics
import sys
import time

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from agent.engine.blas import loaded_blas
from agent.engine.loading import load_model
from agent.engine.session import Session, render_chat
from agent.engine.step import forward
from agent.events import GenerationStats


def cost_ms(lm, context: list[int], width: int, reps: int = 6) -> float:
    """Median time of a `width`-token pass on top of a cache holding `context`."""
    times = []
    for _ in range(reps):
        cache = make_prompt_cache(lm.model)
        mx.eval(forward(lm.model, context, cache))
        t = time.perf_counter()
        mx.eval(forward(lm.model, context[:width], cache))
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    dense = (sys.argv[1] if len(sys.argv) > 1 else "f32") == "f32"
    lm = load_model(None, device="cpu", dense=dense)
    context = list(range(1000, 1300 if dense else 1032))  # quantized prefill is slow on CPU
    prompt = render_chat(lm.tokenizer, [{"role": "user", "content":
                                         "Write a Python function that returns the sum of a list."}])
    stats = [e for e in Session(lm).generate(prompt, max_tokens=100, stop_tokens=set())
             if isinstance(e, GenerationStats)][0]
    print(f"{lm.dtype} blas={loaded_blas()} cache={len(context)}: K=1 {cost_ms(lm, context, 1):.1f} ms, "
          f"K=8 {cost_ms(lm, context, 8):.1f} ms, decode {stats.decode_tps:.1f} tok/s")


if __name__ == "__main__":
    main()

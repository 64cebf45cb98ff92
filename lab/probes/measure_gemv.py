"""A forward pass of 1, 2 and 7 rows with MLX's matmul, then with numpy's gemv for the
single-row products of the Linear layers (an output head that is the embedding used as a
linear layer stays on MLX). On the Linux CPU MLX's product of one row runs well below the
memory bandwidth a gemv reaches; this measures what that costs a decode step. A measurement
only: the engine does not route its products through numpy. Usage:
  .venv/bin/python lab/probes/measure_gemv.py [-m MODEL]   (default qwen2.5-coder-1.5b)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

ROWS = (1, 2, 7)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    args = ap.parse_args(argv)

    from agent.engine.blas import ensure_openblas

    ensure_openblas()
    import mlx.core as mx
    import numpy as np
    from mlx import nn
    from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

    from agent import models
    from agent.engine.step import forward

    lm = models.load(args.model, device="cpu")
    prompt = lm.tokenizer.encode("def fib(n):\n    " * 20)
    cache = make_prompt_cache(lm.model)
    mx.eval(forward(lm.model, prompt, cache))

    def pass_ms(rows: int, reps: int = 5) -> float:
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            mx.eval(forward(lm.model, prompt[-rows:], cache))
            times.append(time.perf_counter() - t)
            trim_prompt_cache(cache, rows)
        return statistics.median(times) * 1000

    stock = {r: pass_ms(r) for r in ROWS}
    original = nn.Linear.__call__
    views: dict[int, np.ndarray] = {}

    def gemv_call(self, x):
        if x.ndim != 3 or x.shape[-2] != 1 or x.dtype != mx.float32 or "weight" not in self:
            return original(self, x)
        w = views.get(id(self))
        if w is None:
            w = views[id(self)] = np.asarray(self.weight)
        mx.eval(x)
        out = mx.array(np.asarray(x)[0] @ w.T)[None]
        return out + self.bias if "bias" in self else out

    nn.Linear.__call__ = gemv_call
    try:
        gemv = {r: pass_ms(r) for r in ROWS}
    finally:
        nn.Linear.__call__ = original
    print(json.dumps(dict(model=args.model, context=len(prompt),
                          mlx_ms={r: round(v, 1) for r, v in stock.items()},
                          gemv_for_one_row_ms={r: round(v, 1) for r, v in gemv.items()})))
    return 0


if __name__ == "__main__":
    sys.exit(main())

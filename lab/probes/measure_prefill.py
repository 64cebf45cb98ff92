"""Cold prefill speed of the embedded model on the CPU, before/after the prefill fixes.

Usage: python lab/probes/measure_prefill.py [--sizes 1024,4096] [--reps 3] [--chunk 0]
Runs itself as subprocesses under the CLI's conditions (`LD_PRELOAD=<libopenblas.so.0>`), once
with OpenBLAS's own kernel choice and once with the verified `OPENBLAS_CORETYPE` (an
environment variable: it needs a fresh process). In each, MLX's attention and
`agent.engine.attention` alternate run by run, a fresh `Session` per run
(`generate(prompt, max_tokens=1)`; `--chunk N` uses `step.prefill` with N-token chunks
instead). One extra run per configuration times the attention calls alone (inputs evaluated
before, output after) for attention's share. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _prompt(tokenizer, n: int) -> list[int]:
    text = open(__file__).read()
    ids = tokenizer.encode(text)
    return (ids * (n // len(ids) + 1))[:n]


def _run_once(lm, prompt: list[int], chunk: int) -> float:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from agent.engine.session import Session
    from agent.engine.step import prefill

    start = time.perf_counter()
    if chunk:
        cache = make_prompt_cache(lm.model)
        prefill(lm.model, prompt, cache, chunk=chunk)
        mx.eval([c.state for c in cache])
    else:
        Session(lm).complete(prompt, max_tokens=1, stop_tokens=set())
    return time.perf_counter() - start


class _AttentionTimer:
    """Wraps a model module's attention function and adds up the seconds spent in it."""

    def __init__(self, module):
        self.module, self.inner, self.seconds, self.calls = module, None, 0.0, 0

    def __enter__(self):
        import mlx.core as mx

        self.inner = self.module.scaled_dot_product_attention

        def timed(queries, keys, values, *args, **kwargs):
            mx.eval(queries, keys, values)
            t = time.perf_counter()
            out = self.inner(queries, keys, values, *args, **kwargs)
            mx.eval(out)
            self.seconds += time.perf_counter() - t
            self.calls += 1
            return out

        self.module.scaled_dot_product_attention = timed
        return self

    def __exit__(self, *exc):
        self.module.scaled_dot_product_attention = self.inner


def child(sizes: list[int], reps: int, chunk: int) -> dict:
    from agent.engine import attention
    from agent.engine.blas import loaded_blas
    from agent import models

    lm = models.load(None, device="cpu")
    module = sys.modules[type(lm.model).__module__]
    out = {"blas": loaded_blas(), "coretype": os.environ.get("OPENBLAS_CORETYPE", "auto"),
           "chunk": chunk or "session", "sizes": {}}
    for n in sizes:
        prompt = _prompt(lm.tokenizer, n)
        times: dict[str, list[float]] = {"mlx": [], "numpy": []}
        _run_once(lm, prompt[:256], chunk)  # warm-up
        for _ in range(reps):  # alternate: the machine's load drifts
            for kind in ("mlx", "numpy"):
                (attention.install if kind == "numpy" else attention.uninstall)(lm.model)
                times[kind].append(_run_once(lm, prompt, chunk))
        row = {}
        for kind in ("mlx", "numpy"):
            (attention.install if kind == "numpy" else attention.uninstall)(lm.model)
            with _AttentionTimer(module) as timer:
                total = _run_once(lm, prompt, chunk)
            med = statistics.median(times[kind])
            row[kind] = {
                "tok_s": round(n / med, 1), "median_s": round(med, 2),
                "runs_s": [round(t, 2) for t in times[kind]],
                "attention_share": round(timer.seconds / total, 3),
                "attention_s": round(timer.seconds, 2),
            }
        out["sizes"][str(n)] = row
    attention.install(lm.model)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1024,4096")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=0, help="0: a Session's own chunking")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child:
        print(json.dumps(child(sizes, args.reps, args.chunk)))
        return
    from agent import store
    from agent.engine.blas import openblas_library, verified_coretype

    lib = openblas_library()
    runs = []
    for coretype in (None, verified_coretype(lib, store.home() / "blas-coretype.json") if lib else None):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
        if lib:
            env["LD_PRELOAD"] = lib
        if coretype:
            env["OPENBLAS_CORETYPE"] = coretype
        elif runs:
            break  # no verified coretype: nothing more to compare
        cmd = [sys.executable, __file__, "--child", "--sizes", args.sizes,
               "--reps", str(args.reps), "--chunk", str(args.chunk)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(proc.stderr)
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(json.dumps({"cpu_count": os.cpu_count(), "load_avg": os.getloadavg(), "runs": runs},
                     indent=1))


if __name__ == "__main__":
    main()

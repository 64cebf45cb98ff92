"""One cold prefill of N tokens of the embedded model with the code in a given checkout.

Usage: python lab/probes/prefill_ab.py CHECKOUT N [CHUNK]
Runs `Session(lm, prefill_chunk=CHUNK).generate(prompt, max_tokens=1)` on a fresh session with
CHECKOUT's `agent` package first on the path, and prints one JSON line (seconds, tok/s). For a
before/after comparison run it alternately on a `git worktree` of the old commit and on this
checkout, under the CLI's conditions (`LD_PRELOAD=<libopenblas.so.0>`, and for the new code
the verified `OPENBLAS_CORETYPE`).
"""

import json
import os
import sys
import time

root, n = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, root)
from agent import models  # noqa: E402
from agent.engine.session import Session  # noqa: E402

lm = models.load(None, device="cpu")
text = open(os.path.join(root, "agent/engine/session.py")).read() * 8
ids = lm.tokenizer.encode(text)[:n]
s = Session(lm, prefill_chunk=int(sys.argv[3]) if len(sys.argv) > 3 else 0)
t = time.perf_counter()
for _ in s.generate(ids, max_tokens=1, stop_tokens=set()):
    pass
dt = time.perf_counter() - t
print(json.dumps({"code": root, "tokens": n, "chunk": s.prefill_chunk, "seconds": round(dt, 2),
                  "tps": round(n / dt, 1), "coretype": os.environ.get("OPENBLAS_CORETYPE", "auto"),
                  "load": os.getloadavg()[0]}))
sys.stdout.flush()
os._exit(0)  # some older checkouts hang in interpreter shutdown (BLAS threads)

"""Where cold prefill time goes: the share of attention and of the MLP's SwiGLU.

Usage: python lab/probes/prefill_share.py
Prefills 1,024 and 4,096 tokens of the embedded model in 512-token chunks with every attention
and SwiGLU call timed alone (inputs evaluated before, output after; the extra syncs make the
total slightly slower than a normal prefill). Prints one JSON object.
"""

import json
import sys
import time

import mlx.core as mx  # noqa: E402

from agent.engine import step  # noqa: E402
from agent import models  # noqa: E402
from agent.engine.cache import make_cache  # noqa: E402

lm = models.load(None, device="cpu")
module = sys.modules[type(lm.model).__module__]
spent = {"attention": 0.0, "swiglu": 0.0}


def timed(name, fn):
    def wrap(*a, **kw):
        mx.eval([x for x in a if isinstance(x, mx.array)])
        t = time.perf_counter()
        out = fn(*a, **kw)
        mx.eval(out)
        spent[name] += time.perf_counter() - t
        return out
    return wrap


module.scaled_dot_product_attention = timed("attention", module.scaled_dot_product_attention)
module.swiglu = timed("swiglu", module.swiglu)
ids = lm.tokenizer.encode(open(step.__file__.replace("step.py", "session.py")).read() * 8)
out = {}
for n in (1024, 4096):
    for k in spent:
        spent[k] = 0.0
    cache = make_cache(lm.model)
    t = time.perf_counter()
    step.prefill(lm.model, ids[:n], cache, chunk=512)
    total = time.perf_counter() - t
    out[n] = dict(total_s=round(total, 2), attention_share=round(spent["attention"] / total, 3),
                  swiglu_share=round(spent["swiglu"] / total, 3))
print(json.dumps(out))

"""Does the engine run a GGUF model as the reference implementation does? Logits of one
chat prompt (a code task and the start of an answer) from this engine's conversion, against
Hugging Face transformers' own GGUF loader (it dequantizes with the same `gguf` package and
runs its PyTorch Qwen2/Llama code), position by position: the largest absolute difference,
top-1 agreement and the KL divergence. It also checks that both tokenizers encode the text to
the same ids and that both chat templates render the messages alike.

transformers is not a dependency of this project: name an interpreter that has `torch`,
`transformers`, `accelerate` and `gguf` with --python (a separate venv is fine; it runs as a
subprocess). Usage:
  .venv/bin/python lab/probes/measure_fidelity.py -m qwen2.5-coder-0.5b --python /tmp/hf/bin/python
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

MESSAGES = [{"role": "system", "content": "You are a helpful coding assistant."},
            {"role": "user", "content": "Write a Python function that returns the n-th prime "
                                        "number, with a docstring."}]
ANSWER = ("```python\ndef nth_prime(n):\n    \"\"\"Return the n-th prime number (1-based).\"\"\"\n"
          "    if n < 1:\n        raise ValueError('n must be positive')\n    count = 0\n"
          "    candidate = 1\n")

THEIRS = """
import json, os, sys
import numpy as np, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path, ids_file, text_file, out, msgs_file = sys.argv[1:6]
folder, name = os.path.dirname(path), os.path.basename(path)
tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
ids = json.load(open(ids_file))
text = open(text_file, encoding="utf-8").read()
same = tok.encode(text, add_special_tokens=False) == ids
chat = tok.apply_chat_template(json.load(open(msgs_file)), tokenize=False, add_generation_prompt=True)
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.float32)
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits[0].numpy()
np.save(out, logits)
print(json.dumps({"same_ids": same, "chat": chat}))
"""


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def compare(ours: np.ndarray, theirs: np.ndarray) -> dict:
    p, q = _log_softmax(theirs.astype(np.float64)), _log_softmax(ours.astype(np.float64))
    kl = (np.exp(p) * (p - q)).sum(-1)
    return dict(positions=int(ours.shape[0]), max_abs_diff=float(np.abs(ours - theirs).max()),
                mean_abs_logit=float(np.abs(theirs).mean()),
                top1_agreement=float((ours.argmax(-1) == theirs.argmax(-1)).mean()),
                kl_mean=float(kl.mean()), kl_max=float(kl.max()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True, help="a store name of a GGUF model")
    ap.add_argument("--python", required=True, help="an interpreter with torch and transformers")
    args = ap.parse_args(argv)

    from agent.engine.blas import ensure_openblas

    ensure_openblas()
    import mlx.core as mx

    from agent import models

    kind, path = models.resolve(args.model)
    if kind != "gguf":
        print(f"{args.model} is not a GGUF model", file=sys.stderr)
        return 2
    lm = models.load(args.model, device="cpu")
    chat = lm.tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    text = chat + ANSWER
    ids = lm.tokenizer.encode(text)
    ours = np.array(lm.model(mx.array([ids]))[0].astype(mx.float32))
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "ids.json").write_text(json.dumps(ids))
        (t / "text.txt").write_text(text, encoding="utf-8")
        (t / "messages.json").write_text(json.dumps(MESSAGES))
        run = subprocess.run([args.python, "-c", THEIRS, str(path), str(t / "ids.json"),
                              str(t / "text.txt"), str(t / "theirs.npy"), str(t / "messages.json")],
                             capture_output=True, text=True, check=False)
        if run.returncode != 0:
            print(f"transformers' side failed:\n{run.stderr[-2000:]}", file=sys.stderr)
            return 1
        got = json.loads(run.stdout.strip().splitlines()[-1])
        theirs = np.load(t / "theirs.npy")
    print(json.dumps(dict(model=args.model, same_token_ids=got["same_ids"],
                          same_chat_template=got["chat"] == chat, **compare(ours, theirs))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Can this draft serve this target? Tokenizer identity (refuse), family and memory (warn)."""

from __future__ import annotations

import os
import sys

from .errors import PairingError
from .loading import LoadedModel


def _vocab(lm: LoadedModel) -> dict[str, int]:
    return lm.tokenizer._tokenizer.get_vocab()


def check_tokenizers(target: LoadedModel, draft: LoadedModel) -> None:
    """Raise `PairingError` naming the first difference between the two tokenizers."""
    tv, dv = _vocab(target), _vocab(draft)
    if len(tv) != len(dv):
        raise PairingError(
            f"draft '{draft.name}' has a different tokenizer: {len(dv)} tokens vs the "
            f"target's {len(tv)}"
        )
    for tok, i in tv.items():
        if dv.get(tok) != i:
            raise PairingError(
                f"draft '{draft.name}' has a different tokenizer: token {tok!r} is id {i} in "
                f"the target but {dv.get(tok)} in the draft"
            )
    if target.eos_ids != draft.eos_ids:
        raise PairingError(
            f"draft '{draft.name}' stops on different tokens: {sorted(draft.eos_ids)} vs "
            f"the target's {sorted(target.eos_ids)}"
        )


def kv_bytes(lm: LoadedModel, context: int) -> int:
    """KV cache size at `context` tokens (keys + values, every layer)."""
    a = lm.model.args
    heads = getattr(a, "num_key_value_heads", None) or a.num_attention_heads
    head_dim = getattr(a, "head_dim", None) or a.hidden_size // a.num_attention_heads
    itemsize = 4 if lm.dtype == "float32" else 2
    return 2 * a.num_hidden_layers * heads * head_dim * context * itemsize


def available_memory() -> int | None:
    """Bytes the system can still hand out (Linux MemAvailable; macOS: total RAM)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            return None
    return None


def pairing_warnings(target: LoadedModel, draft: LoadedModel, context: int,
                     headroom_gb: float) -> list[str]:
    """Soft problems once both models are loaded: a different model family, too little
    memory left for both KV caches (the weights are resident already, f32 on the CPU)."""
    out = []
    tf = getattr(target.model.args, "model_type", "?")
    df = getattr(draft.model.args, "model_type", "?")
    if tf != df:
        out.append(f"draft family '{df}' differs from the target's '{tf}': acceptance is "
                   "usually low across families")
    need = kv_bytes(target, context) + kv_bytes(draft, context)
    free = available_memory()
    if free is not None and free - need < headroom_gb * 1e9:
        out.append(f"the KV caches of target and draft need ~{need / 1e9:.2f} GB at {context} "
                   f"tokens and leave {(free - need) / 1e9:.1f} GB free, under the "
                   f"{headroom_gb:g} GB headroom (memory_headroom_gb): long sessions may swap")
    if draft.num_params >= target.num_params:
        out.append("draft is not smaller than the target: speculation cannot pay off")
    return out


def estimate_weight_bytes(ref: str | None, device: str) -> int | None:
    """Bytes a GGUF model's weights will take once loaded (f32 on the CPU, where every quant
    type is dequantized; about the file's size elsewhere); None when not a GGUF reference."""
    from pathlib import Path

    from .errors import SpecAgentError
    from .gguf_header import read_header
    from .loading import resolve

    try:
        kind, where = resolve(ref)
        header = read_header(Path(where)) if kind == "gguf" else None
    except SpecAgentError:  # loading reports a bad reference or file itself, in order
        return None
    if header is None:
        return None
    if device == "cpu":
        return sum(4 * _elements(t.shape) for t in header.tensors)
    return sum(t.nbytes for t in header.tensors)


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def preload_warnings(target_ref: str | None, draft_ref: str | None, device: str,
                     headroom_gb: float) -> list[str]:
    """Before loading: will target and draft weights fit in memory with the headroom left?"""
    refs = [target_ref] + ([draft_ref] if draft_ref else [])
    need = sum(estimate_weight_bytes(ref, device) or 0 for ref in refs)
    free = available_memory()
    if not need or free is None or free - need >= headroom_gb * 1e9:
        return []
    what = "f32 weights (the CPU runs dequantized weights)" if device == "cpu" else "weights"
    return [f"the models' {what} need ~{need / 1e9:.1f} GB and leave "
            f"{(free - need) / 1e9:.1f} GB of the {free / 1e9:.1f} GB available, under the "
            f"{headroom_gb:g} GB headroom (memory_headroom_gb): loading may swap"]

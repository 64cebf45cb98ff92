"""The GGUF architecture table: which mlx-lm model class each `general.architecture` becomes,
how hyper-parameters are read from metadata, and how tensor names map.

Per family: GGUF `llama` files store the Q/K projection rows permuted for GGML's interleaved
RoPE, so the model runs with `rope_traditional=True`; `qwen2` files keep the original row order
(GGML's NEOX RoPE), so the model runs with the default (non-traditional) RoPE. `qwen2` has
q/k/v biases. Either family may tie the output head to the embedding (no `output.weight`).
Architectures not in the table are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import ModelLoadError

_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_SUFFIXES = ("weight", "bias", "scales", "biases")


@dataclass(frozen=True)
class Arch:
    name: str  # GGUF `general.architecture`
    module: str  # mlx_lm.models.<module>
    rope_traditional: bool  # True where GGUF permuted Q/K rows for GGML's RoPE


ARCHES = {
    "llama": Arch("llama", "llama", rope_traditional=True),
    "qwen2": Arch("qwen2", "qwen2", rope_traditional=False),
}


def arch_of(meta: dict[str, Any]) -> Arch:
    name = scalar(meta, "general.architecture", "")
    if name not in ARCHES:
        raise ModelLoadError(
            f"GGUF architecture '{name or 'unknown'}' is not supported (supported: "
            f"{', '.join(ARCHES)}; use an MLX model folder for other architectures)"
        )
    return ARCHES[name]


def scalar(meta: dict[str, Any], key: str, default: Any = None) -> Any:
    """A metadata value as a Python scalar; a missing key without default is an error."""
    if key not in meta:
        if default is None:
            raise ModelLoadError(f"GGUF metadata lacks '{key}'")
        return default
    v = meta[key]
    return v.item() if hasattr(v, "item") else v


def map_name(gguf_name: str) -> str:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`."""
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(\w+)", gguf_name)
    if m and m.group(2) in _LAYER_NAMES and m.group(3) in _SUFFIXES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"
    m = re.fullmatch(r"(\w+)\.(\w+)", gguf_name)
    if m and m.group(1) in _TOP_NAMES and m.group(2) in _SUFFIXES:
        return f"{_TOP_NAMES[m.group(1)]}.{m.group(2)}"
    raise ModelLoadError(f"unexpected tensor '{gguf_name}' in a GGUF model file")


def args_dict(meta: dict[str, Any], tensor_names: set[str]) -> dict[str, Any]:
    """The mlx-lm `ModelArgs` fields for this file, as plain values (kept in manifests)."""
    arch = arch_of(meta)
    p = arch.name + "."
    hidden = int(scalar(meta, p + "embedding_length"))
    heads = int(scalar(meta, p + "attention.head_count"))
    tokens = meta.get("tokenizer.ggml.tokens", [])
    vocab = scalar(meta, p + "vocab_size", 0) or len(tokens)
    if not vocab and "token_embd.weight" not in tensor_names:
        raise ModelLoadError("GGUF file has neither a vocabulary nor a token embedding")
    out = dict(
        model_type=arch.module,
        hidden_size=hidden,
        num_hidden_layers=int(scalar(meta, p + "block_count")),
        intermediate_size=int(scalar(meta, p + "feed_forward_length")),
        num_attention_heads=heads,
        num_key_value_heads=int(scalar(meta, p + "attention.head_count_kv", heads)),
        rms_norm_eps=float(scalar(meta, p + "attention.layer_norm_rms_epsilon", 1e-5)),
        vocab_size=int(vocab),
        rope_theta=float(scalar(meta, p + "rope.freq_base", 10000.0)),
        max_position_embeddings=int(scalar(meta, p + "context_length", 2048)),
        rope_traditional=arch.rope_traditional,
        tie_word_embeddings="output.weight" not in tensor_names,
    )
    key_len = meta.get(p + "attention.key_length")
    if arch.module == "llama" and key_len is not None and int(key_len) != hidden // heads:
        out["head_dim"] = int(key_len)
    return out


def model_class(args: dict[str, Any]):
    """(Model class, ModelArgs instance) of mlx-lm for an `args_dict`."""
    import importlib

    mod = importlib.import_module(f"mlx_lm.models.{args['model_type']}")
    return mod.Model, mod.ModelArgs.from_dict(args)

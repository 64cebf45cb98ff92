"""Load a llama-family GGUF file into an mlx-lm llama model and a Hugging Face tokenizer.

MLX reads GGUF natively (`mx.load(..., return_metadata=True)`): Q4_0/Q4_1/Q8_0 tensors arrive
as MLX affine-quantized triples (weight, scales, biases). This module maps names, derives the
hyper-parameters from metadata and rebuilds the byte-level BPE tokenizer from the vocabulary
and merges stored in the file. It does not handle non-llama architectures or SentencePiece
("llama"-model) vocabularies: those are refused with a clear error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

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
_SUFFIXES = ("weight", "scales", "biases")


def _scalar(meta: dict[str, Any], key: str, default: Any = None) -> Any:
    if key not in meta:
        if default is None:
            raise ModelLoadError(f"GGUF metadata lacks '{key}'")
        return default
    v = meta[key]
    return v.item() if isinstance(v, mx.array) else v


def map_name(gguf_name: str) -> str:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`."""
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(\w+)", gguf_name)
    if m and m.group(2) in _LAYER_NAMES and m.group(3) in _SUFFIXES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"
    m = re.fullmatch(r"(\w+)\.(\w+)", gguf_name)
    if m and m.group(1) in _TOP_NAMES and m.group(2) in _SUFFIXES:
        return f"{_TOP_NAMES[m.group(1)]}.{m.group(2)}"
    raise ModelLoadError(f"unexpected tensor '{gguf_name}' in a llama GGUF")


def read_gguf(path: Path) -> tuple[dict[str, mx.array], dict[str, Any]]:
    from .gguf_header import check_gguf

    check_gguf(path)  # MLX's reader can crash on corrupt files
    try:
        weights, meta = mx.load(str(path), return_metadata=True)
    except (RuntimeError, ValueError, OSError) as e:
        raise ModelLoadError(f"cannot read GGUF file {path}: {e}") from e
    return weights, meta


def model_args(meta: dict[str, Any], weights: dict[str, mx.array]):
    from mlx_lm.models.llama import ModelArgs

    arch = _scalar(meta, "general.architecture", "")
    if arch != "llama":
        raise ModelLoadError(
            f"GGUF architecture '{arch or 'unknown'}' is not supported (only llama-family GGUF; "
            "use an MLX model folder for other architectures)"
        )
    hidden = int(_scalar(meta, "llama.embedding_length"))
    heads = int(_scalar(meta, "llama.attention.head_count"))
    vocab = _scalar(meta, "llama.vocab_size", 0) or len(meta.get("tokenizer.ggml.tokens", []))
    return ModelArgs(
        model_type="llama",
        hidden_size=hidden,
        num_hidden_layers=int(_scalar(meta, "llama.block_count")),
        intermediate_size=int(_scalar(meta, "llama.feed_forward_length")),
        num_attention_heads=heads,
        num_key_value_heads=int(_scalar(meta, "llama.attention.head_count_kv", heads)),
        rms_norm_eps=float(_scalar(meta, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
        vocab_size=int(vocab),
        rope_theta=float(_scalar(meta, "llama.rope.freq_base", 10000.0)),
        max_position_embeddings=int(_scalar(meta, "llama.context_length", 2048)),
        # GGUF permutes Q/K rows for GGML's (interleaved) RoPE.
        rope_traditional=True,
        tie_word_embeddings="output.weight" not in weights,
    )


def _quant_layout(w: dict[str, mx.array], in_dims: int) -> tuple[int, int]:
    """(bits, group_size) of one affine-quantized tensor triple."""
    bits = w["weight"].shape[-1] * 32 // in_dims
    group = in_dims // w["scales"].shape[-1]
    return bits, group


def build_model(weights: dict[str, mx.array], args, dequantize: bool) -> nn.Module:
    """Instantiate the llama model; quantized layers stay quantized unless `dequantize`."""
    from mlx_lm.models.llama import Model

    mapped: dict[str, mx.array] = {map_name(k): v for k, v in weights.items()}
    groups: dict[str, dict[str, mx.array]] = {}
    for k, v in mapped.items():
        prefix, suffix = k.rsplit(".", 1)
        groups.setdefault(prefix, {})[suffix] = v
    model = Model(args)
    in_dims_of = {
        p: (m.weight.shape[-1] if not hasattr(m, "bits") else None)
        for p, m in model.named_modules()
        if hasattr(m, "weight")
    }
    final: dict[str, mx.array] = {}
    quant: dict[str, tuple[int, int]] = {}
    for prefix, parts in groups.items():
        if prefix not in in_dims_of:
            raise ModelLoadError(f"GGUF tensor '{prefix}' does not fit a llama model")
        if "scales" not in parts:
            final[f"{prefix}.weight"] = parts["weight"].astype(mx.float32)
            continue
        bits, group = _quant_layout(parts, in_dims_of[prefix])
        if dequantize:
            final[f"{prefix}.weight"] = mx.dequantize(
                parts["weight"], parts["scales"], parts["biases"], group_size=group, bits=bits
            ).astype(mx.float32)
        else:
            quant[prefix] = (bits, group)
            final.update({f"{prefix}.{s}": parts[s] for s in _SUFFIXES})
    if quant:
        nn.quantize(
            model,
            class_predicate=lambda p, m: (
                {"bits": quant[p][0], "group_size": quant[p][1]} if p in quant else False
            ),
        )
    try:
        model.load_weights(list(final.items()), strict=True)
    except ValueError as e:
        raise ModelLoadError(f"GGUF weights do not match the llama model: {e}") from e
    mx.eval(model.parameters())
    return model


def build_tokenizer(meta: dict[str, Any]):
    """A `PreTrainedTokenizerFast` from the GGUF's gpt2-style BPE vocabulary and merges."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    kind = _scalar(meta, "tokenizer.ggml.model", "")
    if kind != "gpt2":
        raise ModelLoadError(
            f"GGUF tokenizer type '{kind or 'missing'}' is not supported (byte-level BPE 'gpt2' only)"
        )
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if _scalar(meta, "tokenizer.ggml.pre", "") in ("smollm", "starcoder", "refact"):
        # These vocabularies split digits one by one before the byte-level regex.
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type")
    if types is not None:
        control = [tokens[i] for i, t in enumerate(types.tolist()) if t in (3, 4)]
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])

    def tok_at(key: str) -> str | None:
        i = meta.get(key)
        return tokens[int(i.item())] if i is not None else None

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=tok_at("tokenizer.ggml.bos_token_id"),
        eos_token=tok_at("tokenizer.ggml.eos_token_id"),
        unk_token=tok_at("tokenizer.ggml.unknown_token_id"),
        pad_token=tok_at("tokenizer.ggml.padding_token_id"),
        chat_template=meta.get("tokenizer.chat_template"),
        clean_up_tokenization_spaces=False,
    )


def load_gguf(path: Path, dequantize: bool):
    """(model, hf_tokenizer) from a llama-family GGUF file."""
    weights, meta = read_gguf(path)
    args = model_args(meta, weights)
    tokenizer = build_tokenizer(meta)
    model = build_model(weights, args, dequantize=dequantize)
    return model, tokenizer

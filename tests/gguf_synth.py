"""Small synthetic GGUF files written with llama.cpp's `gguf` package, for loader tests.

A random mlx-lm model (llama or qwen2 layout) is written tensor by tensor in a chosen GGML
type: types `gguf.quants.quantize` implements are quantized from the model's weights; the
others (K-quants, IQ types) get random blocks with sane scale fields. `expected` holds what
each tensor must load as (llama.cpp's own dequantization of the written bytes), so a test can
compare the loader against an mlx-lm model built from exactly those values.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

# offsets of f16 scale fields inside one block, for types we fill with random blocks
_SCALE_FIELDS = {T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2),
                 T.Q6_K: (208,), T.IQ4_NL: (0,), T.IQ4_XS: (0,)}
QUANTIZABLE = (T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0)
EVERY_TYPE = (T.F32, *QUANTIZABLE, *_SCALE_FIELDS)
NATIVE = (T.F32, T.F16, T.Q4_0, T.Q4_1, T.Q8_0)  # what MLX's own GGUF reader reads

_LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
          "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
          "post_attention_layernorm": "ffn_norm"}
_TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def gguf_name(mlx_name: str) -> str:
    prefix, suffix = mlx_name.rsplit(".", 1)
    if prefix.startswith("model.layers."):
        _, _, n, rest = prefix.split(".", 3)
        return f"blk.{n}.{_LAYER[rest]}.{suffix}"
    return f"{_TOP[prefix]}.{suffix}"


def encode(w: np.ndarray, qtype: T, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(bytes or array to write, the f32 values llama.cpp reads back) for one 2-D tensor."""
    if qtype == T.F32:
        return w.astype(np.float32), w.astype(np.float32)
    if qtype in QUANTIZABLE:
        q = quantize(w.astype(np.float32), qtype)
        return q, dequantize(q, qtype).astype(np.float32)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = w.shape
    raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    for off in _SCALE_FIELDS[qtype]:
        raw[:, :, off : off + 2] = np.frombuffer(np.float16(0.002).tobytes(), np.uint8)
    raw = raw.reshape(rows, -1)
    return raw, dequantize(raw, qtype).astype(np.float32)


def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert script: reorder Q/K rows for GGML's interleaved RoPE."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def llama_unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of `llama_permute`: back to the Hugging Face row order."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def byte_vocab() -> tuple[list[str], list[int], list[str]]:
    """A byte-level BPE vocabulary: 256 byte symbols, a few merges, control and user tokens."""
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    merges = ["d e", "de f", "Ġ a", "r e", "re t", "ret u", "retu r", "retur n", "Ġ b"]
    tokens = alphabet + [m.replace(" ", "") for m in merges]
    types = [1] * len(tokens)
    for name, kind in (("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3),
                       ("<tool_call>", 4), ("</tool_call>", 4)):
        tokens.append(name)
        types.append(kind)
    return tokens, types, merges


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@dataclass
class Synth:
    path: Path
    args: dict  # mlx-lm ModelArgs fields of the reference model (HF layout, non-permuted)
    expected: dict[str, np.ndarray]  # mlx-lm name -> f32 values the loader must produce
    types: dict[str, T]


def tiny_args(arch: str, tied: bool, vocab: int) -> dict:
    return dict(model_type=arch, hidden_size=256, num_hidden_layers=2, intermediate_size=512,
                num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                vocab_size=vocab, rope_theta=10000.0, max_position_embeddings=512,
                rope_traditional=False, tie_word_embeddings=tied)


def random_weights(args: dict, seed: int) -> dict[str, np.ndarray]:
    """A random mlx-lm model's parameters, with non-zero attention biases for qwen2."""
    import importlib

    import mlx.core as mx
    from mlx.utils import tree_flatten

    mx.random.seed(seed)
    mod = importlib.import_module(f"mlx_lm.models.{args['model_type']}")
    model = mod.Model(mod.ModelArgs.from_dict(args))
    out = {k: np.array(v, dtype=np.float32) for k, v in tree_flatten(model.parameters())}
    rng = np.random.default_rng(seed)
    for k in out:
        if k.endswith(".bias") or k.endswith("norm.weight"):
            out[k] = (1.0 if k.endswith("norm.weight") else 0.0) + 0.1 * rng.standard_normal(
                out[k].shape).astype(np.float32)
    return out


def write(path: Path, arch: str, types_of=lambda name: T.F32, tied: bool = False,
          seed: int = 0, pre: str = "qwen2") -> Synth:
    """Write a tiny `arch` model; `types_of(mlx_name)` picks each 2-D tensor's GGML type."""
    tokens, ttypes, merges = byte_vocab()
    args = tiny_args(arch, tied, len(tokens))
    weights = random_weights(args, seed)
    rng = np.random.default_rng(seed + 1)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(args["num_hidden_layers"])
    w.add_context_length(args["max_position_embeddings"])
    w.add_embedding_length(args["hidden_size"])
    w.add_feed_forward_length(args["intermediate_size"])
    w.add_head_count(args["num_attention_heads"])
    w.add_head_count_kv(args["num_key_value_heads"])
    w.add_rope_freq_base(args["rope_theta"])
    w.add_layer_norm_rms_eps(args["rms_norm_eps"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(ttypes)
    w.add_token_merges(merges)
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_chat_template(CHATML)
    expected, types = {}, {}
    for name, value in weights.items():
        qtype = types_of(name) if value.ndim == 2 else T.F32
        stored = value
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = args["num_attention_heads" if "q_proj" in name else "num_key_value_heads"]
            stored = llama_permute(value, heads)
        data, back = encode(stored, qtype, rng)  # llama Q/K: in the file's (permuted) order
        expected[name], types[name] = back, qtype
        w.add_tensor(gguf_name(name), data, raw_dtype=None if qtype in (T.F32, T.F16) else qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Synth(path, args, expected, types)

"""Load a GGUF file (architectures in gguf_arch.ARCHES) into an mlx-lm model and a Hugging
Face tokenizer.

Two readers:
- MLX's native reader (`mx.load`) for files whose every tensor is F32, F16, Q4_0, Q4_1 or
  Q8_0: quantized tensors arrive as MLX affine triples, kept quantized or dequantized in C++.
- Otherwise (K-quants, Q5_0/Q5_1, BF16, IQ types ...) llama.cpp's `gguf` package:
  each tensor is read from the file by offset and turned into f32 with
  `gguf.quants.dequantize` (numpy). On the CPU the model runs in f32; on a GPU the linear
  layers are re-quantized to MLX affine 4-bit (sources under 6 bits per weight) or 8-bit.
  This conversion is cached in a folder the caller names (convert_cache), so later loads read safetensors.
Tensor names and hyper-parameters come from gguf_arch; the tokenizer from gguf_tokenizer.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from . import convert_cache
from .bounded import InputError, open_regular
from .errors import ModelLoadError
from .gguf_arch import args_dict, map_name, model_class
from .gguf_header import GGUFHeader, TensorInfo, mlx_readable, read_header
from .gguf_tokenizer import build_tokenizer, special_tokens, stop_ids

log = logging.getLogger(__name__)
_SUFFIXES = ("weight", "scales", "biases")
_GROUP = 64  # MLX affine group size used when re-quantizing on a GPU


@dataclass
class GGUFModel:
    model: nn.Module
    tokenizer: Any  # PreTrainedTokenizerFast
    stop_ids: list[int]
    reader: str  # "mlx", "gguf" (converted now) or "cache" (converted earlier)
    load_s: float


# ---- hyper-parameters, checked before any allocation ----------------------------------------

_ARG_CAPS = {"hidden_size": 1 << 16, "num_hidden_layers": 1 << 10, "intermediate_size": 1 << 18,
             "num_attention_heads": 1 << 10, "num_key_value_heads": 1 << 10,
             "vocab_size": 1 << 22, "max_position_embeddings": 1 << 24, "head_dim": 1 << 12}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_args(args: Any, what: str) -> None:
    """ModelLoadError unless `args` (an `args_dict`, from a file or a cache manifest) has
    whole numbers within caps and positive finite floats: the model is built from them."""
    if not isinstance(args, dict) or not isinstance(args.get("model_type"), str):
        raise ModelLoadError(f"{what}: model arguments are not an object with a model_type string")
    for key, cap in _ARG_CAPS.items():
        v = args.get(key, 1)
        if type(v) is not int or not 0 < v <= cap:
            raise ModelLoadError(f"{what}: model argument {key} = {_short(v)} is out of range (1..{cap})")
    for key in ("rms_norm_eps", "rope_theta"):
        v = args.get(key, 1.0)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < float("inf"):
            raise ModelLoadError(f"{what}: model argument {key} = {_short(v)} is out of range")


def model_args(header: GGUFHeader) -> dict[str, Any]:
    """The file's `args_dict`, checked: values of the right type and range, and a layer count
    and embedding that the tensor table has (so the model built is as large as the file)."""
    names = {t.name for t in header.tensors}
    try:
        args = args_dict(header.metadata, names)
    except (TypeError, ValueError, OverflowError) as e:  # e.g. a string or array where a number goes
        raise ModelLoadError(f"{header.path}: GGUF metadata has a value of the wrong type ({e})") from None
    check_args(args, str(header.path))
    layers = {n.split(".")[1] for n in names if n.startswith("blk.") and n.count(".") >= 2}
    if len(layers) != args["num_hidden_layers"]:
        raise ModelLoadError(f"{header.path}: GGUF metadata says {args['num_hidden_layers']} layers, "
                             f"its tensors have {len(layers)}")
    embed = next((t.shape for t in header.tensors if t.name == "token_embd.weight"), None)
    if embed is not None and tuple(embed) != (args["vocab_size"], args["hidden_size"]):
        raise ModelLoadError(f"{header.path}: token embedding {tuple(embed)} does not match the "
                             f"metadata (vocab {args['vocab_size']}, width {args['hidden_size']})")
    return args


# ---- the gguf-package reader ----------------------------------------------------------------

def dequantize_tensor(data: np.ndarray, t: TensorInfo) -> np.ndarray:
    """f32 values of tensor `t` from the file's bytes `data` (a uint8 memmap)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    raw = data[t.offset : t.offset + t.nbytes]
    if t.ggml_type == 0:
        return np.asarray(raw.view(np.float32).reshape(t.shape))
    if t.ggml_type == 1:
        return raw.view(np.float16).reshape(t.shape).astype(np.float32)
    try:
        qtype = GGMLQuantizationType(t.ggml_type)
        rows = raw.reshape(*t.shape[:-1], -1) if len(t.shape) > 1 else raw
        return dequantize(rows, qtype).reshape(t.shape).astype(np.float32, copy=False)
    except (NotImplementedError, ValueError) as e:
        raise ModelLoadError(f"tensor '{t.name}': GGML type {t.ggml_type} cannot be "
                             f"dequantized ({e})") from e


def _bits_for(ggml_type: int) -> int | None:
    """MLX affine bits to re-quantize a source type to on a GPU (None: keep it dense)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    if ggml_type in (0, 1, 30):  # F32, F16, BF16
        return None
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    return 4 if size * 8 / block < 6 else 8


def _requantize(model: nn.Module, source_types: dict[str, int]) -> dict[str, list[int]]:
    """Quantize linear/embedding layers whose source was quantized; returns {path: [bits, group]}."""
    plan: dict[str, list[int]] = {}
    for path, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding)) and m.weight.shape[-1] % _GROUP == 0:
            bits = _bits_for(source_types.get(f"{path}.weight", 0))
            if bits:
                plan[path] = [bits, _GROUP]
    _apply_quantization(model, plan)
    return plan


def _apply_quantization(model: nn.Module, plan: dict[str, list[int]]) -> None:
    if plan:
        nn.quantize(model, class_predicate=lambda p, m: (
            {"bits": plan[p][0], "group_size": plan[p][1]} if p in plan else False))


def _convert(header: GGUFHeader, dequantize: bool) -> tuple[nn.Module, dict[str, Any], dict]:
    """Dequantize every tensor with the gguf package into a fresh model."""
    args = model_args(header)
    cls, margs = model_class(args)
    model = cls(margs)
    data = np.memmap(header.path, dtype=np.uint8, mode="r")
    weights, source_types = [], {}
    for t in header.tensors:
        name = map_name(t.name)
        source_types[name] = t.ggml_type
        weights.append((name, mx.array(dequantize_tensor(data, t))))
    del data
    try:
        model.load_weights(weights, strict=True)
    except ValueError as e:
        raise ModelLoadError(f"GGUF weights do not match the {args['model_type']} model: {e}") from e
    plan = {} if dequantize else _requantize(model, source_types)
    mx.eval(model.parameters())
    return model, args, plan


def _load_converted(folder: Path, manifest: dict[str, Any]) -> nn.Module:
    check_args(manifest["args"], str(folder / "manifest.json"))
    cls, margs = model_class(manifest["args"])
    model = cls(margs)
    _apply_quantization(model, manifest.get("quantization", {}))
    with open_regular(folder / "model.safetensors", follow=False):
        pass  # a regular file, not a FIFO or a link: mx.load opens it by name
    model.load_weights(str(folder / "model.safetensors"), strict=True)
    mx.eval(model.parameters())
    return model


# What a damaged cache entry raises while loading: MLX's reader (RuntimeError, a
# UnicodeDecodeError on a bad header), shapes that do not match, our own checks.
_CACHE_ERRORS = (InputError, ModelLoadError, RuntimeError, ValueError, TypeError, KeyError, OSError)


def _load_cached(cache: Path, sha: str, fmt: str, t0: float) -> GGUFModel | None:
    """The cached conversion, or None when there is none or it is damaged (then deleted)."""
    hit = convert_cache.lookup(cache, sha, fmt)
    if hit is None:
        return None
    folder, manifest = hit
    try:
        model = _load_converted(folder, manifest)
        tok = convert_cache.load_tokenizer(folder, manifest)
    except _CACHE_ERRORS as e:
        convert_cache.discard(folder, " ".join(str(e).split())[:200] or type(e).__name__)
        return None
    return GGUFModel(model, tok, manifest["stop_ids"], "cache", time.perf_counter() - t0)


def _load_via_gguf(header: GGUFHeader, dequantize: bool, cache: Path | None, sha256: str) -> GGUFModel:
    from mlx.utils import tree_flatten

    t0 = time.perf_counter()
    fmt = "f32" if dequantize else f"affine-g{_GROUP}"
    sha = (sha256 or convert_cache.source_sha256(header.path, cache)) if cache else ""
    cached = _load_cached(cache, sha, fmt, t0) if cache else None
    if cached is not None:
        return cached
    meta = header.metadata
    tok = build_tokenizer(meta)
    model, args, plan = _convert(header, dequantize)
    stops = stop_ids(meta)
    if cache:
        manifest = {"source_name": header.path.name, "args": args, "quantization": plan,
                    "stop_ids": stops, "special_tokens": special_tokens(meta),
                    "chat_template": meta.get("tokenizer.chat_template")}
        where = convert_cache.save(cache, sha, fmt, dict(tree_flatten(model.parameters())), tok, manifest)
        log.info("converted %s in %.1f s; cached at %s", header.path.name,
                 time.perf_counter() - t0, where)
    return GGUFModel(model, tok, stops, "gguf", time.perf_counter() - t0)


# ---- MLX's native reader ----------------------------------------------------------------------

def _quant_layout(w: dict[str, mx.array], in_dims: int) -> tuple[int, int]:
    """(bits, group_size) of one affine-quantized tensor triple."""
    bits = w["weight"].shape[-1] * 32 // in_dims
    group = in_dims // w["scales"].shape[-1]
    return bits, group


def build_native(weights: dict[str, mx.array], args: dict[str, Any], dequantize: bool) -> nn.Module:
    """Instantiate the model from `mx.load`'s tensors; quantized layers stay quantized unless
    `dequantize`."""
    cls, margs = model_class(args)
    groups: dict[str, dict[str, mx.array]] = {}
    for k, v in weights.items():
        prefix, suffix = map_name(k).rsplit(".", 1)
        groups.setdefault(prefix, {})[suffix] = v
    model = cls(margs)
    in_dims_of = {p: m.weight.shape[-1] for p, m in model.named_modules() if hasattr(m, "weight")}
    final: dict[str, mx.array] = {}
    plan: dict[str, list[int]] = {}
    for prefix, parts in groups.items():
        if prefix not in in_dims_of:
            raise ModelLoadError(f"GGUF tensor '{prefix}' does not fit a {args['model_type']} model")
        if "bias" in parts:
            final[f"{prefix}.bias"] = parts["bias"].astype(mx.float32)
        if "scales" not in parts:
            final[f"{prefix}.weight"] = parts["weight"].astype(mx.float32)
            continue
        bits, group = _quant_layout(parts, in_dims_of[prefix])
        if dequantize:
            final[f"{prefix}.weight"] = mx.dequantize(
                parts["weight"], parts["scales"], parts["biases"], group_size=group, bits=bits
            ).astype(mx.float32)
        else:
            plan[prefix] = [bits, group]
            final.update({f"{prefix}.{s}": parts[s] for s in _SUFFIXES})
    _apply_quantization(model, plan)
    try:
        model.load_weights(list(final.items()), strict=True)
    except ValueError as e:
        raise ModelLoadError(f"GGUF weights do not match the {args['model_type']} model: {e}") from e
    mx.eval(model.parameters())
    return model


def _load_native(header: GGUFHeader, dequantize: bool) -> GGUFModel:
    t0 = time.perf_counter()
    try:
        weights = mx.load(str(header.path))
    except (RuntimeError, ValueError, OSError) as e:
        raise ModelLoadError(f"cannot read GGUF file {header.path}: {e}") from e
    args = model_args(header)
    tok = build_tokenizer(header.metadata)
    model = build_native(weights, args, dequantize)
    return GGUFModel(model, tok, stop_ids(header.metadata), "mlx", time.perf_counter() - t0)


def load_gguf(path: Path, dequantize: bool, cache: Path | None = None, sha256: str = "",
              reader: str = "auto") -> GGUFModel:
    """Load a GGUF file. `reader`: auto (MLX's where it reads every tensor), mlx, or gguf.
    `cache`: a folder to keep and reuse converted weights in (gguf-package reader only);
    `sha256`: the file's digest when known (else hashed once and memoised there)."""
    header = read_header(path)
    model_args(header)  # refuse unsupported architectures and bad values before any work
    native = mlx_readable(header)
    if reader == "mlx" or (reader == "auto" and native):
        if not native:
            raise ModelLoadError(f"{path}: MLX's GGUF reader cannot read its tensor types")
        return _load_native(header, dequantize)
    return _load_via_gguf(header, dequantize, cache, sha256)

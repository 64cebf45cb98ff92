"""One function loads every model: `load_model(ref, device)`.

A reference is a `.gguf` file (agent/engine/gguf.py), a local MLX/HF model folder or a Hub id
(`mlx_lm.load`). Store models by name are resolved above the engine (agent/models.py), which
hands this module the file, where converted weights are cached and the file's known sha256.
Device policy: on the CPU, quantized and half-precision weights become dense f32 so that the
matrix products of a verify pass go through (Open)BLAS, and the model's attention
goes through `agent.engine.attention` (long query blocks computed with numpy); on Metal/CUDA
they stay as they are.
"""

from __future__ import annotations

import atexit
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from .bounded import InputError, read_json
from .errors import ModelLoadError, ModelNotFoundError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def release_streams() -> None:
    """Free the MLX streams of the calling thread. MLX frees a thread's streams only on that
    thread: a thread that ran model work and ends holding them (the main thread included, at
    interpreter exit) can abort the process at exit with "terminate called without an active
    exception", exit status 134 after a run that succeeded. Call it as the last MLX work of
    every thread that ran any; MLX work on the thread afterwards raises."""
    if hasattr(mx, "clear_streams"):
        mx.clear_streams()


_main_release: list[bool] = []


def _release_main_streams_at_exit() -> None:
    """Once per process: free the main thread's streams at exit. atexit handlers run on the
    main thread once the threads that are not daemons have ended, last registered first: this
    one comes before any prefix store's (whose writer joins at exit), so it runs after them. On
    a main thread that never ran MLX work it does nothing."""
    if not _main_release:
        _main_release.append(True)
        atexit.register(release_streams)


@dataclass
class LoadedModel:
    """A model ready for the engine: the module, a `TokenizerWrapper`, and facts about it."""

    model: nn.Module
    tokenizer: Any  # mlx_lm.tokenizer_utils.TokenizerWrapper
    name: str
    source: str  # "gguf", "mlx"
    dtype: str  # "float32", "4-bit", ...
    device: str  # "cpu" or "gpu"

    @property
    def num_params(self) -> int:
        from mlx.utils import tree_flatten

        return sum(v.size for _, v in tree_flatten(self.model.parameters()))

    @property
    def nbytes(self) -> int:
        from mlx.utils import tree_flatten

        return sum(v.nbytes for _, v in tree_flatten(self.model.parameters()))

    @property
    def eos_ids(self) -> set[int]:
        return set(self.tokenizer.eos_token_ids)

    @property
    def vocab_size(self) -> int:
        return int(self.model.args.vocab_size)


def select_device(device: str = "auto") -> str:
    """Set MLX's default device; returns 'cpu' or 'gpu'."""
    if device == "auto":
        device = "gpu" if mx.is_available(mx.gpu) else "cpu"
    if device not in ("cpu", "gpu"):
        raise ModelLoadError(f"unknown device '{device}' (use auto, cpu or gpu)")
    if device == "gpu" and not mx.is_available(mx.gpu):
        raise ModelLoadError("no GPU backend in this MLX build (use --device cpu)")
    mx.set_default_device(mx.gpu if device == "gpu" else mx.cpu)
    return device


def densify_f32(model: nn.Module) -> None:
    """Replace quantized layers by dense f32 ones and cast every float weight to f32."""
    from mlx.utils import tree_unflatten

    swaps = []
    for name, m in model.named_modules():
        if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            w = mx.dequantize(
                m.weight, m.scales, m.get("biases"), group_size=m.group_size, bits=m.bits,
                mode=getattr(m, "mode", "affine"),
            ).astype(mx.float32)
            if isinstance(m, nn.QuantizedEmbedding):
                dense = nn.Embedding(*w.shape)
            else:
                dense = nn.Linear(w.shape[1], w.shape[0], bias="bias" in m)
                if "bias" in m:
                    dense.bias = m.bias.astype(mx.float32)
            dense.weight = w
            swaps.append((name, dense))
    if swaps:
        model.update_modules(tree_unflatten(swaps))
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())


def _describe_dtype(model: nn.Module) -> str:
    for _, m in model.named_modules():
        if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            return f"{m.bits}-bit"
    return str(model.model.embed_tokens.weight.dtype).replace("mlx.core.", "")


def resolve(ref: str) -> tuple[str, Path | str]:
    """('gguf'|'mlx', path or hub id) for a model reference, or a clear error."""
    p = Path(ref).expanduser()
    if p.is_file():
        if p.suffix.lower() != ".gguf":
            raise ModelLoadError(f"{p}: not a .gguf file or a model folder")
        return "gguf", p
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelLoadError(f"{p}: not a model folder (no config.json)")
        _check_folder_json(p)
        return "mlx", p
    if p.exists():
        raise ModelLoadError(f"{p}: not a regular file or a model folder")
    if _HUB_ID.match(ref) and not ref.startswith((".", "/", "~")):
        return "mlx", ref
    raise ModelNotFoundError(f"model not found: {ref}")


_FOLDER_JSON = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
                "special_tokens_map.json")


def _check_folder_json(folder: Path) -> None:
    """A model folder's JSON files read once through the bounded reader (regular files,
    size and nesting caps) before mlx-lm and transformers parse them without limits."""
    for name in _FOLDER_JSON:
        try:
            doc = read_json(folder / name)
        except FileNotFoundError:
            continue
        except InputError as e:
            raise ModelLoadError(str(e)) from None
        if name == "config.json":
            _check_config(doc, folder / name)


def _check_config(config: Any, path: Path) -> None:
    """ModelLoadError unless `config` is an object with a `model_type` and its sizes are whole
    numbers within the caps GGUF files get (mlx-lm builds the model from them unchecked);
    a null stands for an absent key, and the context length is not capped (nothing is sized by it)."""
    from .gguf import check_args

    if not isinstance(config, dict):
        raise ModelLoadError(f"{path}: not a JSON object")
    args = {k: v for k, v in config.items() if v is not None and k != "max_position_embeddings"}
    check_args(args, str(path))


def _wrap_tokenizer(hf_tokenizer, eos_ids: list[int] | None = None):
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    return TokenizerWrapper(hf_tokenizer, eos_token_ids=eos_ids)


def load_model(ref: str, device: str = "auto", dense: bool | None = None, cache: Path | None = None,
               sha256: str = "", name: str = "") -> LoadedModel:
    """Load a model for the engine. `dense=None` follows the device policy above; `cache`: the
    folder for converted GGUF weights (None: convert every time); `sha256`: the GGUF file's
    digest when the caller knows it (else hashed once); `name`: what to call it."""
    device = select_device(device)
    dense = (device == "cpu") if dense is None else dense
    kind, where = resolve(ref)
    _release_main_streams_at_exit()
    if kind == "gguf":
        from .gguf import load_gguf

        loaded = load_gguf(Path(where), dequantize=dense, cache=cache, sha256=sha256)
        model, tokenizer = loaded.model, _wrap_tokenizer(loaded.tokenizer, loaded.stop_ids)
        name = name or Path(where).stem
        source = {"cache": "gguf (converted, cached)", "gguf": "gguf (converted)"}.get(
            loaded.reader, "gguf")
    else:
        from mlx_lm import load as mlx_load

        try:
            model, tokenizer = mlx_load(str(where))
        except (FileNotFoundError, ValueError, OSError) as e:
            raise ModelLoadError(f"cannot load model {where}: {e}") from e
        except (TypeError, KeyError, AttributeError, IndexError, AssertionError, OverflowError,
                MemoryError) as e:  # a config value mlx-lm cannot build a model from
            raise ModelLoadError(f"cannot load model {where}: {type(e).__name__}: {e}") from e
        if dense:
            densify_f32(model)
        name = name or Path(str(where)).name
        source = kind
    if device == "cpu":  # MLX's Linux CPU exp has no SIMD: prefill's exponentials in numpy
        from . import attention, cpu_mlp

        attention.install(model)
        cpu_mlp.install(model)
    return LoadedModel(model, tokenizer, name, source, _describe_dtype(model), device)

"""The SwiGLU activation of long blocks on the CPU, computed with numpy.

mlx-lm's llama/qwen2 MLP computes `silu(gate) * up` with MLX; MLX's Linux CPU backend
evaluates the exponential inside `silu` one float at a time (no SIMD). For a 512-token block
of a 2,560-wide MLP that is ~150 ms per layer here, against ~10 ms with numpy's vectorised
`exp`, so for prefill the activation costs more than the MLP's matrix products.

Scope: the CPU device, float32, blocks of at least `MIN_ROWS` tokens (prefill chunks).
Decode steps and verify passes (a few tokens), GPUs and other dtypes keep mlx-lm's compiled
`swiglu`. `install(model)` routes an mlx-lm model module's module-level `swiglu` name (looked
up by its MLP at call time) through `swiglu` below; `uninstall` puts the original back.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx_lm.models import activations as _act

from .module_patch import ModulePatch

MIN_ROWS = 64  # tokens in a block; shorter blocks keep MLX's path



def applies(gate: mx.array, x: mx.array) -> bool:
    return (gate.ndim >= 2 and gate.shape[-2] >= MIN_ROWS and gate.dtype == mx.float32
            and x.dtype == mx.float32 and gate.shape == x.shape
            and mx.default_device().type == mx.DeviceType.cpu)


def swiglu(gate: mx.array, x: mx.array) -> mx.array:
    """silu(gate) * x, as `mlx_lm.models.activations.swiglu`."""
    if not applies(gate, x):
        return _act.swiglu(gate, x)
    mx.eval(gate, x)
    g = np.asarray(gate)
    out = np.negative(g)
    with np.errstate(over="ignore"):  # exp(-g) = inf for very negative g gives silu = -0
        np.exp(out, out=out)
    out += 1.0
    np.divide(g, out, out=out)
    out *= np.asarray(x)
    return mx.array(out)


_patch = ModulePatch("swiglu", _act.swiglu, swiglu)
# `install(model)` routes `model`'s mlx-lm module's `swiglu` here (True if it is); `uninstall`
# puts the original back.
install, uninstall = _patch.install, _patch.uninstall

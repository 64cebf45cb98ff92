"""SwiGLU of long blocks in numpy: equal to mlx-lm's within float tolerance, only where it
applies, reversible, and greedy output unchanged."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models import activations

from agent.engine import cpu_mlp
from agent.engine.session import Session
from agent.events import TextDelta


@pytest.mark.parametrize("rows", [64, 300])
def test_matches_mlx(rows):
    gate = mx.random.normal((1, rows, 96)) * 30  # large magnitudes: exp overflow territory
    x = mx.random.normal((1, rows, 96))
    want = activations.swiglu(gate, x)
    got = cpu_mlp.swiglu(gate, x)
    assert got.shape == want.shape and got.dtype == mx.float32
    assert mx.allclose(got, want, atol=1e-5, rtol=1e-5).item()


@pytest.mark.parametrize("shape,dtype", [((1, 8, 96), mx.float32), ((1, 128, 96), mx.float16)])
def test_short_blocks_and_other_dtypes_keep_mlx_path(shape, dtype):
    gate, x = mx.random.normal(shape).astype(dtype), mx.random.normal(shape).astype(dtype)
    assert not cpu_mlp.applies(gate, x)


def greedy(lm, prompt, n=24):
    s = Session(lm, prefill_chunk=128)
    return [t for e in s.generate(prompt, max_tokens=n, stop_tokens=set())
            if isinstance(e, TextDelta) for t in e.tokens]


def test_installed_on_cpu_load_and_output_unchanged(llama):
    module = __import__(type(llama.model).__module__, fromlist=["swiglu"])
    assert module.swiglu is cpu_mlp.swiglu  # load_model installs it on the CPU
    prompt = Session(llama).render([{"role": "user", "content": "def add(a, b):\n" * 40}])
    assert len(prompt) > 2 * cpu_mlp.MIN_ROWS
    with_numpy = greedy(llama, prompt)
    cpu_mlp.uninstall(llama.model)
    try:
        assert module.swiglu is activations.swiglu
        assert greedy(llama, prompt) == with_numpy
    finally:
        assert cpu_mlp.install(llama.model)

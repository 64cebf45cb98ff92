"""Prefill on the CPU: the numpy attention equals MLX's, is installed only where it applies,
and leaves greedy output unchanged; the OpenBLAS kernel choice and its on-disk verdict."""

from __future__ import annotations

import json
import sys

import mlx.core as mx
import pytest
from mlx_lm.models import base

from agent.engine import attention, blas
from agent.engine.sampling import SamplingParams
from agent.engine.session import Session
from agent.engine.step import plain_decode, prefill
from agent.events import TextDelta


def _qkv(heads: int, kv_heads: int, dim: int, q_len: int, k_len: int, batch: int = 1, seed=0):
    key = mx.random.key(seed)
    k1, k2, k3 = mx.random.split(key, 3)
    q = mx.random.normal((batch, heads, q_len, dim), key=k1)
    k = mx.random.normal((batch, kv_heads, k_len, dim), key=k2)
    v = mx.random.normal((batch, kv_heads, k_len, dim), key=k3)
    return q, k, v


@pytest.mark.parametrize(
    "heads,kv_heads,dim,q_len,k_len,mask,batch",
    [
        (9, 3, 64, 128, 128, "causal", 1),  # SmolLM2's GQA, fresh cache
        (9, 3, 64, 128, 700, "causal", 1),  # a chunk after 572 cached tokens
        (14, 2, 64, 200, 1000, "causal", 1),  # Qwen2.5-0.5B's GQA, ragged block
        (8, 8, 128, 96, 96, None, 2),  # head dim 128, no mask, batch 2
        (4, 1, 128, 64, 64, "causal", 1),
    ],
)
def test_matches_mlx_attention(heads, kv_heads, dim, q_len, k_len, mask, batch):
    q, k, v = _qkv(heads, kv_heads, dim, q_len, k_len, batch)
    scale = dim**-0.5
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    got = attention.prefill_attention(q, k, v, scale, causal=mask is not None)
    assert got.shape == want.shape and got.dtype == mx.float32
    assert mx.abs(got - want).max().item() < 1e-4


@pytest.mark.parametrize("q_len,k_len", [(7, 5000), (70, 300)])
def test_boolean_masks_match_mlx(q_len, k_len, monkeypatch):
    """A token tree's verify pass (each row sees the prefix and some of the new rows) over
    many cached keys takes the numpy path and equals MLX's masked attention."""
    import numpy as np

    q, k, v = _qkv(14, 2, 64, q_len, k_len, seed=2)
    rng = np.random.default_rng(0)
    allowed = np.ones((q_len, k_len), dtype=bool)
    allowed[:, k_len - q_len:] = rng.random((q_len, q_len)) < 0.4
    allowed[:, k_len - q_len:] |= np.eye(q_len, dtype=bool)
    mask = mx.array(allowed)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=mask)
    assert attention.applies(q, k, None, mask, None)
    monkeypatch.setattr(base, "scaled_dot_product_attention",
                        lambda *a, **kw: pytest.fail("MLX path used"))
    got = attention.scaled_dot_product_attention(q, k, v, None, scale=0.125, mask=mask)
    assert mx.abs(got - want).max().item() < 1e-4


def test_strided_cache_views_are_read_correctly():
    """Keys arrive as slices of the KV cache's larger buffer (not contiguous)."""
    q, k, v = _qkv(9, 3, 64, 100, 512, seed=1)
    ks, vs = k[:, :, :300, :], v[:, :, :300, :]
    want = mx.fast.scaled_dot_product_attention(q, ks, vs, scale=0.125, mask="causal")
    got = attention.prefill_attention(q, ks, vs, 0.125, causal=True)
    assert mx.abs(got - want).max().item() < 1e-4


class _QuantCache:
    bits, group_size = 8, 64


@pytest.mark.parametrize("case", ["decode", "verify", "array_mask", "sinks", "quantized",
                                  "float16", "gpu"])
def test_other_calls_keep_mlx_path(case, monkeypatch):
    calls = []
    monkeypatch.setattr(base, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1) or "mlx")
    q, k, v = _qkv(9, 3, 64, 128, 128)
    cache, mask, sinks = None, "causal", None
    if case in ("decode", "verify"):
        q = q[:, :, : (1 if case == "decode" else attention.MIN_QUERIES - 1)]
    elif case == "array_mask":  # additive: MLX's (boolean masks take the numpy path)
        mask = mx.where(base.create_causal_mask(128), 0.0, -mx.inf)
    elif case == "sinks":
        sinks = mx.zeros((9,))
    elif case == "quantized":
        cache = _QuantCache()
    elif case == "float16":
        q, k, v = (x.astype(mx.float16) for x in (q, k, v))
    elif case == "gpu":
        monkeypatch.setattr(attention, "_on_cpu", lambda: False)
    out = attention.scaled_dot_product_attention(q, k, v, cache, scale=0.125, mask=mask,
                                                 sinks=sinks)
    assert out == "mlx" and calls == [1]


def test_prefill_blocks_take_numpy_path(monkeypatch):
    monkeypatch.setattr(base, "scaled_dot_product_attention",
                        lambda *a, **k: pytest.fail("MLX path used"))
    q, k, v = _qkv(9, 3, 64, attention.MIN_QUERIES, 300)
    out = attention.scaled_dot_product_attention(q, k, v, None, scale=0.125, mask="causal")
    assert out.shape == q.shape


def test_install_is_reversible(llama):
    module = sys.modules[type(llama.model).__module__]
    assert attention.installed(llama.model)  # load_model installs it for CPU models
    try:
        attention.uninstall(llama.model)
        assert module.scaled_dot_product_attention is base.scaled_dot_product_attention
        assert not attention.installed(llama.model)
        assert attention.install(llama.model) and attention.install(llama.model)  # idempotent
        assert module.scaled_dot_product_attention is attention.scaled_dot_product_attention
    finally:
        attention.install(llama.model)


def test_install_leaves_custom_attention_alone():
    class Model:  # a module without mlx-lm's stock attention function
        pass

    assert not attention.install(Model())
    assert not hasattr(sys.modules[__name__], "scaled_dot_product_attention")


def _greedy(lm, prompt: list[int], n: int, chunk: int = 128) -> list[int]:
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(lm.model)
    prefill(lm.model, prompt[:-1], cache, chunk=chunk)
    out = []
    for tok in plain_decode(lm.model, cache, prompt[-1], SamplingParams()):
        out.append(tok)
        if len(out) == n:
            return out


def _with_and_without(lm, prompt: list[int], n: int, monkeypatch) -> tuple[list, list]:
    used = []
    real = attention.prefill_attention
    monkeypatch.setattr(attention, "prefill_attention", lambda *a, **k: used.append(1) or real(*a, **k))
    try:
        attention.uninstall(lm.model)
        plain = _greedy(lm, prompt, n)
        assert not used
        attention.install(lm.model)
        fast = _greedy(lm, prompt, n)
        assert used  # the prefill chunks went through numpy
    finally:
        attention.install(lm.model)
    return plain, fast


def test_greedy_output_unchanged_tiny_llama(llama, monkeypatch):
    prompt = llama.tokenizer.encode("def add(a, b):\n    return a + b\n" * 20)[:300]
    assert len(prompt) >= 200
    plain, fast = _with_and_without(llama, prompt, 30, monkeypatch)
    assert fast == plain


@pytest.mark.embedded
def test_greedy_output_unchanged_embedded(embedded, monkeypatch):
    text = open(attention.__file__).read()
    prompt = embedded.tokenizer.encode(
        "Summarise what this module does:\n\n" + text)[:600]
    assert len(prompt) == 600
    plain, fast = _with_and_without(embedded, prompt, 30, monkeypatch)
    assert fast == plain


# --- OpenBLAS kernel choice ----------------------------------------------------------------


@pytest.mark.parametrize("flags,want", [
    ({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma"}, "SkylakeX"),
    ({"avx512f", "avx2", "fma"}, "Haswell"),  # AVX-512 foundation only: not SkylakeX
    ({"avx2", "fma"}, "Haswell"),
    ({"avx", "sse4_2"}, None),
])
def test_coretype_from_flags(flags, want):
    assert blas.coretype_for(flags) == want


def test_coretype_verdict_is_checked_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path))
    monkeypatch.setattr(blas, "cpu_info", lambda: ("Test CPU", {"avx2", "fma"}))
    checks = []
    monkeypatch.setattr(blas, "check_coretype", lambda lib, ct: checks.append(ct) or 3e-7)
    assert blas.verified_coretype("/x/libopenblas.so.0", tmp_path / "blas-coretype.json") == "Haswell"
    assert blas.verified_coretype("/x/libopenblas.so.0", tmp_path / "blas-coretype.json") == "Haswell"
    assert checks == ["Haswell"]
    saved = json.loads((tmp_path / "blas-coretype.json").read_text())
    assert [v["ok"] for v in saved.values()] == [True]


@pytest.mark.parametrize("error", [1e-2, None])  # wrong results, or the check crashed
def test_coretype_falls_back_when_check_fails(error, tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path))
    monkeypatch.setattr(blas, "cpu_info", lambda: ("Test CPU", {"avx2", "fma"}))
    monkeypatch.setattr(blas, "check_coretype", lambda lib, ct: error)
    assert blas.verified_coretype("/x/libopenblas.so.0", tmp_path / "blas-coretype.json") is None


def _reexec_env(monkeypatch, tmp_path, **env) -> dict:
    """The environment `ensure_openblas` would exec with (the exec itself intercepted)."""
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path))
    for k in ("LD_PRELOAD", "OPENBLAS_CORETYPE", "SPEC_AGENT_BLAS_REEXEC"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(blas, "openblas_library", lambda: "/x/libopenblas.so.0")
    monkeypatch.setattr(blas, "verified_coretype", lambda lib, verdicts: "SkylakeX")
    seen = {}

    def fake_execve(path, argv, env):
        seen.update(env)
        raise SystemExit(0)

    monkeypatch.setattr(blas.os, "execve", fake_execve)
    with pytest.raises(SystemExit):
        blas.ensure_openblas("auto")
    return seen


def test_reexec_sets_verified_coretype(monkeypatch, tmp_path):
    env = _reexec_env(monkeypatch, tmp_path)
    assert env["OPENBLAS_CORETYPE"] == "SkylakeX" and "libopenblas" in env["LD_PRELOAD"]


def test_reexec_keeps_users_coretype(monkeypatch, tmp_path):
    env = _reexec_env(monkeypatch, tmp_path, OPENBLAS_CORETYPE="Haswell")
    assert env["OPENBLAS_CORETYPE"] == "Haswell"


def test_blas_off_sets_nothing(monkeypatch):
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    monkeypatch.setattr(blas.os, "execve", lambda *a: pytest.fail("re-exec with --blas off"))
    assert blas.ensure_openblas("off") is None
    assert "OPENBLAS_CORETYPE" not in blas.os.environ


@pytest.mark.skipif(not sys.platform.startswith("linux") or blas.openblas_library() is None,
                    reason="needs Debian's OpenBLAS")
def test_real_coretype_check_is_accurate():
    """The check itself, run for real on this machine's CPU (a subprocess, ~1 s)."""
    coretype = blas.coretype_for(blas.cpu_info()[1])
    if coretype is None:
        pytest.skip("no AVX2/AVX-512 on this CPU")
    error = blas.check_coretype(blas.openblas_library(), coretype)
    assert error is not None and error < 1e-4


def test_verify_blocks_over_many_keys_take_numpy_path_greedy_exact(pair, monkeypatch):
    """Multi-token blocks over enough cached keys (verify passes at long context, a short new
    message) use the numpy path; speculative greedy output still equals plain greedy."""
    from agent.engine.drafters import DraftModel
    from agent.engine.speculative import SpecPolicy, Speculator

    target, draft = pair
    q, k, v = _qkv(9, 3, 64, 5, attention.MIN_SCORES // 5 + 1)
    assert attention.applies(q, k, None, "causal", None)
    assert not attention.applies(q[:, :, :1], k, None, "causal", None)  # decode keeps MLX
    monkeypatch.setattr(attention, "MIN_SCORES", 64)  # every verify pass of this test
    used = []
    real = attention.prefill_attention
    monkeypatch.setattr(attention, "prefill_attention",
                        lambda *a, **kw: used.append(a[0].shape[2]) or real(*a, **kw))
    prompt = Session(target).render([{"role": "user", "content": "def add(a, b):\n" * 8}])

    def tokens(session):
        return [t for e in session.generate(prompt, max_tokens=64, stop_tokens=set())
                if isinstance(e, TextDelta) for t in e.tokens]

    plain = tokens(Session(target))
    spec = tokens(Session(target, speculator=Speculator(DraftModel(draft),
                                                        SpecPolicy(mode="on", fixed_k=4))))
    assert spec == plain
    assert any(1 < n < attention.MIN_QUERIES for n in used)  # verify passes went through numpy

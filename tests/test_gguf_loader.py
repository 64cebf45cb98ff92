"""GGUF loader on small synthetic files written with llama.cpp's `gguf` package: every quant
type, llama and qwen2 layouts, biases, tied and untied heads, MLX's reader vs ours, the
converted-weights cache, and the byte-level tokenizer per `tokenizer.ggml.pre`."""

from __future__ import annotations

import importlib
import json

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from agent.engine.errors import ModelLoadError
from agent.engine.gguf import dequantize_tensor, load_gguf
from agent.engine.gguf_arch import map_name
from agent.engine.gguf_header import read_header
import gguf_synth
from gguf_synth import EVERY_TYPE, NATIVE, llama_unpermute

PROMPT = mx.array([[5, 17, 200, 3, 99, 42, 7, 250, 11, 64]])


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path / "home"))


def reference_logits(args: dict, weights: dict[str, np.ndarray], traditional: bool = False):
    """Logits of an mlx-lm model built directly from `weights` (Hugging Face row order)."""
    mod = importlib.import_module(f"mlx_lm.models.{args['model_type']}")
    model = mod.Model(mod.ModelArgs.from_dict(dict(args, rope_traditional=traditional)))
    model.load_weights([(k, mx.array(v)) for k, v in weights.items()], strict=True)
    return np.array(model(PROMPT))


def loaded_logits(path, **kw):
    return np.array(load_gguf(path, dequantize=True, **kw).model(PROMPT))


@pytest.mark.parametrize("qtype", EVERY_TYPE, ids=lambda t: t.name)
def test_every_type_reads_as_llama_cpp_dequantizes_it(tmp_path, qtype):
    s = gguf_synth.write(tmp_path / "m.gguf", "qwen2", lambda n: qtype)
    header = read_header(s.path)
    data = np.memmap(s.path, dtype=np.uint8, mode="r")
    seen = 0
    for t in header.tensors:
        got = dequantize_tensor(data, t)
        want = s.expected[map_name(t.name)]
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        seen += t.ggml_type == int(qtype)
    assert seen >= 7 * 2 + 1  # every projection of both layers and the embedding


@pytest.mark.parametrize("qtype", NATIVE, ids=lambda t: t.name)
def test_dequantized_equals_mlx_reader(tmp_path, qtype):
    s = gguf_synth.write(tmp_path / "m.gguf", "qwen2", lambda n: qtype)
    native = mx.load(str(s.path))
    data = np.memmap(s.path, dtype=np.uint8, mode="r")
    for t in read_header(s.path).tensors:
        w = native[t.name]
        if f"{t.name[:-len('weight')]}scales" in native:
            base = t.name[: -len("weight")]
            bits = w.shape[-1] * 32 // t.shape[-1]
            group = t.shape[-1] // native[base + "scales"].shape[-1]
            w = mx.dequantize(w, native[base + "scales"], native[base + "biases"],
                              group_size=group, bits=bits)
        want = np.array(w.astype(mx.float32))
        # MLX keeps a quantized tensor's scales and biases in f16: equal up to that rounding
        tol = 2.0**-9 * np.abs(want).max() if t.ggml_type in (2, 3, 8) else 1e-7
        np.testing.assert_allclose(dequantize_tensor(data, t), want, rtol=1e-6, atol=tol)


def test_qwen2_biases_untied_head_and_neox_rope(tmp_path):
    s = gguf_synth.write(tmp_path / "q.gguf", "qwen2", tied=False)
    assert "blk.0.attn_q.bias" in {t.name for t in read_header(s.path).tensors}
    want = reference_logits(s.args, s.expected)
    for reader in ("gguf", "mlx"):
        lm = load_gguf(s.path, dequantize=True, reader=reader)
        assert not lm.model.args.tie_word_embeddings and not lm.model.args.rope_traditional
        np.testing.assert_allclose(np.array(lm.model(PROMPT)), want, rtol=1e-4, atol=1e-4)
    # the comparison has teeth: the other RoPE convention changes the logits
    wrong = reference_logits(s.args, s.expected, traditional=True)
    assert np.abs(wrong - want).max() > 1e-2


def test_llama_permuted_qk_tied_head(tmp_path):
    s = gguf_synth.write(tmp_path / "l.gguf", "llama", tied=True, pre="smollm")
    assert "output.weight" not in {t.name for t in read_header(s.path).tensors}
    hf = dict(s.expected)
    for name in hf:
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = s.args["num_attention_heads" if "q_proj" in name else "num_key_value_heads"]
            hf[name] = llama_unpermute(hf[name], heads)
    want = reference_logits(s.args, hf)  # Hugging Face order, non-traditional RoPE
    for reader in ("gguf", "mlx"):
        lm = load_gguf(s.path, dequantize=True, reader=reader)
        assert lm.model.args.tie_word_embeddings and lm.model.args.rope_traditional
        np.testing.assert_allclose(np.array(lm.model(PROMPT)), want, rtol=1e-4, atol=1e-4)


def test_mixed_quant_model_matches_dequantized_reference(tmp_path):
    kinds = [T.Q4_K, T.Q5_0, T.Q6_K, T.Q8_0, T.Q5_K, T.Q4_0, T.Q3_K, T.BF16]
    pick = {}

    def types_of(name):
        return pick.setdefault(name, kinds[len(pick) % len(kinds)])

    s = gguf_synth.write(tmp_path / "mix.gguf", "qwen2", types_of)
    assert len(set(s.types.values())) == len(kinds) + 1  # + F32 norms and biases
    np.testing.assert_allclose(loaded_logits(s.path), reference_logits(s.args, s.expected),
                               rtol=1e-4, atol=1e-4)


def test_requantized_for_gpu_stays_close(tmp_path):
    s = gguf_synth.write(tmp_path / "q.gguf", "qwen2", lambda n: T.Q4_K if "mlp" in n else T.Q8_0)
    lm = load_gguf(s.path, dequantize=False)
    layer = lm.model.model.layers[0]
    assert (layer.mlp.up_proj.bits, layer.self_attn.q_proj.bits) == (4, 8)
    got = np.array(lm.model(PROMPT))
    want = loaded_logits(s.path)
    assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.95


def test_converted_weights_are_cached_and_reused(tmp_path):
    from agent import store

    s = gguf_synth.write(tmp_path / "c.gguf", "qwen2", lambda n: T.Q4_K)
    cold = load_gguf(s.path, dequantize=True, cache=store.converted_root())
    warm = load_gguf(s.path, dequantize=True, cache=store.converted_root())
    assert (cold.reader, warm.reader) == ("gguf", "cache")
    np.testing.assert_array_equal(np.array(cold.model(PROMPT)), np.array(warm.model(PROMPT)))
    assert warm.stop_ids == cold.stop_ids
    text = "def f(x):\n    return x + 12 <tool_call>"
    assert warm.tokenizer.encode(text) == cold.tokenizer.encode(text)
    assert warm.tokenizer.chat_template == gguf_synth.CHATML
    (folder,) = store.converted_for(store.sha256_file(s.path))
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["source_sha256"] == store.sha256_file(s.path)
    (folder / "manifest.json").write_text("{broken")
    assert load_gguf(s.path, dequantize=True, cache=store.converted_root()).reader == "gguf"  # a bad cache is rebuilt


def test_requantized_conversion_is_cached_too(tmp_path):
    from agent import store

    s = gguf_synth.write(tmp_path / "g.gguf", "qwen2", lambda n: T.Q5_K)
    cold = load_gguf(s.path, dequantize=False, cache=store.converted_root())
    warm = load_gguf(s.path, dequantize=False, cache=store.converted_root())
    assert (cold.reader, warm.reader) == ("gguf", "cache")
    assert warm.model.model.layers[1].mlp.down_proj.bits == 4
    np.testing.assert_array_equal(np.array(cold.model(PROMPT)), np.array(warm.model(PROMPT)))
    assert load_gguf(s.path, dequantize=True, cache=store.converted_root()).reader == "gguf"  # f32 is a separate entry


def test_unsupported_architecture_and_tokenizer(tmp_path):
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "x.gguf"), "mamba")
    w.add_tensor("w", np.zeros((4, 32), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(ModelLoadError, match="architecture 'mamba' is not supported"):
        load_gguf(tmp_path / "x.gguf", dequantize=True)


def test_tokenizer_pre_qwen2_digits_control_and_user_tokens(tmp_path):
    s = gguf_synth.write(tmp_path / "t.gguf", "qwen2")
    tok = load_gguf(s.path, dequantize=True).tokenizer
    tokens, _, _ = gguf_synth.byte_vocab()
    ids = tok.encode("x = 123")
    assert [tokens[i] for i in ids][-3:] == ["1", "2", "3"]  # digits one by one
    ids = tok.encode("<|im_start|>def<tool_call>")
    assert [tokens[i] for i in ids] == ["<|im_start|>", "def", "<tool_call>"]
    assert tok.decode(ids, skip_special_tokens=True) == "def<tool_call>"
    for text in ["héllo wörld\n\n\tdef  return  b", "日本語 🙂 x", " \r\n  12345 a's"]:
        assert tok.decode(tok.encode(text)) == text
    assert tok.eos_token == "<|im_end|>"


def test_memory_estimate_counts_f32_on_the_cpu(tmp_path, monkeypatch):
    from mlx.utils import tree_flatten

    from agent.engine import pairing

    s = gguf_synth.write(tmp_path / "e.gguf", "qwen2", lambda n: T.Q4_K)
    lm = load_gguf(s.path, dequantize=True)
    loaded = sum(v.nbytes for _, v in tree_flatten(lm.model.parameters()))
    assert pairing.estimate_weight_bytes(str(s.path), "cpu") == loaded
    assert pairing.estimate_weight_bytes(str(s.path), "gpu") < loaded / 4  # Q4_K stays small
    monkeypatch.setattr(pairing, "available_memory", lambda: loaded * 2)
    assert pairing.preload_warnings(str(s.path), str(s.path), "cpu", 0.0) == []
    monkeypatch.setattr(pairing, "available_memory", lambda: loaded * 2 - 1)
    (w,) = pairing.preload_warnings(str(s.path), str(s.path), "cpu", 0.0)
    assert "f32 weights" in w and "headroom" in w

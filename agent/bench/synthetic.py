"""Small real pieces for tests and CPU benchmarks: a BPE tokenizer trained offline, random-weight
model folders, and a *controlled* target/draft pair whose agreement is tunable.

Everything is written as an ordinary MLX model folder (config.json, model.safetensors,
tokenizer files) and loaded through the same `load_model` a user's model goes through.

Controlled pair: the draft is a random n-layer llama; the target has the same embedding, head,
final norm and those n layers, plus extra random layers whose `o_proj`/`down_proj` are scaled by ε.
Each extra layer adds ε-sized residual updates, so ε tunes how often the two disagree
(ε = 0: identical predictions; larger ε: lower acceptance).
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _corpus(max_bytes: int) -> list[str]:
    """Deterministic training text: this Python's own standard-library sources."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts, total = [], 0
    for name in ("json", "email", "asyncio", "unittest", "logging", "http", "xml", "importlib"):
        for p in sorted((stdlib / name).rglob("*.py")):
            t = p.read_text(encoding="utf-8", errors="replace")
            texts.append(t)
            total += len(t)
            if total >= max_bytes:
                return texts
    return texts


def train_tokenizer(folder: Path, vocab_size: int = 512) -> None:
    """Train a byte-level BPE tokenizer and save HF tokenizer files into `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(max_bytes=300_000 + vocab_size * 200), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML,
        clean_up_tokenization_spaces=False,
    )
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(folder))


def _config(model_type: str, vocab: int, hidden: int, layers: int, **over) -> dict:
    heads = max(1, hidden // 64)
    cfg = {
        "model_type": model_type,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": hidden * 2,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": max(1, heads // 2) if heads % 2 == 0 else heads,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
    }
    cfg.update(over)
    return cfg


def build_model(cfg: dict, seed: int) -> nn.Module:
    from mlx_lm.utils import _get_classes

    model_cls, args_cls = _get_classes(cfg)
    mx.random.seed(seed)
    model = model_cls(args_cls.from_dict(cfg))
    mx.eval(model.parameters())
    return model


def save_folder(model: nn.Module, cfg: dict, folder: Path, tokenizer_from: Path) -> Path:
    """Write an MLX model folder: config, weights and the tokenizer files of `tokenizer_from`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    for f in tokenizer_from.iterdir():
        if f.name.startswith("tokenizer") or f.name in ("special_tokens_map.json", "chat_template.jinja"):
            (folder / f.name).write_bytes(f.read_bytes())
    return folder


def random_model_folder(
    folder: Path, tokenizer_dir: Path, model_type: str = "llama", hidden: int = 64,
    layers: int = 2, seed: int = 0, **over,
) -> Path:
    cfg = _config(model_type, _vocab_size(tokenizer_dir), hidden, layers, **over)
    return save_folder(build_model(cfg, seed), cfg, folder, tokenizer_dir)


def _vocab_size(tokenizer_dir: Path) -> int:
    data = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    ids = list(data["model"]["vocab"].values()) + [t["id"] for t in data.get("added_tokens", [])]
    return max(ids) + 1


def controlled_pair(
    root: Path, tokenizer_dir: Path, hidden: int = 256, draft_layers: int = 2,
    extra_layers: int = 14, eps: float = 0.25, seed: int = 0, embed_scale: float = 4.0,
) -> tuple[Path, Path]:
    """(target_folder, draft_folder): the target contains the draft plus ε-scaled extra layers."""
    vocab = _vocab_size(tokenizer_dir)
    # With a tied head a random model's argmax is mostly "repeat the last token": generation
    # degenerates and acceptance means nothing. So the head is separate (see below).
    dcfg = _config("llama", vocab, hidden, draft_layers, tie_word_embeddings=False)
    draft = build_model(dcfg, seed)
    tcfg = _config("llama", vocab, hidden, draft_layers + extra_layers, tie_word_embeddings=False)
    target = build_model(tcfg, seed + 1)
    # The head is the embedding with its rows permuted: the residual stream stays close to the
    # last token's embedding, so the argmax follows a long random permutation cycle (varied
    # text) with clear margins, and the ε-scaled extra layers decide how often it deviates.
    perm = mx.random.permutation(vocab, key=mx.random.key(seed + 7))
    draft.model.embed_tokens.weight = draft.model.embed_tokens.weight * embed_scale
    draft.lm_head.weight = draft.model.embed_tokens.weight[perm]
    target.model.embed_tokens = draft.model.embed_tokens
    target.model.norm = draft.model.norm
    target.lm_head = draft.lm_head
    for i, layer in enumerate(draft.model.layers):
        target.model.layers[i] = layer
    for layer in target.model.layers[draft_layers:]:
        layer.self_attn.o_proj.weight = layer.self_attn.o_proj.weight * eps
        layer.mlp.down_proj.weight = layer.mlp.down_proj.weight * eps
    mx.eval(target.parameters())
    d = save_folder(draft, dcfg, root / "draft", tokenizer_dir)
    t = save_folder(target, tcfg, root / "target", tokenizer_dir)
    return t, d

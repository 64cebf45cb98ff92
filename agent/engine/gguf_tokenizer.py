"""Rebuild a GGUF file's byte-level BPE tokenizer (`tokenizer.ggml.model = gpt2`) with the
`tokenizers` library, split the way `tokenizer.ggml.pre` says.

Pre-tokenizers: `qwen2` and `llama-bpe` use their own split regex (qwen2 takes digits one by
one, llama 3 in runs of up to three) followed by a byte-level map without its own regex;
`smollm`/`starcoder`/`refact` split digits one by one before GPT-2's regex; anything else uses
GPT-2's regex. Control tokens (token type 3) become special tokens; user-defined ones (type 4)
are matched whole but decoded as text. The file's chat template and EOS come along.
SentencePiece ("llama"-model) vocabularies are refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ModelLoadError

_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPLIT_REGEX = {"qwen2": _QWEN2, "llama-bpe": _LLAMA3, "llama3": _LLAMA3}
DIGITS_FIRST = ("smollm", "starcoder", "refact")
_CONTROL, _USER_DEFINED = 3, 4


def pre_tokenizer(pre: str):
    """The `tokenizers` pre-tokenizer for a `tokenizer.ggml.pre` value."""
    from tokenizers import Regex, pre_tokenizers

    if pre in SPLIT_REGEX:
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(SPLIT_REGEX[pre]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in DIGITS_FIRST:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    return byte_level


def build_tokenizer(meta: dict[str, Any]):
    """A `PreTrainedTokenizerFast` from the GGUF's gpt2-style BPE vocabulary and merges."""
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    kind = _text(meta, "tokenizer.ggml.model") or ""
    if kind != "gpt2":
        raise ModelLoadError(
            f"GGUF tokenizer type '{kind or 'missing'}' is not supported (byte-level BPE 'gpt2' only)"
        )
    tokens, merges, types = _vocabulary(meta)
    vocab = {t: i for i, t in enumerate(tokens)}
    try:
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception for a bad merge list
        raise ModelLoadError(f"GGUF tokenizer cannot be built: {str(e).splitlines()[0][:200]}") from None
    tok.pre_tokenizer = pre_tokenizer(_text(meta, "tokenizer.ggml.pre") or "default")
    tok.decoder = decoders.ByteLevel()
    if types is not None:
        tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                        for i, t in enumerate(types) if t == _USER_DEFINED])
        tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                                for i, t in enumerate(types) if t == _CONTROL])

    def tok_at(key: str) -> str | None:
        return tokens[_token_id(meta, key, len(tokens))] if key in meta else None

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=tok_at("tokenizer.ggml.bos_token_id"),
        eos_token=tok_at("tokenizer.ggml.eos_token_id"),
        unk_token=tok_at("tokenizer.ggml.unknown_token_id"),
        pad_token=tok_at("tokenizer.ggml.padding_token_id"),
        chat_template=_text(meta, "tokenizer.chat_template"),
        clean_up_tokenization_spaces=False,
    )


def special_tokens(meta: dict[str, Any]) -> dict[str, str]:
    """{'bos_token': text, ...} for the special token ids the file names."""
    tokens = _strings(meta, "tokenizer.ggml.tokens")
    keys = {"bos_token": "bos", "eos_token": "eos", "unk_token": "unknown", "pad_token": "padding"}
    return {k: tokens[_token_id(meta, f"tokenizer.ggml.{v}_token_id", len(tokens))]
            for k, v in keys.items() if f"tokenizer.ggml.{v}_token_id" in meta}


def _text(meta: dict[str, Any], key: str) -> str | None:
    v = meta.get(key)
    if v is not None and not isinstance(v, str):
        raise ModelLoadError(f"GGUF metadata '{key}' is not a string")
    return v


def _strings(meta: dict[str, Any], key: str) -> list[str]:
    v = meta.get(key, [])
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise ModelLoadError(f"GGUF metadata '{key}' is not an array of strings")
    return v


def _token_id(meta: dict[str, Any], key: str, n_tokens: int) -> int:
    v = meta[key]
    v = v.item() if isinstance(v, np.ndarray) and v.size == 1 else v
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not 0 <= v < n_tokens:
        raise ModelLoadError(f"GGUF metadata '{key}' = {v!r} is not a token id (0..{n_tokens - 1})")
    return int(v)


def _vocabulary(meta: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]], list[int] | None]:
    """(tokens, merges, token types or None), each of the type and length it must have."""
    tokens = _strings(meta, "tokenizer.ggml.tokens")
    if not tokens:
        raise ModelLoadError("GGUF metadata has no 'tokenizer.ggml.tokens'")
    merges = [tuple(m.split(" ", 1)) for m in _strings(meta, "tokenizer.ggml.merges")]
    if any(len(m) != 2 for m in merges):
        raise ModelLoadError("GGUF metadata 'tokenizer.ggml.merges' has an entry without a space")
    types = meta.get("tokenizer.ggml.token_type")
    if types is None:
        return tokens, merges, None
    if not isinstance(types, np.ndarray) or types.dtype.kind not in "iu" or types.shape != (len(tokens),):
        raise ModelLoadError("GGUF metadata 'tokenizer.ggml.token_type' is not one integer per token")
    return tokens, merges, types.tolist()


def stop_ids(meta: dict[str, Any]) -> list[int]:
    """Token ids that end a turn: EOS, and end-of-turn / end-of-message where the file has them."""
    keys = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
            "tokenizer.ggml.eom_token_id")
    n = len(_strings(meta, "tokenizer.ggml.tokens"))
    return sorted({_token_id(meta, k, n) for k in keys if k in meta})

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
from .gguf_arch import scalar

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

    kind = scalar(meta, "tokenizer.ggml.model", "")
    if kind != "gpt2":
        raise ModelLoadError(
            f"GGUF tokenizer type '{kind or 'missing'}' is not supported (byte-level BPE 'gpt2' only)"
        )
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizer(scalar(meta, "tokenizer.ggml.pre", "default"))
    tok.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type")
    if types is not None:
        types = np.asarray(types).tolist()
        tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                        for i, t in enumerate(types) if t == _USER_DEFINED])
        tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                                for i, t in enumerate(types) if t == _CONTROL])

    def tok_at(key: str) -> str | None:
        i = meta.get(key)
        return tokens[int(scalar(meta, key))] if i is not None else None

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=tok_at("tokenizer.ggml.bos_token_id"),
        eos_token=tok_at("tokenizer.ggml.eos_token_id"),
        unk_token=tok_at("tokenizer.ggml.unknown_token_id"),
        pad_token=tok_at("tokenizer.ggml.padding_token_id"),
        chat_template=meta.get("tokenizer.chat_template"),
        clean_up_tokenization_spaces=False,
    )


def stop_ids(meta: dict[str, Any]) -> list[int]:
    """Token ids that end a turn: EOS, and end-of-turn / end-of-message where the file has them."""
    keys = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
            "tokenizer.ggml.eom_token_id")
    return sorted({int(scalar(meta, k)) for k in keys if k in meta})

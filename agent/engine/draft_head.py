"""A draft model's output head restricted to part of the vocabulary.

A small draft model spends a large share of each step in its output head (Qwen2.5-0.5B: a
151,936 x 896 matrix, ~27% of its weights). `RestrictedHead` computes logits only for the first
`first` token ids (BPE merge order puts frequent tokens first) plus every id that has occurred in
the session's history, and maps the argmax / draws back to real ids. The draft then proposes
only ids in that set; the target still verifies against its full vocabulary, so greedy output is
unchanged, and at temperature > 0 `widen` gives the exact draft distribution (q = 0 outside the
set) that the expected-acceptance estimate and the unkeyed acceptance rule need.

It applies only to model classes whose logits are `trunk(x) -> lm_head | tied embedding
as_linear` with nothing after (see `SUPPORTED`); anything else keeps the full head. It does not
decide which ids to add: the drafter feeds it the history.
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np

# mlx-lm model types whose Model.__call__ is exactly `model(x)` then the head, without logit
# scaling or soft-capping (mistral loads through llama's class).
SUPPORTED = {"llama", "qwen2", "qwen3", "mistral"}


def head_module(model: nn.Module) -> nn.Module | None:
    """The module whose rows are the output head (tied embedding or lm_head), or None when
    the model's logits are not a plain product with it."""
    args = getattr(model, "args", None)
    trunk = getattr(model, "model", None)
    if getattr(args, "model_type", None) not in SUPPORTED or not isinstance(trunk, nn.Module):
        return None
    if getattr(args, "tie_word_embeddings", False):
        head = getattr(trunk, "embed_tokens", None)
        kinds: tuple[type, ...] = (nn.Embedding, nn.QuantizedEmbedding)
    else:
        head = getattr(model, "lm_head", None)
        kinds = (nn.Linear, nn.QuantizedLinear)
        if head is not None and "bias" in head:
            return None
    return head if isinstance(head, kinds) else None


class RestrictedHead:
    """Logits over `ids` = [0, first) + ids added later (in the order they were added).

    Rows of ids added later live in a second, small matrix that is extended when new ids
    appear (the first block is a view of the model's weights and never copied). The products
    stay in MLX: a numpy matrix-vector product for the single-row step measured no faster
    end to end on the CPU (it waits for the trunk, losing the queued-ahead steps).
    """

    def __init__(self, head: nn.Module, first: int, width: int):
        self.head = head
        self.width = width  # ids >= width are never proposed (the target may not have them)
        first = min(first, width)
        self.quantized = isinstance(head, (nn.QuantizedEmbedding, nn.QuantizedLinear))
        self.known = np.zeros(width, dtype=bool)
        self.known[:first] = True
        self.n_first = first
        self.extra: list[int] = []
        self._ids = mx.arange(first, dtype=mx.uint32)
        self._base = self._rows(slice(0, first))
        mx.eval([r for r in self._base if r is not None])  # views of the weights, no copy
        self._more: list[mx.array] | None = None  # rows of `extra`

    @classmethod
    def build(cls, lm_model: nn.Module, first: int, width: int) -> RestrictedHead | None:
        """A restricted head for `lm_model`, or None (full head) when `first` is 0, covers the
        whole vocabulary, or the model's class is not supported."""
        head = head_module(lm_model)
        if head is None or first <= 0 or first >= width:
            return None
        return cls(head, first, width)

    @property
    def size(self) -> int:
        return self.n_first + len(self.extra)

    def _rows(self, rows: slice | mx.array) -> list[mx.array]:
        """The head's parameters (weight, and scales/biases when quantized) for `rows`."""
        names = ("weight", "scales", "biases") if self.quantized else ("weight",)
        return [self.head[n][rows] if n in self.head else None for n in names]

    def add(self, tokens: Sequence[int]) -> None:
        """Cover every id in `tokens` (ids outside [0, width) are ignored)."""
        if not len(tokens):
            return
        t = np.asarray(tokens, dtype=np.int64)
        t = t[(t >= 0) & (t < self.width)]
        new = np.unique(t[~self.known[t]])
        if not new.size:
            return
        self.known[new] = True
        self.extra.extend(int(i) for i in new)
        self._ids = mx.concatenate([self._ids, mx.array(new, dtype=mx.uint32)])
        rows = self._rows(mx.array(new, dtype=mx.uint32))
        if self._more is None:
            self._more = rows
        else:
            self._more = [None if a is None else mx.concatenate([a, b])
                          for a, b in zip(self._more, rows)]
        mx.eval([r for r in self._more if r is not None], self._ids)

    def _product(self, h: mx.array, params: list[mx.array]) -> mx.array:
        if not self.quantized:
            return h @ params[0].T
        w, scales, biases = params
        return mx.quantized_matmul(h, w, scales=scales, biases=biases, transpose=True,
                                   group_size=self.head.group_size, bits=self.head.bits,
                                   mode=getattr(self.head, "mode", "affine"))

    def logits(self, h: mx.array) -> mx.array:
        """(n, hidden) final hidden states -> (n, size) logits over `ids`."""
        out = self._product(h, self._base)
        if self._more is not None:
            out = mx.concatenate([out, self._product(h, self._more)], axis=-1)
        return out

    def real_ids(self, idx: mx.array) -> mx.array:
        """Positions in the restricted logits -> token ids."""
        return mx.take(self._ids, idx)

    def columns(self, mask: mx.array) -> mx.array:
        """A (n, width) boolean mask over real ids -> (n, size) over `ids`."""
        return mx.take(mask, self._ids, axis=-1)

    def widen(self, lp: mx.array) -> mx.array:
        """(n, m) log-probabilities over the first m of `ids` -> (n, width), -inf elsewhere."""
        full = mx.full((lp.shape[0], self.width), -mx.inf, dtype=lp.dtype)
        full[:, self._ids[: lp.shape[-1]]] = lp
        return full

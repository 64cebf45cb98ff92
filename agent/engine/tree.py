"""Token trees: several draft continuations verified in one target pass.

A `TokenTree` holds a round's candidates: node 0 is the root (the pending token), every other
node a draft token whose parent comes before it, in breadth-first order (depths never
decrease). One forward pass feeds all nodes at once (`tree_pass`): node i sits at position
start + depth(i) and attends to the cached prefix and to its own ancestors only (a boolean
mask over the new rows), so every row's logits equal those of feeding its path as a chain.
After acceptance, `compact` moves the accepted path's KV rows to the positions right after
the prefix and drops the rest, leaving the cache as a cold run over the same tokens would.

Positions by depth need RoPE per depth: for the pass, each layer's `self_attn.rope` is
swapped for `_DepthRoPE`, which applies the original RoPE to each run of equal depth with that
run's position as the offset, each row as its own sequence of one (bitwise the same values as
RoPE over a chain), and each layer's cache
is wrapped so that the model's `create_attention_mask` returns the tree mask. Models whose
layers do not follow mlx-lm's usual `self_attn.rope` / `cache.make_mask` pattern, or whose
caches are not plain or quantized KV caches, are refused (`supports_tree`); chains then.

`verify_tree` is one round: the tree mask, the penalty and the grammar per node, greedy
acceptance (follow the target's argmax down the tree), keyed acceptance (follow the target's
keyed draws down the tree, for lookup's trees and a draft model's drawn with the same noise)
or, without keys, recursive rejection sampling over each node's children
(`accept_tree_sampled`), then compaction. `VerifyCost` and
`node_budget` size trees by the measured cost of verify passes of N positions.

Not here: which nodes a drafter proposes (drafters.py), when to speculate (speculative.py).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from .sampling import (SamplingParams, apply_mask, apply_penalty, draw, keyed_keys, log_probs,
                       penalized_ids)


# ---- the tree ---------------------------------------------------------------------------


@dataclass
class TokenTree:
    """Draft tokens as a tree, node 0 the root (the pending token), breadth-first order.

    `logq[i]`: the (V,) log-probabilities node i's token was drawn from, given its parent and
    its earlier siblings (None: a deterministic proposal, a point mass). `score[i]`: the
    drafter's estimate that node i's path is accepted (orders branches; never read by the
    acceptance rule). `keyed`: the tokens were drawn with the target's position keys
    (`sampling.keyed_noise`), so the target checks them by its own keyed draws."""

    tokens: list[int]
    parents: list[int]
    logq: list[mx.array | None] = field(default_factory=list)
    score: list[float] = field(default_factory=list)
    keyed: bool = False

    def __post_init__(self) -> None:
        if not self.logq:
            self.logq = [None] * len(self.tokens)
        if not self.score:
            self.score = [1.0] * len(self.tokens)
        self.depth = [0] * len(self.tokens)
        self.children: list[list[int]] = [[] for _ in self.tokens]
        for i, p in enumerate(self.parents[1:], 1):
            if not 0 <= p < i:
                raise ValueError(f"node {i}: parent {p} does not come before it")
            self.depth[i] = self.depth[p] + 1
            self.children[p].append(i)
        if any(a > b for a, b in zip(self.depth, self.depth[1:])):
            raise ValueError("nodes are not in breadth-first order")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def nodes(self) -> int:
        """Draft nodes (the root is not one)."""
        return len(self.tokens) - 1

    def path(self, i: int) -> list[int]:
        """Node indices from the root to node i, both included."""
        out = [i]
        while out[-1]:
            out.append(self.parents[out[-1]])
        return out[::-1]

    def path_tokens(self, i: int) -> list[int]:
        """The draft tokens on the way to node i (the root's token excluded)."""
        return [self.tokens[j] for j in self.path(i)[1:]]

    def leaves(self) -> list[int]:
        return [i for i, c in enumerate(self.children) if not c]

    def spine(self) -> list[int]:
        """Node indices of the first-child chain below the root (the drafter's main line)."""
        out, i = [], 0
        while self.children[i]:
            i = self.children[i][0]
            out.append(i)
        return out

    def is_chain(self) -> bool:
        return all(len(c) <= 1 for c in self.children)

    @classmethod
    def chain(cls, root: int, tokens: Sequence[int]) -> "TokenTree":
        return cls([root, *tokens], list(range(-1, len(tokens))))

    @classmethod
    def from_paths(cls, root: int, paths: Sequence[Sequence[int]], limit: int) -> "TokenTree":
        """A trie of `paths` (earlier paths first among siblings), at most `limit` nodes
        besides the root; deterministic proposals."""
        tokens, parents = [root], [-1]
        kids: dict[tuple[int, int], int] = {}
        for path in paths:
            at = 0
            for t in path:
                nxt = kids.get((at, t))
                if nxt is None:
                    if len(tokens) - 1 >= limit:
                        break
                    nxt = kids[(at, t)] = len(tokens)
                    tokens.append(int(t))
                    parents.append(at)
                at = nxt
        return _breadth_first(tokens, parents)


def _breadth_first(tokens: list[int], parents: list[int]) -> TokenTree:
    """The tree of (tokens, parents) with parents before children, renumbered breadth-first
    (siblings keep their order)."""
    depth = [0] * len(tokens)
    for i in range(1, len(tokens)):
        depth[i] = depth[parents[i]] + 1
    order = sorted(range(len(tokens)), key=lambda i: (depth[i], i))
    new = {old: n for n, old in enumerate(order)}
    # By depth, then by the original index: siblings keep their order (a parent always has
    # a smaller depth, so it comes first).
    return TokenTree([tokens[i] for i in order], [-1] + [new[parents[i]] for i in order[1:]])


# ---- one forward pass over tree nodes -------------------------------------------------------


def supports_tree(model: nn.Module, cache: list) -> bool:
    """Can `tree_pass` feed this model? Every layer has `self_attn.rope` (an nn.Module) and a
    plain or quantized KV cache."""
    from mlx_lm.models.cache import KVCache, QuantizedKVCache

    layers = getattr(model, "layers", None)
    if not layers or len(layers) != len(cache):
        return False
    return all(isinstance(getattr(getattr(l, "self_attn", None), "rope", None), nn.Module)
               for l in layers) and all(type(c) in (KVCache, QuantizedKVCache) for c in cache)


class _DepthRoPE(nn.Module):
    """The layer's RoPE applied per run of rows that share a position."""

    def __init__(self, rope: nn.Module, runs: list[tuple[int, int, int]]):
        super().__init__()
        self.inner = rope
        self.runs = runs  # (first row, end row, position)

    def __call__(self, x: mx.array, offset: int = 0) -> mx.array:
        # Each row of a run as a sequence of one (its own batch entry), so all get `pos`.
        parts = [self.inner(x[..., a:b, None, :], offset=pos)[..., 0, :]
                 for a, b, pos in self.runs]
        return parts[0] if len(parts) == 1 else mx.concatenate(parts, axis=-2)


class _TreeLayerCache:
    """A layer's KV cache whose attention mask is the tree's (everything else is the cache's)."""

    def __init__(self, inner, mask: mx.array):
        self.inner, self.mask = inner, mask

    def make_mask(self, n: int, **kw) -> mx.array:
        return self.mask

    def update_and_fetch(self, keys: mx.array, values: mx.array):
        return self.inner.update_and_fetch(keys, values)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def position_runs(positions: Sequence[int]) -> list[tuple[int, int, int]]:
    """Runs of equal consecutive positions as (first, end, position)."""
    runs: list[tuple[int, int, int]] = []
    for i, p in enumerate(positions):
        if runs and runs[-1][2] == p and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1, p)
        else:
            runs.append((i, i + 1, p))
    return runs


@contextmanager
def tree_pass(model: nn.Module, cache: list, positions: Sequence[int],
              visible: mx.array) -> Iterator[list]:
    """Within the block, a forward of len(positions) tokens with the returned cache list puts
    row i at `positions[i]` and lets it attend where `visible` (rows x (cached + new) keys)
    is True. The cache itself receives the new rows as usual."""
    runs = position_runs(positions)
    attns = [layer.self_attn for layer in model.layers]
    ropes = [a.rope for a in attns]
    try:
        for a, r in zip(attns, ropes):
            a.rope = _DepthRoPE(r, runs)
        yield [_TreeLayerCache(c, visible) for c in cache]
    finally:
        for a, r in zip(attns, ropes):
            a.rope = r


def visibility(prefix: int, rows: Sequence[int], new: Sequence[int], tree: TokenTree) -> mx.array:
    """(len(new), prefix + len(rows) + len(new)) bool: new node i sees the first `prefix` cached
    positions, the cached tree rows (`rows`: the node each holds) that are its ancestors, and
    itself among the new ones (nodes in `new` are never each other's ancestors except where the
    caller feeds a whole tree, which `rows` + `new` then lists in order)."""
    cols = [*rows, *new]
    out = np.zeros((len(new), prefix + len(cols)), dtype=bool)
    out[:, :prefix] = True
    for r, node in enumerate(new):
        anc = set(tree.path(node))
        out[r, prefix:] = [c in anc for c in cols]
    return mx.array(out)


def tree_logits(model: nn.Module, cache: list, tree: TokenTree) -> mx.array:
    """Feed every node of `tree` (root first) after the cache's prefix; (len(tree), V) logits,
    row i the target's next-token logits after node i's path."""
    start = int(cache[0].offset)
    visible = visibility(start, [], range(len(tree)), tree)
    x = mx.array(tree.tokens, dtype=mx.uint32)[None]
    with tree_pass(model, cache, [start + d for d in tree.depth], visible) as wrapped:
        return model(x, cache=wrapped)[0]


def compact(cache: list, start: int, keep: Sequence[int]) -> None:
    """Keep the rows start + keep[j] at start + j (keep: offsets from `start`, increasing
    positions of an accepted path) and drop every row after them."""
    n = len(keep)
    if list(keep) != list(range(n)):
        idx = mx.array([start + r for r in keep], dtype=mx.int32)
        for c in cache:
            c.keys, c.values = _moved(c.keys, idx, start), _moved(c.values, idx, start)
    for c in cache:
        excess = c.offset - (start + n)
        if excess < 0 or c.trim(excess) != excess:
            raise RuntimeError("a KV cache could not drop a tree's rejected rows")


def _moved(a, idx: mx.array, start: int):
    """Rows idx of `a` (an array or a quantized cache's tuple, sequence axis -2) written to
    start, start + 1, ..."""
    if isinstance(a, (tuple, list)):
        return type(a)(_moved(x, idx, start) for x in a)
    a[..., start:start + idx.size, :] = a[..., idx, :]
    return a


# ---- per-node logits processing -----------------------------------------------------------


def penalize_tree(logits: mx.array, tree: TokenTree, history: Sequence[int],
                  params: SamplingParams) -> mx.array:
    """Row i penalized for `history` + the draft tokens on node i's path (as plain decoding
    would have been after that path)."""
    width = logits.shape[-1]
    seq = list(history[-params.repetition_window:]) if params.repetition_window > 0 else []
    return mx.stack([apply_penalty(logits[i], penalized_ids(seq + tree.path_tokens(i), width,
                                                            params), params)
                     for i in range(len(tree))])


def tree_masks(constraint, tree: TokenTree) -> mx.array | None:
    """(len(tree), V) allowed tokens per node: the constraint after that node's path. One
    `masks(path)` call per leaf (a chain's K+1 masks for each root-to-leaf path)."""
    rows: dict[int, mx.array] = {}
    for leaf in tree.leaves():
        path = tree.path(leaf)
        need = [j for j, node in enumerate(path) if node not in rows]
        if not need:
            continue
        m = constraint.masks([tree.tokens[i] for i in path[1:]])
        if m is None:
            return None
        for j in need:
            rows[path[j]] = m[j]
    return mx.stack([rows[i] for i in range(len(tree))])


# ---- acceptance ------------------------------------------------------------------------


def accept_tree_greedy(tree: TokenTree, best: Sequence[int]) -> tuple[list[int], int]:
    """Follow the target's argmax down the tree: (accepted path from the root, the target's
    token after it)."""
    path = [0]
    while True:
        node = path[-1]
        nxt = next((c for c in tree.children[node] if tree.tokens[c] == best[node]), None)
        if nxt is None:
            return path, int(best[node])
        path.append(nxt)


def _row(logq: mx.array, width: int) -> np.ndarray:
    """A proposal row as float64 probabilities over `width` ids (q = 0 beyond a narrower
    draft's width)."""
    q = np.exp(np.asarray(logq.astype(mx.float32), dtype=np.float64))[:width]
    return q if q.size == width else np.concatenate([q, np.zeros(width - q.size)])


def accept_tree_sampled(lp: mx.array, tree: TokenTree) -> tuple[list[int], int]:
    """Recursive rejection sampling (SpecInfer / SpecTr; Jeon et al. 2024 for siblings drawn
    without replacement) over the target's (len(tree), V) log-probabilities: (accepted path,
    the next token). At a node with target distribution p, each child x with proposal q (its
    `logq`, or a point mass) in turn is accepted with probability min(1, p(x) / q(x)); after
    a rejection p becomes max(p - q, 0), renormalized. The emitted tokens are distributed
    exactly as plain sampling from `lp` row by row. Arithmetic in float64 numpy; the uniforms
    come from mx.random (one draw per call)."""
    width = lp.shape[-1]
    u = np.asarray(mx.random.uniform(shape=(len(tree) + 1,)), dtype=np.float64)
    path = [0]
    while True:
        node = path[-1]
        p = np.exp(np.asarray(lp[node].astype(mx.float32), dtype=np.float64))
        p /= p.sum()
        moved = False
        for c in tree.children[node]:
            x = tree.tokens[c]
            if tree.logq[c] is None:
                q = np.zeros(width)
                q[x] = 1.0
            else:
                q = _row(tree.logq[c], width)
            if q[x] > 0 and u[c] * q[x] < p[x]:
                path.append(c)
                moved = True
                break
            residual = np.maximum(p - q, 0.0)
            total = residual.sum()
            if total > 0:  # else p == q up to rounding: rejection had probability ~0
                p = residual / total
        if not moved:  # draw from p by its inverse distribution function
            cdf = np.cumsum(p)
            return path, int(min(np.searchsorted(cdf, u[-1] * cdf[-1], side="right"), width - 1))


def verify_tree(model: nn.Module, cache: list, tree: TokenTree, params: SamplingParams,
                constraint=None, history: Sequence[int] = ()) -> tuple[list[int], list[int]]:
    """Feed the tree in one pass, accept a path, compact the cache; returns (emitted tokens:
    the accepted drafts and the target's own next token, the accepted path's node indices).
    `history`: the tokens so far, ending with the root's (for a repetition penalty).
    Afterwards the cache holds the root and the accepted drafts; the last emitted token is
    the new pending one."""
    start = int(cache[0].offset)
    logits = tree_logits(model, cache, tree)
    if params.penalized:
        logits = penalize_tree(logits, tree, history or [tree.tokens[0]], params)
    if constraint is not None:
        logits = apply_mask(logits, tree_masks(constraint, tree))
    if params.greedy:
        path, nxt = accept_tree_greedy(tree, mx.argmax(logits, axis=-1).tolist())
    elif params.keyed and history and (
            tree.keyed or all(q is None for q in tree.logq[1:])):
        # A deterministic tree (lookup's) against keyed draws: each node's row draws its token
        # as plain decoding would at that depth's position; the path follows the draws while
        # a child holds the drawn token. A child x is followed with probability p(x), and the
        # token drawn where none holds it is p's given that it is none of them, as recursive
        # rejection sampling over point masses gives: the same distribution, and the tokens
        # plain decoding draws with the same seed. A draft model's keyed tree is checked the
        # same way: every emitted token is the target's keyed draw, whatever the drafts.
        at = len(history)
        drawn = draw(log_probs(logits, params, eager=True),
                     keyed_keys(params.noise_seed, [at + d for d in tree.depth]))
        path, nxt = accept_tree_greedy(tree, drawn.tolist())
    else:
        path, nxt = accept_tree_sampled(log_probs(logits, params, eager=True), tree)
    compact(cache, start, path)
    return [*(tree.tokens[i] for i in path[1:]), nxt], path


# ---- how many nodes a round may verify -------------------------------------------------------


class VerifyCost:
    """Seconds per verify pass of N positions on this machine: a small probe at load, then
    every verify pass refines the figure for its N (a moving average)."""

    SIZES = (1, 2, 4, 8, 16, 32, 64)
    ALPHA = 0.2

    def __init__(self, seconds: dict[int, float] | None = None):
        self.seconds: dict[int, float] = dict(seconds or {})

    def probe(self, model: nn.Module, make_cache, max_n: int, context: int = 64) -> None:
        """Time passes of 1, 2, 4, ... up to `max_n` positions after a `context`-token prefix
        (the best of two; the first pass of each size warms it up)."""
        cache = make_cache()
        mx.eval(model(mx.arange(context, dtype=mx.uint32)[None] % 97, cache=cache))
        for n in (s for s in self.SIZES if s <= max(max_n, 1)):
            best = float("inf")
            for rep in range(3):
                x = mx.arange(n, dtype=mx.uint32)[None] % 97
                t0 = time.perf_counter()
                mx.eval(model(x, cache=cache))
                if rep:
                    best = min(best, time.perf_counter() - t0)
                for c in cache:
                    c.trim(n)
            self.seconds[n] = best

    def observe(self, n: int, seconds: float) -> None:
        old = self.seconds.get(n)
        self.seconds[n] = seconds if old is None else (1 - self.ALPHA) * old + self.ALPHA * seconds

    def at(self, n: int) -> float:
        """Seconds for n positions: interpolated between measured sizes, extended along the
        last two beyond them, never below a smaller size's."""
        known = sorted(self.seconds)
        if not known:
            return float(n)
        cost = np.maximum.accumulate([self.seconds[k] for k in known])
        if n <= known[0]:
            return float(cost[0])
        if n >= known[-1]:
            if len(known) == 1:
                return float(cost[0]) * n / known[0]
            slope = (cost[-1] - cost[-2]) / (known[-1] - known[-2])
            return float(cost[-1] + slope * (n - known[-1]))
        return float(np.interp(n, known, cost))


def node_budget(cost: VerifyCost, chain: int, cap: int, gain: float) -> int:
    """Draft nodes a round may verify: the chain's, plus one more while the next position
    costs at most `gain` of a one-position pass (`gain`: the least estimated acceptance a
    branch node needs, so the cheapest branch admitted still pays for its row). A verify
    cost that grows by a whole step per row leaves the chain."""
    step = cost.at(1)
    n = chain
    while n < cap and cost.at(n + 2) - cost.at(n + 1) <= gain * step:
        n += 1
    return n


@dataclass(frozen=True)
class TreeShape:
    """What a drafter may build this round: at most `nodes` draft nodes; a branch only where
    its estimated acceptance reaches `gain` and (a draft model's second choice) its
    probability is at least `close` of the first choice's."""

    nodes: int
    gain: float = 0.1
    close: float = 0.25


class TreeBudget:
    """Sizes each round's tree for a Speculator: `shape(model, cache, k)` for a round whose
    main line is k deep (`node_budget` over `cost`; None: a chain). `cost` is probed on the
    target at the first round (unless given) and refined by every verify pass."""

    def __init__(self, cap: int = 32, gain: float = 0.1, close: float = 0.25,
                 cost: VerifyCost | None = None, measured: bool = True):
        self.cap, self.gain, self.close = cap, gain, close
        # measured: a round that could branch drafts a tree or a chain by which of the two has
        # recently produced tokens faster (the Speculator's `TreeArms`); False: always a tree.
        self.measured = measured
        self.cost = cost or VerifyCost()
        self.probed = cost is not None
        self._usable: dict[int, bool] = {}  # id(model) -> supports_tree

    def shape(self, model: nn.Module, cache: list, k: int) -> TreeShape | None:
        usable = self._usable.get(id(model))
        if usable is None:
            usable = self._usable[id(model)] = supports_tree(model, cache)
        if not usable:
            return None
        if not self.probed:
            from .cache import make_cache

            self.cost.probe(model, lambda: make_cache(model), self.cap + 1)
            self.probed = True
        n = node_budget(self.cost, k, max(self.cap, k), self.gain)
        return TreeShape(n, self.gain, self.close) if n > k else None

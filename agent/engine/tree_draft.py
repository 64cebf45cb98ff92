"""Tree drafts from a draft model that branches where its top two choices are close.

`model_tree` drafts level by level, one draft forward pass per depth over every node of that
depth (`tree.tree_pass`, the draft's own tree mask). The main line (each node's first child
from the root: what a chain draft would propose) always grows to depth k; a node also gets
its second choice where that has at least `shape.close` of the first's probability, and any node
grows while its score (the product of the draft's top probabilities along its path) reaches
`shape.gain`, best scores first, until the node budget is spent.

Exactness at temperature > 0 (`tree.accept_tree_sampled`): a node's first child is drawn from
the draft's q, its second from q without the first (renormalized), and each child carries the
distribution it was drawn from. Which nodes get children is decided from the draft's
distributions only (their top probabilities), never from the drawn tokens, so the tokens stay
distributed as their `logq` says. With keyed draws (`params.noise_seed` ≥ 0) a node's first
child is the draft's draw with the target's noise at that position (`sampling.keyed_noise`)
and its second the runner-up under the same noise; the tree is then checked by the target's
keyed draws (`tree.verify_tree`), which emit plain decoding's tokens whatever the tree holds.

The draft cache after a tree round holds the history, then the rows of the nodes it fed
(breadth-first); `keep_rows` reports which rows the accepted path owns, so the caller can
compact the cache to history + accepted path (as a chain round leaves it).
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx
import numpy as np

from .sampling import SamplingParams, apply_mask, log_probs
from .step import fit_width
from .tree import TokenTree, TreeShape, tree_pass, visibility

class _Level:
    """One depth's choices at a node: up to two (token, logq row, probability) children."""

    __slots__ = ("node", "kids")

    def __init__(self, node: int, kids: list[tuple[int, mx.array | None, float]]):
        self.node, self.kids = node, kids


def _choices(dm, logits: mx.array, path: list[int], history: Sequence[int],
             params: SamplingParams, constraint, close: float,
             noise: mx.array | None = None) -> list[tuple[int, mx.array | None, float]]:
    """A node's first and (when close) second child from its (1, m) draft logits:
    [(token id, logq row (V,) or None when greedy, probability estimate)]. The estimate, and
    whether the two are close, read the draft's distribution before temperature and filters
    (after the grammar's mask and the repetition penalty), as a chain round's stop does:
    sharpened, a 0.8 token reads ~1.0 and the tree would grow on through the forks where
    the target goes elsewhere. `noise` (1, m): the target's keyed noise at the children's
    position (`DraftModel.noise`), when sampling with keyed draws."""
    head = dm.head
    if constraint is not None:
        mask = fit_width(constraint.masks(path)[-1:], dm.vocab_limit)
        if head is not None:
            mask = head.columns(mask)
        logits = apply_mask(logits, mask)
    if params.penalized:
        logits = dm._penalized(logits, [*history, *path], params)
    raw = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    lp = raw if params.greedy else log_probs(logits, params)
    sure = np.exp(np.array(raw[0].astype(mx.float32)))
    row = np.array(lp[0].astype(mx.float32))
    if not np.isfinite(row).any():  # nothing allowed
        return []
    top = np.argpartition(-sure, 1)[:2] if sure.size > 1 else np.array([0])
    top = top[np.argsort(-sure[top])]
    # a second child needs a second token the sampling distribution allows
    second = (len(top) > 1 and sure[top[1]] > 0 and sure[top[1]] >= close * sure[top[0]]
              and (params.greedy or np.count_nonzero(np.isfinite(row)) > 1))
    if params.greedy:
        picks = [(int(top[0]), None, float(sure[top[0]]))]
        if second:
            picks.append((int(top[1]), None, float(sure[top[1]])))
    else:  # draws, each with its own probability before temperature and filters
        keyed = noise is not None  # then the children are the noised top two
        scored = lp[0] + noise[0] if keyed else None
        x1 = int((mx.argmax(scored) if keyed else mx.random.categorical(lp[0])).item())
        picks = [(x1, lp[0], float(sure[x1]))]
        if second:
            other = mx.arange(lp.shape[-1]) == x1
            rest = mx.where(other, -mx.inf, lp[0])
            rest = rest - mx.logsumexp(rest)
            x2 = int((mx.argmax(mx.where(other, -mx.inf, scored)) if keyed
                      else mx.random.categorical(rest)).item())
            picks.append((x2, rest, float(sure[x2])))
    out = []
    for tok, lq, p in picks:
        if head is not None:
            tok = int(head.real_ids(mx.array([tok])).item())
            lq = head.widen(lq[None])[0] if lq is not None else None
        out.append((tok, lq, p))
    return out


def _logits(dm, tokens: Sequence[int], tree: TokenTree | None = None, rows: Sequence[int] = (),
            new: Sequence[int] = (), base: int = 0) -> mx.array:
    """Draft logits for feeding `tokens`: a chain (tree None; the last row) or the tree nodes
    `new` after the cached history (`base` tokens) and tree `rows`; (n, m)."""
    model, cache = dm.lm.model, dm.cache.cache
    x = mx.array(list(tokens), dtype=mx.uint32)[None]

    def run(c, last: bool):
        if dm.head is None:
            out = model(x, cache=c)[0]
            return (out[-1:] if last else out)[:, : dm.vocab_limit]
        hidden = model.model(x, cache=c)[0]
        return dm.head.logits(hidden[-1:] if last else hidden)

    if tree is None:
        return run(cache, True)
    visible = visibility(base, rows, new, tree)
    positions = [base - 1 + tree.depth[n] for n in new]
    with tree_pass(model, cache, positions, visible) as wrapped:
        return run(wrapped, False)


def model_tree(dm, history: Sequence[int], k: int, params: SamplingParams, constraint,
               shape: TreeShape) -> tuple[TokenTree, dict[int, int]]:
    """The draft model's tree for `history` (depth <= k, at most `shape.nodes` nodes) and the
    draft cache row of every node it fed."""
    budget, gain = shape.nodes, shape.gain
    todo = dm.prepare(history)
    if dm.head is not None:
        dm.head.add(history[min(dm.scanned, len(history)):])
        dm.scanned = len(history)
    logits = _logits(dm, todo)
    dm.fed.extend(todo)
    dm.synced = len(history)
    base = len(dm.fed)  # = len(history): the root (pending token) is the last cached row
    tokens, parents, logq, score = [history[-1]], [-1], [None], [1.0]
    keyed = params.keyed
    tree = TokenTree(tokens[:], parents[:], keyed=keyed)
    rows: dict[int, int] = {}  # node -> draft cache row
    fed: list[int] = []  # nodes in cache order after `base`
    frontier, spine = [0], 0
    for depth in range(1, k + 1):
        cands = []  # (score, is main line, parent, token, logq)
        # one noise row for the depth: every node's children sit at the same position
        noise = dm.noise(params, len(history) + depth - 1, logits.shape[-1]) if keyed else None
        for r, node in enumerate(frontier):
            picks = _choices(dm, logits[r : r + 1], tree.path_tokens(node), history, params,
                             constraint, shape.close, noise)
            for j, (tok, lq, p) in enumerate(picks):
                cands.append((score[node] * p, node == spine and j == 0, node, tok, lq))
        main = [c for c in cands if c[1]]
        if not main:
            break
        rest = sorted((c for c in cands if not c[1]), key=lambda c: -c[0])
        room = budget - (len(tokens) - 1) - (k - depth + 1)  # the main line keeps its k nodes
        chosen = main + [c for c in rest if c[0] >= gain][: max(room, 0)]
        chosen.sort(key=lambda c: (c[2], not c[1]))  # by parent; the main line first
        level = []
        for s, is_main, parent, tok, lq in chosen:
            tokens.append(tok)
            parents.append(parent)
            logq.append(lq)
            score.append(s)
            level.append(len(tokens) - 1)
            if is_main:
                spine = len(tokens) - 1
        tree = TokenTree(tokens[:], parents[:], logq[:], score[:], keyed)
        if depth == k or (dm.min_confidence > 0 and score[spine] < dm.min_confidence):
            break
        frontier = [n for n in level if n == spine or score[n] >= gain]
        frontier.sort(key=lambda n: n != spine)
        logits = _logits(dm, [tokens[n] for n in frontier], tree, fed, frontier, base)
        for n in frontier:
            rows[n] = base + len(fed)
            fed.append(n)
    # The linear part of the cache: history, then main-line nodes fed in order from the start.
    line = tree.spine()
    m = 0
    while m < len(fed) and m < len(line) and fed[m] == line[m]:
        m += 1
    dm.fed.extend(tree.tokens[n] for n in line[:m])
    return tree, rows

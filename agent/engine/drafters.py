"""Drafters: what proposes tokens for the target to verify.

One small interface: `propose(history, k, params, constraint)` returns up to k tokens (and,
for a model drafter sampling at temperature > 0, the draft distribution they were drawn from);
`rewind_to(n)` keeps the drafter consistent when the session's history is cut back to n tokens.
`history` is the session's token list; its last token is the pending one (not yet verified
into the target cache). Drafters never touch the target's cache.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Protocol, Sequence

import mlx.core as mx

from ..events import TokenSource
from .cache import ModelCache
from .draft_head import RestrictedHead
from .loading import LoadedModel
from .sampling import (SamplingParams, apply_mask, apply_penalty, keyed_noise, log_probs,
                       penalized_ids)
from .step import TokenConstraint, chunk_at, common_prefix, fit_width, forward, prefill
from .suffix import SuffixIndex
from .tree import TokenTree, TreeShape, compact, supports_tree
from .tree_draft import model_tree


@dataclass
class Draft:
    tokens: list[int]
    # (len(tokens), V) log-probabilities the tokens were drawn from; None = deterministic
    # proposal (point mass), as for lookup or greedy drafting.
    logq: mx.array | None = None
    source: TokenSource = "draft"
    # Several candidates as a tree (node 0 the pending token); `tokens` is then its main line.
    tree: TokenTree | None = None
    # Drawn from `logq` with the target's position keys (`sampling.keyed_noise`): the target
    # checks the tokens by its own keyed draws, as a deterministic draft's.
    keyed: bool = False


class Drafter(Protocol):
    name: str

    def propose(self, history: Sequence[int], k: int, params: SamplingParams,
                constraint: TokenConstraint | None = None) -> Draft: ...

    def rewind_to(self, n: int) -> None: ...


class DraftModel:
    """A smaller model with its own KV cache, kept a prefix of the session's history."""

    name = "model"

    def __init__(self, lm: LoadedModel, min_confidence: float = 0.0, vocab_limit: int = 0,
                 draft_vocab: int = 0, target_width: int = 0):
        self.lm = lm
        self.cache = ModelCache(lm)
        self.fed: list[int] = []  # tokens in the draft cache (a prefix of the history)
        self.synced = 0  # fed[:synced] is known to be history
        # Stop drafting once the draft's own estimate that all of this round's drafts are
        # right (the product of its probabilities of its drafts, before temperature and filters)
        # falls below this.
        self.min_confidence = min_confidence
        # Propose only ids the target has (the target's embedding may be narrower).
        self.vocab_limit = vocab_limit or lm.vocab_size
        # The width of the target's logits: keyed noise is made at the width it is drawn at
        # (MLX's random bits for one key differ with the width asked for).
        self.target_width = max(target_width, self.vocab_limit)
        # draft_vocab > 0: logits only for the first draft_vocab ids plus ids seen in the
        # history (None: the full head, or a model class the restricted head does not fit).
        self.head = RestrictedHead.build(lm.model, draft_vocab, self.vocab_limit)
        self.scanned = 0  # history[:scanned] has had its ids added to the head
        # After a tree round: (the tree, draft cache row of each node fed, len(history)).
        self._tree: tuple[TokenTree, dict[int, int], int] | None = None

    @property
    def stops_itself(self) -> bool:
        """Does a round end where the draft's confidence runs out (so K is only a cap)?"""
        return self.min_confidence > 0

    def rewind_to(self, n: int) -> None:
        # min with len(fed): a round interrupted inside `propose` fed the cache beyond `fed`
        # (a tree round leaves its nodes' rows beyond `fed` too).
        self.cache.rewind_to(min(n, len(self.fed)))
        del self.fed[self.cache.offset :]
        self.scanned = min(self.scanned, n)
        self._tree = None

    def adopt(self, cache: list, tokens: Sequence[int]) -> None:
        """Continue from `cache`, the KV of `tokens` (e.g. from a PrefixStore), if it fits."""
        if self.cache.adopt(cache, len(tokens)):
            self.fed = list(tokens)
            self.synced = self.scanned = 0  # checked against the history at the next round

    def _sync(self, history: Sequence[int]) -> list[int]:
        """Rewind to the common prefix with `history`; return the tokens still to feed.
        `fed[:synced]` was history when last checked: when its tail still lines up (the usual
        round, the history only grew), only the tokens after it are compared, so a round
        does not scan the whole context."""
        s, t = min(self.synced, len(self.fed)), PromptLookup.TAIL_CHECK
        if s < len(history) and self.fed[max(s - t, 0) : s] == list(history[max(s - t, 0) : s]):
            keep = s + common_prefix(self.fed[s:], history[s : len(history) - 1])
        else:
            keep = common_prefix(self.fed, history[:-1])
        self.rewind_to(keep)
        self.synced = self.cache.offset
        return list(history[self.cache.offset :])

    # Tokens to catch up on that the round's first draft step feeds along with the pending
    # one (after a round accepted in full: the last draft and the target's token), instead
    # of a forward pass of their own; a longer catch-up is prefilled first.
    FIRST_STEP_MAX = 8

    def catch_up(self, history: Sequence[int], cancel) -> None:
        """Prefill what `prepare` would (all of `history` the cache lacks but its last few
        tokens) in the chunks the session's schedule gives (`step.chunk_at`), stopping
        between chunks once `cancel` is set, so a long new prompt does not hold a cancel up;
        what was fed stays fed (the cache holds a prefix of `history`)."""
        todo = self._sync(history)
        while len(todo) > self.FIRST_STEP_MAX and not cancel.cancelled:
            n = min(chunk_at(self.cache.offset, self.lm.device, 512), len(todo) - 1)
            prefill(self.lm.model, todo[:n], self.cache.cache, chunk=n)
            self.fed.extend(todo[:n])
            self.synced = len(self.fed)
            todo = todo[n:]

    def prepare(self, history: Sequence[int]) -> list[int]:
        """Catch the cache up with `history` (a new prompt, tool output, tokens decoded while
        drafting was off) but its last few tokens; returns the tokens left to feed, which end
        with the pending one."""
        todo = self._sync(history)
        if len(todo) > self.FIRST_STEP_MAX:
            prefill(self.lm.model, todo[:-1], self.cache.cache)
            self.fed.extend(todo[:-1])
            self.synced = len(self.fed)
            todo = todo[-1:]
        return todo

    def _penalized(self, logits: mx.array, recent: Sequence[int], params: SamplingParams) -> mx.array:
        """The repetition penalty on one draft position's (1, m) logits, as `sampling.penalize`
        applies it to the target's (the same tokens, the same factor), over the restricted
        head's columns when there is one."""
        hit = penalized_ids(recent, self.vocab_limit, params)
        if hit is not None:
            hit = hit[: logits.shape[-1]] if self.head is None else self.head.columns(hit[None])[0]
        return apply_penalty(logits, hit, params)

    def noise(self, params: SamplingParams, at: int, width: int) -> mx.array:
        """(1, width) the target's keyed draw noise at position `at` (made at the target's
        logits' width, as its draw makes it), over this draft's first `width` logits' columns
        (the restricted head's ids when there is one)."""
        g = keyed_noise(params.noise_seed, at, self.target_width)[None, : self.vocab_limit]
        return (g if self.head is None else self.head.columns(g))[:, :width]

    def _step(self, inp: mx.array, toks: list[mx.array], params: SamplingParams,
              constraint: TokenConstraint | None, history: Sequence[int] = (),
              at: int = -1) -> tuple[mx.array, mx.array, mx.array] | None:
        """Queue one draft step: (token, log-probs it was drawn from, the token's log-probability
        before temperature and filters), over the restricted head's ids when there is one; None
        when the constraint allows none of those ids. With a repetition penalty, `history` +
        this round's drafts are the tokens before it. `at` ≥ 0 (sampling with keyed draws):
        the token's position, whose key the draw shares with the target's.

        The third is the draft's confidence in its token. Greedy, it is the largest
        log-probability, as the log-probs are. Sampling, the distribution drawn from is
        sharpened by the temperature and cut by top-p (a 0.8 token often reads 1.0 there), so
        its figures would hide the forks where the draft is unsure; the unsharpened
        probability of the token drawn shows them, and is the greedy figure where the draw is
        the most likely token."""
        width, head, mask = self.vocab_limit, self.head, None
        if constraint is not None:  # checked before feeding, so the cache matches `fed`
            mask = fit_width(constraint.masks([int(t.item()) for t in toks])[-1:], width)
            if head is not None:
                mask = head.columns(mask)
                if not mx.any(mask).item():
                    return None
        if head is None:
            logits = forward(self.lm.model, inp, self.cache.cache)[-1:, :width]
        else:
            hidden = self.lm.model.model(inp[None], cache=self.cache.cache)[0, -1:]
            logits = head.logits(hidden)
        if params.penalized:  # the draft applies the target's penalty, so its drafts land
            logits = self._penalized(logits, [*history, *(int(t.item()) for t in toks)], params)
        logits = apply_mask(logits, mask)
        raw = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        if params.greedy:
            lp = raw
            tok = mx.argmax(lp, axis=-1)
        else:
            lp = log_probs(logits, params)
            if at >= 0:
                tok = mx.argmax(lp + self.noise(params, at, lp.shape[-1]), axis=-1)
            else:
                tok = mx.random.categorical(lp, axis=-1)
        sure = mx.take_along_axis(raw, tok[:, None], axis=-1)
        if head is not None:
            tok = head.real_ids(tok)
        mx.async_eval(tok, lp, sure)
        return tok, lp, sure

    def propose(self, history, k, params, constraint=None) -> Draft:
        todo = self.prepare(history)
        if self.head is not None:  # every id of the history so far can be proposed
            self.head.add(history[min(self.scanned, len(history)) :])
            self.scanned = len(history)
        # Steps are fed to each other as lazy arrays. With a confidence floor, each step's top
        # probability is read before the next is queued: a step past the floor is never
        # computed, since a draft step costs a sizeable part of a target step. Every token
        # computed is proposed (verifying one more token costs little).
        toks: list[mx.array] = []
        lps: list[mx.array] = []
        sure = 1.0  # the draft's own estimate that every token so far is right
        inp: mx.array = mx.array(todo, dtype=mx.uint32)
        keyed = params.keyed
        for i in range(k):
            step = self._step(inp, toks, params, constraint, history,
                              len(history) + i if keyed else -1)
            if step is None:  # nothing the grammar allows is in the restricted head
                break
            toks.append(step[0])
            lps.append(step[1])
            if self.min_confidence > 0 and i + 1 < k:
                sure *= math.exp(step[2].item())
                if sure < self.min_confidence:
                    break
            inp = step[0]
        values = mx.concatenate(toks).tolist() if toks else []
        # Step 0 fed `todo` (ending with history's last token), step i > 0 fed values[i - 1].
        if toks:
            self.fed.extend(todo + values[: len(toks) - 1])
        self.synced = len(history)  # fed = history, then this round's drafts
        logq = None
        if not params.greedy and lps:
            logq = mx.concatenate(lps, axis=0)
            if self.head is not None:  # q = 0 outside the head's ids, at the target's width
                logq = self.head.widen(logq)
        return Draft(values, logq, "draft", keyed=keyed)

    def propose_tree(self, history, k, params, constraint, shape: TreeShape) -> Draft:
        """A tree of up to `shape.nodes` nodes whose main line is k deep
        (`tree_draft.model_tree`); a chain where there is no room for branches or the model
        cannot take a tree."""
        if shape.nodes <= k or not supports_tree(self.lm.model, self.cache.cache):
            return self.propose(history, k, params, constraint)
        tree, rows = model_tree(self, history, k, params, constraint, shape)
        # A chain left its rows as a chain round does (`fed`): nothing to compact.
        self._tree = None if tree.is_chain() else (tree, rows, len(history))
        line = tree.spine()
        logq = None
        if not params.greedy and line:
            logq = mx.stack([tree.logq[n] for n in line])
        return Draft([tree.tokens[n] for n in line], logq, "draft",
                     None if tree.is_chain() else tree, keyed=tree.keyed)

    def keep_path(self, path: Sequence[int]) -> None:
        """After verifying the last tree: keep the history and the accepted path's rows in the
        draft cache (contiguous, as a chain round leaves them), drop the other nodes' rows."""
        if self._tree is None:
            return
        tree, rows, base = self._tree
        self._tree = None
        keep: list[int] = []
        for node in path[1:]:
            if node not in rows:  # not fed (a leaf): neither is any node below it
                break
            keep.append(rows[node] - base)
        del self.fed[base:]
        compact(self.cache.cache, base, keep)
        self.fed.extend(tree.tokens[n] for n in path[1 : 1 + len(keep)])


class PromptLookup:
    """N-gram lookup: continue a match in the history (or extra text), no model call.

    Two things make its drafts land on copy-heavy edits:
    - a match that was accepted continues across rounds (a cursor into the source), so
      the draft keeps following the text being copied instead of re-searching each round,
      and a run accepted in full drafts twice as far next time;
    - each kind of match (continuing, or a fresh n-gram of n tokens, latest occurrence)
      drafts as much as it has recently had accepted: a kind whose drafts keep failing
      drafts nothing for a while, since a rejected draft costs a verify pass wider than a
      plain step.
    (Choices made on the tune workloads of `spec-agent bench lookup`: 1-token matches and
    preferring the occurrence nearest where a copy left off both lost there.)
    Per-round work does not grow with the context: the index maps each n-gram to the
    positions after its occurrences (appended as the history grows, popped on a rewind),
    and the history is checked against the last one by its tail only.
    """

    name = "lookup"
    TAIL_CHECK = 16  # tokens compared to decide that the history only grew since last time

    def __init__(self, max_n: int = 4, min_n: int = 2, extra: Sequence[int] = (), max_k: int = 16,
                 suffix: SuffixIndex | None = None):
        self.max_n, self.min_n = max_n, min_n
        self.suffix = suffix  # earlier replies, consulted beside the context
        self.source: TokenSource = "lookup"  # where the last match came from
        self.max_k = max_k  # longest draft of a continuing run (a pinned K sets it to K)
        self.hist: list[int] = []
        self.index: dict[tuple[int, ...], list[int]] = {}
        self.extra = list(extra)
        self.extra_index: dict[tuple[int, ...], list[int]] = {}
        self._add(self.extra, self.extra_index, 0, len(self.extra))
        self.last_match = 0  # n of the last successful match (0 = none)
        self.src = -1  # where in hist the last draft was copied from (-1: none)
        self.src_at = 0  # len(hist) when that draft was made
        self.kind, self.drafted = "", 0  # what the last draft came from, and its length
        self.gain: dict[str, float] = dict(self.PRIOR)  # recent accepted tokens per kind
        self.suffix_draft: list[int] = []  # the last draft from the suffix index (to score)
        self.suffix_at = 0  # len(hist) when it was made
        self.suffix_run = 0  # the length of the last suffix draft when it was accepted whole

    # Accepted tokens a kind of match is expected to yield before any is measured.
    PRIOR = {"follow": 8.0, "n4": 4.0, "n3": 3.0, "n2": 1.5, "n1": 1.0, "suffix": 4.0}
    GROW, FLOOR, SKIP_BELOW = 2, 1, 0.3  # chosen on the tune workloads of `bench lookup`

    # ---- the index ----------------------------------------------------------------------

    def _add(self, seq: Sequence[int], index: dict, start: int, upto: int) -> None:
        """Index the n-grams ending at each `end` in [start, upto) (their continuation
        starts at `end`, so it must exist: upto <= len(seq))."""
        for end in range(max(start, self.min_n), upto):
            for n in range(self.min_n, min(self.max_n, end) + 1):
                index.setdefault(tuple(seq[end - n : end]), []).append(end)

    def rewind_to(self, n: int) -> None:
        """Forget history from position n on; costs O(tokens removed)."""
        if n >= len(self.hist):
            return
        for end in range(len(self.hist) - 1, max(n, self.min_n) - 1, -1):
            for m in range(self.min_n, min(self.max_n, end) + 1):
                key = tuple(self.hist[end - m : end])
                ends = self.index[key]
                ends.pop()  # ends are appended in order, so `end` is the last one
                if not ends:
                    del self.index[key]
        del self.hist[n:]
        if self.src >= n or self.src_at > n:
            self.src = -1

    def _update(self, history: Sequence[int]) -> None:
        h, t = len(self.hist), self.TAIL_CHECK
        grown = h <= len(history) and list(history[max(h - t, 0) : h]) == self.hist[max(h - t, 0) :]
        if not grown:  # a different history (a new prompt): rewind to what they share
            self.rewind_to(common_prefix(self.hist, history))
            h = len(self.hist)
        self.hist.extend(history[h:])
        self._add(self.hist, self.index, h, len(self.hist))

    # ---- matching -----------------------------------------------------------------------

    def _follow(self) -> int:
        """Continue the last draft's source: the position in hist to copy from next, or -1
        when the tokens added since then left it. Scores the last draft's kind by how many
        of its tokens were accepted."""
        if self.src < 0:
            return -1
        added = self.hist[self.src_at :]
        i = 0
        while i < len(added) and self.hist[self.src + i] == added[i]:
            i += 1
        if self.drafted:
            self._score(self.kind, min(i, self.drafted))
        if i < len(added):
            self.src = -1
            return -1
        return self.src + len(added)

    def _length(self, kind: str, k: int) -> int:
        """Tokens to draft from a match of this kind: a continuing run that was accepted in
        full grows past k (to `max_k`); a fresh match drafts k while its kind pays, fewer
        when not, none when its drafts have kept failing (retried after a while)."""
        g = self.gain[kind]
        if kind == "follow" and self.drafted:
            return min(self.max_k, max(k, self.GROW * self.drafted))
        if g < self.SKIP_BELOW:
            self.gain[kind] = g + 0.03
            return 0
        return k if g >= 2 else max(min(k, self.FLOOR), min(k, round(2 * g)))

    def _draft(self, kind: str, end: int, k: int) -> list[int]:
        self.kind, self.drafted = kind, self._length(kind, k)
        if self.drafted:  # a context draft ends a suffix run (one that drafts nothing does not)
            self.suffix_run = 0
        self.src, self.src_at = (end, len(self.hist)) if self.drafted else (-1, 0)
        return _continue(self.hist, end, self.drafted)

    def match(self, history: Sequence[int], k: int) -> tuple[int, list[int]]:
        """(n, continuation): n is the matched n-gram length (the whole run so far when a
        match continues); (0, []) when nothing matches."""
        self._update(history)
        self.source = "lookup"
        end = self._follow()
        if end >= 0:
            cont = self._draft("follow", end, k)
            return (max(self.last_match, self.max_n), cont) if cont else (0, [])
        self._score_suffix()
        # The context first: where it holds a match whose kind is drafting, that match drafts,
        # so every round lookup alone would draft is drafted alike. The suffix index drafts
        # what the context cannot: where the context has no match, or its kind of match has
        # been drafting nothing.
        for n in range(min(self.max_n, len(history)), self.min_n - 1, -1):
            key = tuple(history[-n:])
            ends = self.index.get(key)
            if ends:
                cont = self._draft(f"n{min(n, 4)}", ends[-1], k)
                if cont:
                    return n, cont
                break
            ends = self.extra_index.get(key)
            if ends:
                return n, self.extra[ends[-1] : ends[-1] + k]
        n_s, cont_s = self._suffix_match(history, k)
        if cont_s:
            self.source = "suffix"
            self.kind, self.drafted, self.src = "suffix", 0, -1
            self.suffix_draft, self.suffix_at = cont_s, len(self.hist)
            return n_s, cont_s
        return 0, []

    def _suffix_match(self, history: Sequence[int], k: int) -> tuple[int, list[int]]:
        """The suffix index's (n, draft), shortened like any kind of match by how much of
        its recent drafts was accepted ((0, []) without an index)."""
        if self.suffix is None:
            return 0, []
        if self.suffix_run:  # its last draft was accepted whole: a longer one, as `follow`
            k = min(self.max_k, max(k, self.GROW * self.suffix_run))
        n, cont = self.suffix.continuation(history, k)
        if not cont:
            return 0, []
        size = self._length("suffix", len(cont))
        return (n, cont[:size]) if size else (0, [])

    def _score_suffix(self) -> None:
        """Score the last suffix draft by how much of it the history now holds."""
        draft, self.suffix_draft = self.suffix_draft, []
        accepted = common_prefix(self.hist[self.suffix_at :], draft) if draft else 0
        if draft:
            self._score("suffix", accepted)
        self.suffix_run = len(draft) if draft and accepted == len(draft) else 0

    def _score(self, kind: str, accepted: int) -> None:
        """Fold one draft's accepted tokens into its kind's recent gain."""
        self.gain[kind] = 0.7 * self.gain[kind] + 0.3 * accepted

    def propose(self, history, k, params, constraint=None) -> Draft:
        n, cont = self.match(history, k)
        self.last_match = n
        return Draft(cont, None, self.source)

    def propose_tree(self, history, k, params, constraint, shape: TreeShape) -> Draft:
        return self.branch(self.propose(history, k, params, constraint), history, k,
                           shape.nodes)

    def branch(self, draft: Draft, history: Sequence[int], k: int, budget: int) -> Draft:
        """`draft` (the match `match` chose) with the continuations of the other occurrences
        of the longest n-gram ending the history (context first, then the suffix index) as
        branches, up to `budget` nodes."""
        if not draft.tokens or budget <= len(draft.tokens):
            return draft
        paths = [draft.tokens, *lookup_paths(self.hist, self.index, self.max_n, self.min_n, k)]
        if self.suffix is not None:
            paths += self.suffix.continuations(history, k)
        tree = TokenTree.from_paths(history[-1], paths, budget)
        return draft if tree.is_chain() else Draft(draft.tokens, None, draft.source, tree)


def lookup_paths(hist: Sequence[int], index: dict, max_n: int, min_n: int, k: int,
                 limit: int = 8) -> list[list[int]]:
    """Continuations (up to k tokens) of the latest `limit` occurrences of the longest n-gram
    ending `hist` that `index` holds (n-gram -> positions after it), latest first."""
    for n in range(min(max_n, len(hist)), min_n - 1, -1):
        ends = index.get(tuple(hist[-n:]))
        if ends:
            return [_continue(hist, e, k) for e in reversed(ends[-limit:])]
    return []


def _continue(seq: Sequence[int], end: int, k: int) -> list[int]:
    """seq[end:end+k], extended periodically past the end of seq: a match close to the end
    means the text repeats with period len(seq) - end, so the draft repeats it too."""
    out: list[int] = []
    for i in range(k):
        j = end + i
        out.append(seq[j] if j < len(seq) else out[j - len(seq)])
    return out


class Combined:
    """Lookup when it has a confident (long enough) match, the draft model otherwise."""

    name = "combined"

    def __init__(self, model: DraftModel, lookup: PromptLookup, confident_n: int = 3):
        self.model, self.lookup, self.confident_n = model, lookup, confident_n
        self.lookup_k = 8  # set per round by the Speculator from lookup's own acceptance

    @property
    def stops_itself(self) -> bool:
        return self.model.stops_itself

    def rewind_to(self, n: int) -> None:
        self.model.rewind_to(n)
        self.lookup.rewind_to(n)

    def prepare(self, history: Sequence[int]) -> None:
        self.model.prepare(history)

    def catch_up(self, history: Sequence[int], cancel) -> None:
        self.model.catch_up(history, cancel)

    def propose(self, history, k, params, constraint=None) -> Draft:
        n, cont = self.lookup.match(history, self.lookup_k)
        if n >= self.confident_n and cont:
            return Draft(cont, None, self.lookup.source)
        return self.model.propose(history, k, params, constraint)

    def propose_tree(self, history, k, params, constraint, shape: TreeShape) -> Draft:
        n, cont = self.lookup.match(history, self.lookup_k)
        if n >= self.confident_n and cont:
            return self.lookup.branch(Draft(cont, None, self.lookup.source), history,
                                      self.lookup_k, shape.nodes)
        return self.model.propose_tree(history, k, params, constraint, shape)

    def keep_path(self, path: Sequence[int]) -> None:
        self.model.keep_path(path)

"""Speculative decoding: draft → verify in one target pass → accept → rewind.

`verify_round` is one round, usable alone. `Speculator` drives rounds for a `Session`: it picks
K from measured acceptance, stops drafting when speculation does not pay (and re-probes later),
and keeps the figures for `GenerationStats`. When prompt lookup has no draft, it decodes plain
tokens on the pipelined path, asking the lookup after each one, until a draft appears.

Exactness: greedy rounds emit the target's argmax at every position, so the output equals
plain greedy decoding token for token. At temperature > 0 with keyed draws (every `Session`
call) each row draws its token as plain decoding does at that position and the drafts (lookup's,
or the draft model's drawn with the same noise) are accepted while they equal the draws, so the
output is plain sampling's, token for token, filters included. Without keys the acceptance rule
is rejection sampling (Leviathan et al. / Chen et al.), which leaves every emitted token
distributed exactly as plain sampling from `sampling.log_probs` would.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import mlx.core as mx

from ..cancel import CancelToken
from ..events import SpeculationChanged, TokenSource
from .drafters import Draft, Drafter
from .sampling import SamplingParams, apply_mask, draw, keyed_keys, log_probs, penalize, sample
from .step import Batch, TokenConstraint, forward, plain_decode
from .tree import TreeBudget, TreeShape, verify_tree


def _accept_keyed(lp: mx.array, draft: Draft, params: SamplingParams, at: int) -> tuple[int, int]:
    """A deterministic draft (prompt lookup, the suffix index) or a keyed one (a draft model's,
    drawn with the target's noise) against keyed draws: each row draws its token as plain
    decoding would at that position (`sampling.draw`), the drafts are accepted while they equal
    the draws, and the first draw that differs (or the one after the last draft) is the
    target's token. For a deterministic draft d, d is accepted with probability p(d), as by
    rejection sampling, and a rejected row's draw is p's given that it is not d, as rejection
    sampling's residual is. Either way the tokens are plain decoding's with the same seed."""
    k = len(draft.tokens)
    return _match(draft.tokens, draw(lp, keyed_keys(params.noise_seed, range(at, at + k + 1))).tolist())


def _match(drafts: Sequence[int], chosen: Sequence[int]) -> tuple[int, int]:
    """(drafts accepted, next token) where `chosen` holds the target's token for each of the
    len(drafts) + 1 positions: the drafts are accepted while they equal it, and the target's
    token at the first mismatch (or after the last draft) follows."""
    n = 0
    while n < len(drafts) and drafts[n] == chosen[n]:
        n += 1
    return n, int(chosen[n])


def _accept_sampled(logits: mx.array, draft: Draft, params: SamplingParams,
                    expect: dict | None = None, at: int = -1) -> tuple[int, int]:
    """Rejection sampling over one verify pass; returns (n accepted, next token). A
    deterministic draft or a keyed one (`Draft.keyed`) with keyed draws (`params.noise_seed`
    ≥ 0 and `at`, row 0's position, given) is checked by `_accept_keyed` instead.

    `expect`, when given, receives "accepted" and "rejected": the round's expected accepted
    drafts and the probability that one was rejected, from the distributions alone. Draft i
    is accepted with probability alpha_i = sum over tokens of min(p_i, q_i) once the ones
    before it were, so E[accepted] = sum_j prod_{i<=j} alpha_i and P(a rejection) = 1 -
    prod_i alpha_i. Their mean is what the sampled outcome's is, without the coin flips'
    noise, so `auto` can judge a sampled round's drafts as surely as a greedy one's. For a
    keyed model draft, whose token is accepted when the noised argmaxes of p and q agree,
    sum min(p, q) is an upper bound of that probability (0.918 against 0.915 per token,
    measured on the trained pair at T=0.7 by `bench.measure_coupling`)."""
    k = len(draft.tokens)
    lp = log_probs(logits, params, eager=True)  # target distribution at the k+1 positions
    keyed = params.keyed and at >= 0 and (draft.logq is None or draft.keyed)
    if keyed and (expect is None or k == 0):
        return _accept_keyed(lp, draft, params, at)
    if k == 0:
        return 0, int(mx.random.categorical(lp[0]).item())
    d = mx.array(draft.tokens, dtype=mx.int32)
    rows = mx.arange(k)
    logp_d = lp[rows, d]
    logq = draft.logq
    if logq is not None and logq.shape[-1] < lp.shape[-1]:  # a narrower draft: q = 0 beyond it
        pad = mx.full((k, lp.shape[-1] - logq.shape[-1]), -mx.inf, dtype=logq.dtype)
        logq = mx.concatenate([logq, pad], axis=-1)
    # Accept d_i with probability min(1, p(d_i) / q(d_i)); a deterministic proposal has q = 1.
    logq_d = logq[rows, d] if logq is not None else mx.zeros((k,))
    keep = None if keyed else mx.log(mx.random.uniform(shape=(k,))) < logp_d - logq_d
    if expect is not None:
        alpha = (mx.minimum(mx.exp(lp[:k]), mx.exp(logq)).sum(axis=-1) if logq is not None
                 else mx.exp(logp_d))  # a deterministic proposal: accepted with p(d_i)
        chain = mx.cumprod(mx.minimum(alpha, 1.0))
        got = mx.stack([chain.sum(), 1.0 - chain[-1]])
        mx.eval(got if keep is None else [keep, got])  # one sync for both
        e_acc, e_rej = got.tolist()
        expect["accepted"], expect["rejected"] = float(e_acc), max(float(e_rej), 0.0)
    if keyed:
        return _accept_keyed(lp, draft, params, at)
    accepted = keep.tolist()
    n = accepted.index(False) if False in accepted else k
    if n == k:
        return n, int(mx.random.categorical(lp[k]).item())
    # Rejected at n: draw from the residual max(0, p - q), renormalized.
    p = mx.exp(lp[n])
    q = mx.exp(logq[n]) if logq is not None else (mx.arange(p.shape[-1]) == d[n])
    residual = mx.maximum(p - q, 0.0)
    if residual.sum().item() <= 0:  # p == q up to rounding: rejection had probability ~0
        residual = p
    return n, int(mx.random.categorical(mx.log(residual)).item())


def verify_round(
    model, cache: list, pending: int, draft: Draft, params: SamplingParams,
    constraint: TokenConstraint | None = None, history: Sequence[int] = (),
    expect: dict | None = None,
) -> tuple[list[int], int]:
    """Feed [pending, d1..dK] in one pass; return (emitted tokens, drafts accepted).
    `history`: the tokens so far, ending with `pending` (for a repetition penalty: row i is
    penalized for history + d1..di, as plain decoding would have been). `expect`: see
    `_accept_sampled` (filled only when sampling; greedy acceptance has no noise to remove).

    Afterwards the cache holds pending + the accepted drafts; the last emitted token (the
    target's own) is the new pending token.
    """
    from mlx_lm.models.cache import trim_prompt_cache

    k = len(draft.tokens)
    logits = forward(model, [pending, *draft.tokens], cache)
    if params.penalized:
        logits = penalize(logits, history or [pending], draft.tokens, params)
    if constraint is not None:
        logits = apply_mask(logits, constraint.masks(draft.tokens))
    if params.greedy:
        # Accept the longest prefix where the draft equals the target's argmax, plus the
        # target's token at the first mismatch (or after the last draft).
        n, nxt = _match(draft.tokens, mx.argmax(logits, axis=-1).tolist())
    else:
        n, nxt = _accept_sampled(logits, draft, params, expect, len(history) if history else -1)
    if k - n and trim_prompt_cache(cache, k - n) != k - n:
        raise RuntimeError("the target's KV cache could not drop rejected draft tokens")
    return [*draft.tokens[:n], nxt], n


@dataclass
class SpecPolicy:
    mode: str = "auto"  # auto: measure and switch off when slower than plain; on: always
    fixed_k: int = 0  # 0 = adaptive
    k_max: int = 8
    # A draft model that ends its rounds by its own confidence drafts up to this many.
    confident_k_max: int = 12
    lookup_k_max: int = 16
    probe_rounds: int = 8  # rounds before the first speed comparison
    plain_probe: int = 4  # plain tokens timed per comparison
    backoff_tokens: int = 32  # plain tokens before re-probing (doubles while it keeps losing)
    # The expected speedup (measured acceptance and round cost against a measured plain step)
    # below which auto switches drafting off ...
    min_speedup: float = 1.0
    decide_after: int = 4  # ... once this many rounds are measured since it last came on
    check_every_max: int = 32  # rounds between measured-speed checks while speculation wins
    # A check skips its plain probe while recent rounds run at least this many times the
    # plain speed measured last.
    probe_skip_ratio: float = 1.5


@dataclass
class TreeArms:
    """Trees against chains, measured for one drafter kind: of its rounds that could have
    branched, the tokens and seconds (the round's whole time: drafting, verifying, handling
    its tokens) of rounds with branching allowed ("tree"; the drafter still drafts a chain
    where nothing is worth a branch) and of rounds drafted as chains, each arm's sums decayed
    with each of its own rounds (~7 rounds of memory; an arm not drafted lately keeps its
    last ratio). Each arm is tried `TRIES` times first (trees first); then the faster drafts,
    and the slower is tried again after `RETRY` rounds of the faster (the text, and with it
    what a branch buys, changes), round after round while its rounds beat the faster arm's
    recent speed, until its own overtakes it. Trees lose where the verify cost grows with
    rows or, when sampling, where side branches are seldom accepted; chains lose where the
    draft hesitates between two tokens and the verify pass costs little more for a few
    rows."""

    DECAY = 0.85
    TRIES = 2
    RETRY = 16
    sums: dict = field(default_factory=lambda: {"tree": [0.0, 0.0, 0], "chain": [0.0, 0.0, 0]})
    run: int = 0  # rounds of the faster arm since the slower one was last drafted

    def speed(self, arm: str) -> float:
        tokens, seconds, _ = self.sums[arm]
        return tokens / seconds if seconds > 0 else 0.0

    def _faster(self) -> str:
        return "tree" if self.speed("tree") >= self.speed("chain") else "chain"

    def _tried(self) -> bool:
        return min(self.sums["tree"][2], self.sums["chain"][2]) >= self.TRIES

    def pick(self) -> str:
        if not self._tried():
            return "tree" if self.sums["tree"][2] <= self.sums["chain"][2] else "chain"
        faster = self._faster()
        if self.run >= self.RETRY:
            return "chain" if faster == "tree" else "tree"
        return faster

    def add(self, arm: str, tokens: int, seconds: float) -> None:
        tried, faster = self._tried(), self._faster()
        pace = self.speed(faster)
        s = self.sums[arm]
        s[0], s[1], s[2] = self.DECAY * s[0] + tokens, self.DECAY * s[1] + seconds, s[2] + 1
        if not tried or self._faster() != faster:  # the lead changed: count from here
            self.run = 0
        elif arm == faster:
            self.run += 1
        else:  # a retry: while its rounds beat the faster arm's pace, it drafts again
            self.run = self.RETRY if tokens / max(seconds, 1e-9) > pace else 0


@dataclass
class _Ema:
    value: float = 0.0
    n: int = 0
    alpha: float = 0.25

    def add(self, x: float) -> None:
        self.value = x if self.n == 0 else (1 - self.alpha) * self.value + self.alpha * x
        self.n += 1


@dataclass
class _RoundFit:
    """What recent rounds of one drafter kind measured, each sum decayed per round:
    - acceptance per drafted token as the chain sees it: accepted / (accepted + rejections),
      the estimate of `a` in a geometric model where each next draft is accepted with
      probability `a` while the ones before it were;
    - a round's cost against its K: seconds = c0 + c1 * K, by least squares, pulled toward
      the slope its drafting cost alone gives (K hardly varies between some rounds).
    The expected speedup of a round of K is then E(K) / (cost(K) / plain step), with
    E(K) = 1 + a + ... + a^K tokens per round (accepted drafts and the target's own).
    A self-stopping draft's rounds are also summed per arm (rounds of its own length, rounds
    at the fit's K), tokens and seconds, so that the two can be compared as measured."""

    DECAY = 0.85  # per round: ~7 rounds of memory, so a change of text shows within a few
    RIDGE = 4.0  # weight (in rounds times K^2) of the slope prior
    w: float = 0.0
    sk: float = 0.0
    skk: float = 0.0
    st: float = 0.0
    skt: float = 0.0
    accepted: float = 0.0
    rejected: float = 0.0
    draft_s: float = 0.0
    drafted: float = 0.0
    rounds: int = 0  # since the last `forget`
    # A draft that ends its rounds by its own confidence: its rounds asked for the cap (their
    # length its own) and those asked for a shorter K, each arm's tokens (accepted + the
    # target's one) and seconds, decayed with each round of that arm (an arm not drafted
    # lately keeps its last ~7 rounds' ratio), and how many rounds each arm has had.
    arms: dict = field(default_factory=lambda: {"free": [0.0, 0.0, 0], "fixed": [0.0, 0.0, 0]})

    def add(self, k: int, n: float, seconds: float, draft_s: float,
            rejected: float | None = None, arm: str = "") -> None:
        """A round of `k` drafts, `n` accepted; `rejected`: whether one was (default n < k),
        or, with `n`, the expectations of a sampled round (see `_accept_sampled`); `arm`:
        "free" or "fixed" for a self-stopping draft's round (see `arms`)."""
        d = self.DECAY
        self.w, self.sk, self.skk = d * self.w + 1, d * self.sk + k, d * self.skk + k * k
        self.st, self.skt = d * self.st + seconds, d * self.skt + k * seconds
        self.accepted = d * self.accepted + n
        self.rejected = d * self.rejected + (float(n < k) if rejected is None else rejected)
        self.draft_s, self.drafted = d * self.draft_s + draft_s, d * self.drafted + k
        if arm:
            sums = self.arms[arm]
            sums[:] = [d * sums[0] + n + 1, d * sums[1] + seconds, sums[2] + 1]
        self.rounds += 1

    def forget(self, keep: float = 0.25) -> None:
        """Keep the estimates but weigh them as a few rounds, so fresh rounds decide (the
        arms' ratios stay as they were)."""
        for name in ("w", "sk", "skk", "st", "skt", "accepted", "rejected", "draft_s", "drafted"):
            setattr(self, name, getattr(self, name) * keep)
        self.rounds = 0

    def measured(self, arm: str, plain_s: float) -> float | None:
        """The measured speedup of an arm's rounds against a plain step of `plain_s`; None
        until it has had two."""
        tokens, seconds, n = self.arms[arm]
        if n < 2 or seconds <= 0 or plain_s <= 0:
            return None
        return tokens * plain_s / seconds

    @property
    def acceptance(self) -> float:
        return (self.accepted + 0.5) / (self.accepted + self.rejected + 1.0)

    def cost(self, plain_s: float) -> tuple[float, float]:
        """(c0, c1): a round of K costs c0 + c1 * K seconds."""
        mk, mt = self.sk / self.w, self.st / self.w
        prior = self.draft_s / self.drafted if self.drafted else 0.0
        prior += 0.03 * plain_s  # a verify pass grows a little with its rows
        var = self.skk - self.w * mk * mk
        cov = self.skt - self.w * mk * mt
        c1 = max((cov + self.RIDGE * prior) / (var + self.RIDGE), 0.0)
        return max(mt - c1 * mk, 1e-9), c1


@dataclass
class _CallStats:
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    chained: int = 0  # drafts on the rounds' main lines (a tree's spine; a chain's every draft)
    forced: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    k: int = 0
    events: list = field(default_factory=list)
    by_source: dict[str, list[int]] = field(default_factory=dict)  # source -> [drafted, accepted]


def expected_tokens(a: float, k: int) -> float:
    """Tokens a chain round of `k` drafts yields when each is accepted with probability `a`
    after its predecessors: 1 + a + ... + a^k."""
    return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def expected_speedup(a: float, k: int, c0: float, c1: float, plain_s: float) -> float:
    return expected_tokens(a, k) * plain_s / (c0 + c1 * k)


def best_k(a: float, c0: float, c1: float, plain_s: float, k_max: int) -> tuple[int, float]:
    """(K, expected speedup) of the best chain length in 1..k_max."""
    return max(((k, expected_speedup(a, k, c0, c1, plain_s)) for k in range(1, max(k_max, 1) + 1)),
               key=lambda kv: kv[1])


class Speculator:
    """Drives speculative rounds for a Session; persists across turns (K and speeds carry)."""

    RECENT_DECAY = 0.9  # per round: the speed comparison looks back ~10 rounds

    def __init__(self, drafter: Drafter, policy: SpecPolicy | None = None,
                 tree: TreeBudget | None = None):
        self.drafter = drafter
        self.policy = policy or SpecPolicy()
        self.tree = tree  # None: chains only; else token trees sized by the verify cost
        # Trees against chains, per drafter kind ("model", "lookup"), where a round could
        # branch. A round's arm is picked by the arms of the kind that drafted the round
        # before (which kind drafts is known only once the drafter has proposed; kinds come
        # in runs), and counted only where that kind drafted it, so neither kind's speeds
        # mix with the other's.
        self.tree_arms: dict[str, TreeArms] = {}
        self._arm = ("", "")  # (kind, arm) picked for the round being drafted; "" none
        self._last_kind = "model"
        self.accepted_per_round: dict[str, _Ema] = {}
        self.spec_tps = _Ema()  # tokens per second while speculating (per round)
        # Rounds' tokens and seconds, each decayed by RECENT_DECAY per round: their ratio is
        # recent rounds' speed weighted by their time, which the on/off decision uses (an
        # average of per-round speeds swings with a few short failed rounds).
        self.recent = (0.0, 0.0)
        # The same rounds' verify-pass seconds and their count, decayed alike: a plain step
        # costs at most a verify pass, so before plain speed is measured recent rounds run at
        # most (tokens / seconds) x (verify seconds per round) times as fast as plain.
        self.recent_verify = (0.0, 0.0)
        self.plain_tps = _Ema()  # tokens per second of single plain steps
        # Time source of those speeds (a bench that pauses decoding mid-turn pauses it too).
        self.clock: Callable[[], float] = time.perf_counter
        self.enabled = True
        self.plain_left = 0  # plain tokens to go before re-probing
        self.backoff = self.policy.backoff_tokens
        self.rounds_since_check = 0
        self.probe_plain = 0  # plain tokens left in a speed probe
        self.plain_fresh = False  # plain speed measured (on misses) since the last check
        self.check_every = self.policy.probe_rounds  # doubles while speculation keeps winning
        self.call = _CallStats()
        self.off_reason = ""  # why auto switched drafting off, while it is off
        self.fits: dict[str, _RoundFit] = {}  # drafter kind ("model", "lookup") -> recent rounds
        self.reprobing = False  # drafting came back on and has not yet been judged
        # The call's chained, accepted, draft_s, by_source and verify_s before a round.
        self._seen = (0, 0, 0.0, {}, 0.0)
        self._expect: tuple[float, float] | None = None  # the last sampled round's expectations
        self._asked = 0  # the K the last round was asked to draft (0: a forced round)

    # ---- Session hooks ------------------------------------------------------------------

    def rewind_to(self, n: int) -> None:
        self.drafter.rewind_to(n)

    def drop_emitted(self, sources: Sequence[TokenSource]) -> None:
        """The session stopped inside a batch: accepted tokens after the stop are not output,
        so they leave the counts as well."""
        c = self.call
        c.forced -= sum(1 for s in sources if s == "forced")
        c.accepted -= sum(1 for s in sources if s in ("draft", "lookup", "suffix"))
        for s in sources:
            if s in c.by_source:
                c.by_source[s][1] -= 1

    def stats(self) -> dict:
        c = self.call
        return dict(speculative=True, drafter=self.drafter.name, rounds=c.rounds,
                    drafted=c.drafted, accepted=c.accepted, forced_tokens=c.forced, k=c.k,
                    draft_s=c.draft_s, verify_s=c.verify_s,
                    by_source=tuple((s, d, a) for s, (d, a) in sorted(c.by_source.items())))

    def progress(self) -> dict:
        """Figures so far in this call, and the speculation state, for `DecodeProgress`."""
        c = self.call
        state = "on" if self.enabled else "auto-off"
        return dict(drafted=c.drafted, accepted=c.accepted, rounds=c.rounds,
                    k=c.k if self.enabled else 0, speculation=state,
                    reason="" if self.enabled else self.off_reason)

    # ---- policy -------------------------------------------------------------------------

    def k_for(self, source: str) -> int:
        if self.policy.fixed_k:
            return self.policy.fixed_k
        ema = self.accepted_per_round.get(source)
        if source == "lookup":
            m = ema.value if ema and ema.n >= 2 else 4.0
            k = max(2, min(self._cap("lookup"), math.ceil(m) + 4))
            # Where the measured cost says a shorter chain pays more, draft that long.
            best = self._best(source, k)
            return max(1, min(k, best[0])) if best else k
        cap = self._cap("model")
        best = self._best("model", cap)
        if best:  # measured: the K with the largest expected (or measured) speedup
            return best[0]
        if self._stops_itself():
            return cap  # unmeasured: the draft's confidence sets each round's length
        if ema is None or ema.n < 3:
            return min(5, self.policy.k_max)
        m = ema.value  # the seed's advice: ~3-4 accepted per round -> K=6, < 2.5 -> K=4
        k = 8 if m >= 4.5 else 6 if m >= 3 else 5 if m >= 2.5 else 4
        return min(k, self.policy.k_max)

    def _plain_s(self) -> float:
        """Seconds per plain token as measured here (0 before any was)."""
        return 1.0 / self.plain_tps.value if self.plain_tps.n and self.plain_tps.value > 0 else 0.0

    def _best(self, kind: str, k_max: int) -> tuple[int, float] | None:
        """(K, expected speedup) for `kind` from its measured rounds and the measured plain
        step; None until 3 rounds and a plain step are measured."""
        fit = self.fits.get(kind)
        plain_s = self._plain_s()
        if fit is None or fit.w <= 0 or fit.rounds < 3 and fit.w < 3 or plain_s <= 0:
            return None
        c0, c1 = fit.cost(plain_s)
        best = best_k(fit.acceptance, c0, c1, plain_s, k_max)
        if self._free_k(kind) != k_max:
            return best
        # A draft that ends its rounds by its own confidence stops where it is unsure, so the
        # drafts it makes are accepted more often than one rate for every position says and
        # the fit undervalues its long confident runs. Its rounds of its own length and its
        # rounds at the fit's K are each measured: its own length drafts while it pays (or
        # measured faster than the cut rounds); where it does not, the fit's K (whose
        # expectation stands in for that arm until the arm is measured).
        free, fixed = fit.measured("free", plain_s), fit.measured("fixed", plain_s)
        fixed = best if fixed is None else (best[0], fixed)
        if free is not None and (free >= self.policy.min_speedup or free >= fixed[1]):
            return k_max, free
        return fixed

    def _stops_itself(self) -> bool:
        """Does the draft model end its rounds by its own confidence (K is only a cap)?"""
        return getattr(self.drafter, "stops_itself", False)

    def _cap(self, kind: str) -> int:
        """The most drafts a round of `kind` ("model", "lookup") may ask for."""
        if kind == "lookup":
            return self.policy.lookup_k_max
        return self.policy.confident_k_max if self._stops_itself() else self.policy.k_max

    def _free_k(self, kind: str) -> int:
        """The cap of a round whose length the draft's confidence sets (0: none is)."""
        if kind != "model" or self.policy.fixed_k or not self._stops_itself():
            return 0
        return self._cap(kind)

    def expected(self) -> tuple[float, str] | None:
        """The best expected speedup over the drafter kinds measured here, and a summary of
        its figures; None until one is measured."""
        found = None
        for kind, fit in self.fits.items():
            best = self._best(kind, self.policy.fixed_k or self._cap(kind))
            if best is None:
                continue
            if self.policy.fixed_k:  # a pinned K is the only one there is
                c0, c1 = fit.cost(self._plain_s())
                best = (self.policy.fixed_k, expected_speedup(fit.acceptance, self.policy.fixed_k,
                                                              c0, c1, self._plain_s()))
            if found is None or best[1] > found[0]:
                c0, c1 = fit.cost(self._plain_s())
                cost = (c0 + c1 * best[0]) / self._plain_s()
                found = (best[1], (f"{kind} acceptance {fit.acceptance:.2f}, a round of "
                                   f"K={best[0]} costs {cost:.2f} plain steps"))
        return found

    def _note_round(self, tokens: int, seconds: float, kind: str | None = None) -> None:
        """One round's tokens and time (its drafts' figures are read from the call's tally)."""
        seconds = max(seconds, 1e-9)
        self.spec_tps.add(tokens / seconds)
        d = self.RECENT_DECAY
        self.recent = (d * self.recent[0] + tokens, d * self.recent[1] + seconds)
        c = self.call
        self.recent_verify = (d * self.recent_verify[0] + c.verify_s - self._seen[4],
                              d * self.recent_verify[1] + 1)
        # A tree round is fitted as the chain it extends: K is its main line's length and a
        # rejection is an accepted path shorter than that line. Its side branches add verify
        # rows (their cost is in the round's time), not drafts a chain would have made;
        # counted as drafts, every tree round would read as a rejection and shorten K.
        chained, accepted, draft_s, by_source, _ = self._seen
        k, n = c.chained - chained, c.accepted - accepted
        if kind is None:  # which drafter: the source whose tally grew
            grown = [s for s, (dd, _) in c.by_source.items() if dd > by_source.get(s, 0)]
            kind = ("lookup" if grown[0] in ("lookup", "suffix") else "model") if grown else ""
        expect, self._expect = self._expect, None
        asked, self._asked = self._asked, 0
        (picked_by, tree_arm), self._arm = self._arm, ("", "")
        if kind:
            self._last_kind = kind
        # (a round that drafted nothing is a plain step, no arm's)
        if tree_arm and k > 0 and kind == picked_by:
            self.tree_arms.setdefault(kind, TreeArms()).add(tree_arm, tokens, seconds)
        if k > 0 and kind:
            fit = self.fits.setdefault(kind, _RoundFit())
            cap = self._free_k(kind)
            arm = "" if not cap or not asked else "free" if asked == cap else "fixed"
            if expect is not None:  # a sampled chain: judged by its expected acceptance
                fit.add(k, expect[0], seconds, c.draft_s - draft_s, rejected=expect[1],
                        arm=arm)
            else:
                fit.add(k, n, seconds, c.draft_s - draft_s, arm=arm)
        self._seen = (c.chained, c.accepted, c.draft_s,
                      {s: dd for s, (dd, _) in c.by_source.items()}, c.verify_s)

    def _expected_off(self) -> str | None:
        """A reason to switch off when the expected speedup of the best K is below the
        policy's floor, once enough rounds are measured since drafting last came on."""
        if self.policy.mode != "auto":
            return None
        if sum(f.rounds for f in self.fits.values()) < self.policy.decide_after:
            return None
        got = self.expected()
        if got is None:
            return self._bound_off()
        if got[0] >= self.policy.min_speedup:
            if self.reprobing:  # a re-probe that pays: the next loss backs off briefly again
                self.reprobing = False
                self.backoff = self.policy.backoff_tokens
            return None
        return f"expected speedup {got[0]:.2f}x < {self.policy.min_speedup:g} ({got[1]})"

    def _bound_off(self) -> str | None:
        """Before a plain step is measured: a reason to switch off when recent rounds are
        slower than plain even if a plain step cost as much as their verify passes (it costs
        at most that: a verify pass feeds the pending token and the drafts, a plain step the
        pending token alone). A draft whose rounds spend most of their time drafting tokens
        that are then rejected is caught here without a plain probe."""
        tokens, seconds = self.recent
        verify, rounds = self.recent_verify
        if self._plain_s() > 0 or seconds <= 0 or rounds <= 0 or verify <= 0:
            return None
        bound = tokens / seconds * verify / rounds
        if bound >= self.policy.min_speedup:
            return None
        return (f"at most {bound:.2f}x plain < {self.policy.min_speedup:g} (recent rounds, with a "
                f"plain step costing a verify pass)")

    def _check_speed(self) -> str | None:
        """Decide on/off from measured speeds; returns a reason when switching off."""
        if self.policy.mode != "auto" or self.plain_tps.n == 0 or self.spec_tps.n == 0:
            return None
        tokens, seconds = self.recent
        spec = tokens / seconds if seconds > 0 else self.spec_tps.value
        ratio = spec / self.plain_tps.value
        if ratio < 1.0:
            self.check_every = self.policy.probe_rounds
            return f"measured speedup {ratio:.2f}x < 1"
        self.backoff = self.policy.backoff_tokens
        self.check_every = min(self.check_every * 2, self.policy.check_every_max)
        return None

    # ---- decoding -----------------------------------------------------------------------

    def decode(self, session, pending: int, params: SamplingParams,
               constraint: TokenConstraint | None, cancel: CancelToken | None = None) -> Iterator:
        """Yield `Batch`es or events until the session stops us or `cancel`
        is set (checked before every round, so a cancel never splits a round)."""
        self.call = _CallStats()
        self._seen = (0, 0, 0.0, {}, 0.0)
        cancel = cancel or CancelToken()
        if self.policy.mode == "auto" and not self.enabled:
            # A new call is new text (a tool result, another file): re-probe now rather than
            # decode it plain for what is left of the last call's back-off.
            self._reprobe()
        # auto: no plain tokens up front. Until plain speed is measured (on a lookup miss, or
        # by the plain probe of the first measured check after `probe_rounds` rounds), rounds
        # are judged against the most a plain step can cost, their own verify pass.
        self.probe_plain = 0
        catch_up = getattr(self.drafter, "catch_up", None)
        if catch_up is not None and self.enabled:  # a new prompt: the draft model reads it, cancellably
            t_prep = time.perf_counter()
            catch_up(session.tokens, cancel)
            self.call.draft_s += time.perf_counter() - t_prep
        draft: Draft | None = None  # proposed at the end of a run of plain tokens
        while not cancel.cancelled:
            if self.probe_plain or not self.enabled:
                draft = None
                pending = yield from self._plain_phase(session, pending, params, constraint,
                                                       cancel)
                continue
            t0 = self.clock()
            if draft is None:
                draft = self._propose(session, session.tokens, params, constraint)
            if not draft.tokens and self._miss_runs_plain(params, constraint):
                # No draft: plain tokens on the pipelined path until the drafter has one.
                found: list[Draft] = []
                made = 0
                for tok in self._plain_until_draft(session, pending, params, cancel, found):
                    made += 1
                    yield Batch.target(tok)
                    pending = tok
                self.plain_tps.add(made / max(self.clock() - t0, 1e-9))
                self.plain_fresh = True
                draft = found[0] if found else None
                continue
            emitted, n, source = self._verify(session, pending, draft, params, constraint)
            draft = None
            yield Batch(tuple(emitted), (source,) * n + ("target",) * (len(emitted) - n))
            # Every cost of a round counts: the drafter's catch-up, drafting, verifying, and
            # the consumer's handling of its tokens (plain tokens are timed the same way).
            self._note_round(len(emitted), self.clock() - t0)
            pending = emitted[-1]
            self.rounds_since_check += 1
            reason = self._expected_off()
            if reason:
                self.rounds_since_check = 0
                yield from self._switch_off(reason)
            elif self.policy.mode == "auto" and self.rounds_since_check >= self.check_every:
                self.rounds_since_check = 0
                if self.plain_fresh:  # plain speed was measured on misses since the last check
                    self.plain_fresh = False
                    reason = self._check_speed()
                    if reason:
                        yield from self._switch_off(reason)
                elif self._far_ahead():  # a fresh plain speed could not turn it off
                    self.check_every = min(self.check_every * 2, self.policy.check_every_max)
                else:
                    self.probe_plain = self.policy.plain_probe

    def _far_ahead(self) -> bool:
        """Do recent rounds run at least `probe_skip_ratio` times the plain speed measured
        last? A plain probe costs its tokens at plain speed, the most where speculation wins
        the most, and its figure could only switch drafting off if plain had since sped up by
        that factor, so the probe is skipped."""
        tokens, seconds = self.recent
        if self.plain_tps.n == 0 or seconds <= 0 or self.plain_tps.value <= 0:
            return False
        return tokens / seconds >= self.policy.probe_skip_ratio * self.plain_tps.value

    def _plain_phase(self, session, pending: int, params: SamplingParams,
                     constraint: TokenConstraint | None, cancel: CancelToken):
        """Plain tokens for a speed probe or while speculation is off; returns the pending
        token. Timed like a round: from its start until the consumer asks for more."""
        t0, made = self.clock(), 0
        for tok in self._plain(session, pending, params, constraint,
                               self.probe_plain or self.plain_left, cancel):
            made += 1
            yield Batch.target(tok)
            pending = tok
        if made:
            self.plain_tps.add(made / max(self.clock() - t0, 1e-9))
        if self.probe_plain:
            self.probe_plain = 0
            reason = self._check_speed()
            if reason:
                yield from self._switch_off(reason)
        elif made:
            self.plain_left -= made
            if self.plain_left <= 0:
                self._reprobe()
                yield SpeculationChanged(True, self.k_for("model"), "re-probing")
        return pending

    def _reprobe(self) -> None:
        """Drafting on again after a back-off; fresh rounds decide (the text may have
        changed), the old ones still set the first K."""
        self.enabled = True
        self.off_reason = ""
        self.plain_left = 0
        self.rounds_since_check = 0
        self.reprobing = True
        for fit in self.fits.values():
            fit.forget()

    def _miss_runs_plain(self, params: SamplingParams, constraint: TokenConstraint | None) -> bool:
        """After a miss, decode plain tokens until a draft appears? For lookup only (a
        proposal costs no model call) and where plain decoding is pipelined."""
        return self.drafter.name == "lookup" and constraint is None and not params.penalized

    def _plain_until_draft(self, session, pending: int, params: SamplingParams,
                           cancel: CancelToken, found: list) -> Iterator[int]:
        """Plain tokens after a miss until the drafter proposes again (the draft goes into
        `found`; the last token yielded is then the pending one, outside the target's cache)
        or `cancel` is set. The drafter is asked about each token as soon as it is read; when
        it has nothing, the next step is queued before the token is yielded, so the consumer's
        work overlaps the model's, as in `step.plain_decode`."""
        model, cache = session.target.model, session.tcache.cache
        at = len(session.tokens)  # the next token's position
        nxt = sample(forward(model, [pending], cache), params, at)
        mx.async_eval(nxt)
        try:
            while True:
                tok = int(nxt.item())
                at += 1
                draft = self._propose(session, [*session.tokens, tok], params, None)
                if draft.tokens or cancel.cancelled:
                    found.append(draft)
                    yield tok
                    return
                nxt = sample(forward(model, [tok], cache), params, at)
                mx.async_eval(nxt)
                yield tok
        finally:  # closed after a queued step: the pending token leaves the cache
            session.tcache.rewind_to(len(session.tokens) - 1)

    @staticmethod
    def _plain(session, pending: int, params: SamplingParams,
               constraint: TokenConstraint | None, n: int, cancel: CancelToken) -> Iterator[int]:
        """Up to `n` plain tokens on the same pipelined path as `--speculation off`
        (`step.plain_decode`), bounded so that no step is queued after the n-th token: a
        probe of n tokens costs n steps, and its speed is plain decoding's (with a step
        queued after the last token, 4 tokens took 5 steps and measured 0.8x plain). A run
        stopped early (a cancel, the session's stop) may have fed the last token it yielded;
        the target's cache is trimmed back so that the pending token stays out of it, as the
        speculative rounds expect."""
        gen = plain_decode(session.target.model, session.tcache.cache, pending, params, constraint,
                           session.tokens, limit=max(n, 1))
        try:
            for tok in gen:  # the bound ends the run after its n-th token (at least one)
                yield tok
                if cancel.cancelled:
                    break
        finally:
            gen.close()
            session.tcache.rewind_to(len(session.tokens) - 1)

    def _switch_off(self, reason: str) -> Iterator:
        self.enabled = False
        self.off_reason = reason
        self.plain_left = self.backoff
        self.backoff = min(self.backoff * 2, 1024)
        yield SpeculationChanged(False, 0, reason)

    def _propose(self, session, history, params: SamplingParams,
                 constraint: TokenConstraint | None) -> Draft:
        """The next round's draft for `history` (whose last token is the pending one)."""
        t_prep = time.perf_counter()
        self._arm = ("", "")
        prepare = getattr(self.drafter, "prepare", None)
        if prepare is not None:  # the draft model catches up with tokens it has not seen
            prepare(history)
        forced = constraint.forced() if constraint is not None else []
        if forced:  # tokens the grammar determines are free, always-accepted drafts
            draft = Draft(forced[: self.policy.lookup_k_max], None, "forced")
        else:
            if hasattr(self.drafter, "lookup_k"):  # Combined: lookup gets its own K
                self.drafter.lookup_k = self.k_for("lookup")
            k = self.k_for("lookup" if self.drafter.name == "lookup" else "model")
            self._asked = k
            shape = self._tree_shape(session, k)
            if shape is not None:
                draft = self.drafter.propose_tree(history, k, params, constraint, shape)
            else:
                draft = self.drafter.propose(history, k, params, constraint)
        self.call.draft_s += time.perf_counter() - t_prep
        return draft

    def _tree_shape(self, session, k: int) -> TreeShape | None:
        """The tree this round may draft; None (a chain of k) unless trees are on, the
        drafter can branch, the measured verify cost leaves room for more than k nodes and
        (with `measured` trees) tree rounds have recently been the faster (`TreeArms`)."""
        if self.tree is None or not hasattr(self.drafter, "propose_tree"):
            return None
        probed = self.tree.probed
        shape = self.tree.shape(session.target.model, session.tcache.cache, k)
        if shape is None or not self.tree.measured:
            return shape
        kind = "lookup" if self.drafter.name == "lookup" else self._last_kind
        arm = self.tree_arms.setdefault(kind, TreeArms()).pick()
        # The round that probed the verify cost carries the probe's time: counted for no arm.
        self._arm = (kind, arm) if probed else ("", "")
        return shape if arm == "tree" else None

    def _verify(self, session, pending: int, draft: Draft, params,
                constraint) -> tuple[list[int], int, TokenSource]:
        """Verify `draft` (a chain, or its tree) in one pass; returns (emitted tokens,
        accepted drafts, where the drafts came from: "draft" for a draft model, "lookup", or
        "forced" for grammar-determined tokens)."""
        t1 = time.perf_counter()
        model, cache = session.target.model, session.tcache.cache
        path: list[int] = []
        if draft.tree is not None:
            assert draft.tree.tokens[0] == pending, "a tree's root is the pending token"
            emitted, path = verify_tree(model, cache, draft.tree, params, constraint,
                                        session.tokens)
            n, drafted = len(path) - 1, draft.tree.nodes
        else:
            expect: dict = {}
            emitted, n = verify_round(model, cache, pending, draft, params, constraint,
                                      session.tokens, expect=expect)
            drafted = len(draft.tokens)
            if expect and draft.source != "forced" and draft.tokens:
                self._expect = (expect["accepted"], expect["rejected"])
        seconds = time.perf_counter() - t1
        if self.tree is not None:  # the cost of a pass of this many positions, measured
            self.tree.cost.observe(drafted + 1, seconds)
        keep = getattr(self.drafter, "keep_path", None)
        if path and keep is not None:  # the draft cache keeps the accepted path only
            keep(path)
        if constraint is not None:
            constraint.consume(emitted)
        c = self.call
        c.verify_s += time.perf_counter() - t1
        if draft.source == "forced":  # grammar-determined: not a measure of the drafter
            c.forced += n
        elif draft.tokens:  # a miss verified alone is just a plain step, not a round
            c.rounds += 1
            c.drafted += drafted
            c.chained += len(draft.tokens)
            c.accepted += n
            c.k = len(draft.tokens)
            kind = "lookup" if draft.source in ("lookup", "suffix") else "model"
            self.accepted_per_round.setdefault(kind, _Ema()).add(n)
            tally = c.by_source.setdefault(draft.source, [0, 0])
            tally[0] += drafted
            tally[1] += n
        return emitted, n, draft.source

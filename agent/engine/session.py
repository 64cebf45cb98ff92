"""A conversation with the engine: token history, the KV caches of target and draft, prefix reuse.

`Session.generate(prompt_tokens, ...)` streams events for one model turn. The session keeps
every token it has seen; a later call whose prompt shares a prefix with that history re-reads
only the new tokens. The session alone trims or resets its caches, and it restores their
consistency in `finally` (a closed generator or Ctrl-C leaves no half-fed cache behind).
Decoding is plain here; speculative decoding plugs in through `Session.speculator`.
With a `PrefixStore` (prefix_store.py) the session starts a turn from the store's longest
prefix when that beats its own cache (target and draft model alike), and at the end of a
turn hands the store its consistent caches and, once, the system prompt's prefix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import mlx.core as mx

from ..cancel import CancelToken
from ..events import DecodeProgress, Event, GenerationStats, PrefillProgress, TextDelta
from .cache import ModelCache
from .drafters import DraftModel
from .errors import SpecAgentError
from .loading import LoadedModel
from .sampling import SamplingParams
from .step import Batch, TokenConstraint, chunk_at, common_prefix, plain_decode, prefill

if TYPE_CHECKING:
    from .prefix_store import PrefixStore
    from .speculative import Speculator


class ContextOverflowError(SpecAgentError):
    exit_code = 1


def render_chat(tokenizer, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    """Chat messages → prompt tokens through the tokenizer's chat template."""
    out = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                        tokenize=True)
    if not isinstance(out, list):  # transformers 5 returns a BatchEncoding
        out = out["input_ids"]
    return list(out)


def _find_stop(before: str, seg: str, stops: Sequence[str]) -> int | None:
    """Index in `seg` just past the first stop string completed by `seg`, or None."""
    best = None
    for s in stops:
        start = max(0, len(before) - len(s) + 1)
        i = (before[start:] + seg).find(s)
        if i >= 0:
            end = i + len(s) - (len(before) - start)
            best = end if best is None else min(best, end)
    return best


@dataclass(frozen=True)
class Completion:
    """One whole model turn (`Session.complete`)."""

    tokens: list[int]
    text: str
    stats: GenerationStats
    events: list[Event]


PROGRESS_EVERY_S = 0.2  # DecodeProgress at most this often (5 Hz)
TPS_WINDOW_S = 2.0  # DecodeProgress.tps is measured over about this long


@dataclass
class _Tally:
    """Mutable per-call figures, frozen into `GenerationStats` at the end."""

    start: float = field(default_factory=time.perf_counter)
    first: float = 0.0
    generated: int = 0
    last_progress: float = 0.0
    window: list[tuple[float, int]] = field(default_factory=list)  # (time, generated) samples

    def window_tps(self, now: float) -> float:
        """Tokens/s over the last `TPS_WINDOW_S` (older samples dropped, one kept as base)."""
        self.window.append((now, self.generated))
        while len(self.window) > 2 and now - self.window[1][0] >= TPS_WINDOW_S:
            self.window.pop(0)
        (t0, n0), (t1, n1) = self.window[0], self.window[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0


class Session:
    """Per-conversation engine state. Not thread-safe: one generation at a time."""

    def __init__(self, target: LoadedModel, prefill_chunk: int = 0, speculator: Speculator | None = None,
                 store: PrefixStore | None = None, kv_bits: int = 0):
        self.target = target
        self.tokenizer = target.tokenizer
        # the largest prefill chunk (see chunk_at): larger ones are faster per token, smaller
        # ones let a cancel act sooner
        self.prefill_chunk = prefill_chunk or 512
        self.tokens: list[int] = []  # full history: prompts and generated tokens
        self.tcache = ModelCache(target, kv_bits)
        self.speculator = speculator  # the speculative layer (speculative.py); None: plain
        self.store = store  # a PrefixStore shared with other sessions and processes, or None
        self._pinned: set[tuple[int, ...]] = set()  # system prefixes handed to the store
        self.context_limit = int(getattr(target.model.args, "max_position_embeddings", 0) or 0)

    # ---- chat helpers -------------------------------------------------------------------

    def render(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        return render_chat(self.tokenizer, messages, tools)

    # ---- generation ---------------------------------------------------------------------

    def _reuse_prefix(self, prompt: Sequence[int]) -> int:
        """Rewind caches to the longest reusable prefix, or take a longer one from the store;
        returns how many prompt tokens the target cache has."""
        keep = min(common_prefix(self.tokens, prompt), len(prompt) - 1, self.tcache.offset)
        self.tcache.rewind_to(keep)
        keep = self.tcache.offset  # 0 when the cache could not trim
        if self.store is not None:
            cache, n = self.store.fetch_nearest(self._key(self.tcache), prompt[:-1], keep)
            if cache is not None and self.tcache.adopt(cache, n):
                keep = n
        if self.speculator is not None:
            self.speculator.rewind_to(keep)  # the drafter re-syncs with the new history itself
            self._draft_from_store(prompt)
        self.tokens = list(prompt)
        return keep

    # ---- prefix store -------------------------------------------------------------------

    def _key(self, mc: ModelCache) -> str:
        return self.store.key_for(mc.lm, mc.kv_bits)

    def _draft_model(self) -> DraftModel | None:
        drafter = getattr(self.speculator, "drafter", None)
        drafter = getattr(drafter, "model", drafter)  # Combined keeps its DraftModel in .model
        return drafter if isinstance(drafter, DraftModel) else None

    def _draft_from_store(self, prompt: Sequence[int]) -> None:
        """Give the draft model the store's prefix when it beats the draft's own cache."""
        dm = self._draft_model()
        if dm is None or self.store is None:
            return
        have = min(common_prefix(dm.fed, prompt[:-1]), dm.cache.offset)
        cache, n = self.store.fetch_nearest(self._key(dm.cache), prompt[:-1], have)
        if cache is not None:
            dm.adopt(cache, prompt[:n])

    def _system_end(self, prompt: Sequence[int]) -> int:
        """Length of the first message (the system prompt in chat templates): up to and
        including the first end-of-message token; 0 when there is none before the last one."""
        eos = self.target.eos_ids
        end = next((i + 1 for i, t in enumerate(prompt[:-1]) if t in eos), 0)
        return end if end >= 8 else 0

    def _remember(self, prompt: Sequence[int]) -> None:
        """Hand the store every cache whose tokens are known (after `_reconcile`): the target's
        history prefix, the system prompt's prefix once, the draft model's fed tokens."""
        if self.store is None:
            return
        n = self.tcache.offset
        if self.tcache.consistent() and 0 < n <= len(self.tokens):
            key = self._key(self.tcache)
            sys_n = self._system_end(prompt)
            if 0 < sys_n <= n and tuple(prompt[:sys_n]) not in self._pinned:
                self._pinned.add(tuple(prompt[:sys_n]))
                self.store.insert(key, prompt[:sys_n], self.tcache.cache, kind="system")
            self.store.insert(key, self.tokens[:n], self.tcache.cache)
        dm = self._draft_model()
        if dm is not None and dm.cache.consistent() and len(dm.fed) == dm.cache.offset:
            m = common_prefix(dm.fed, self.tokens)  # drafts the target rejected are not history
            if m:
                self.store.insert(self._key(dm.cache), self.tokens[:m], dm.cache.cache)

    def _reconcile(self) -> None:
        """Make every cache a prefix of `self.tokens` again (after a stop or an interrupt)."""
        self.tcache.rewind_to(len(self.tokens))
        if self.speculator is not None:
            self.speculator.rewind_to(min(len(self.tokens), self.tcache.offset))

    def set_speculator(self, speculator: Speculator | None) -> None:
        """Decode with `speculator` (None: plain) from the next call on; it starts in step
        with this session's history."""
        self.speculator = speculator
        if speculator is not None:
            speculator.rewind_to(0)  # its drafter re-syncs with the history itself

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams = SamplingParams(),
        max_tokens: int = 512,
        constraint: TokenConstraint | None = None,
        stop_tokens: set[int] | None = None,
        stop_strings: Sequence[str] = (),
        cancel: CancelToken | None = None,
        watch: Callable[[int], str | None] | None = None,
    ) -> Iterator[Event]:
        """Stream one model turn for `prompt`. Stops at EOS (`stop_tokens` replaces the EOS
        set when given), after `max_tokens`, once the text contains a `stop_strings` entry
        (the text is cut right after it; finish_reason "stop_string"), or when `cancel` is
        set (checked between prefill chunks (`chunk_at`) and between decoding
        rounds; "cancelled": a prefill cut short keeps the chunks fed in the session's cache,
        a prefix of the prompt, but hands the prefix store nothing).
        `watch` sees every generated token in order; when it returns a reason, the turn ends
        right after that token with that finish_reason, wherever the token fell in a batch of
        accepted drafts (so the output never depends on how rounds were cut).
        Yields `DecodeProgress` at most every `PROGRESS_EVERY_S` while decoding."""
        if not prompt:
            raise ValueError("empty prompt")
        if self.context_limit and len(prompt) >= self.context_limit:
            raise ContextOverflowError(
                f"prompt of {len(prompt)} tokens exceeds the model's context of {self.context_limit}"
            )
        if self.context_limit:
            max_tokens = min(max_tokens, self.context_limit - len(prompt))
        stop = set(self.target.eos_ids) if stop_tokens is None else set(stop_tokens)
        if not params.greedy and params.noise_seed < 0:
            # The call's keyed draws (see `sampling`), seeded from mx.random: a seeded run
            # writes the same text with and without prompt lookup speculation, and each call
            # (a fresh sample of the same message too) draws anew.
            hi, lo = mx.random.randint(0, 1 << 31, shape=(2,)).tolist()
            params = replace(params, noise_seed=(hi << 31) | lo)
        tally = _Tally()
        mx.reset_peak_memory()
        cancel = cancel or CancelToken()
        finish, cached, prefilled = "cancelled", 0, False
        try:
            cached = self._reuse_prefix(prompt)
            yield from self._prefill(prompt[cached:-1], cancel)
            if cancel.cancelled:
                yield self._stats(prompt, cached, tally, "cancelled")
                return
            prefilled = True
            finish = yield from self._stream(prompt[-1], params, constraint, stop, stop_strings,
                                             cancel, watch, tally, max_tokens)
        finally:
            self._reconcile()
            if prefilled:  # (a prompt's part, cut by a cancel, is not worth a store entry)
                self._remember(prompt)
        yield self._stats(prompt, cached, tally, finish)

    def _stream(self, pending: int, params: SamplingParams, constraint, stop: set[int],
                stop_strings: Sequence[str], cancel: CancelToken, watch, tally: _Tally,
                max_tokens: int) -> Iterator[Event]:
        """The decoding half of `generate`: batches → text deltas, until a stop; returns the
        finish reason."""
        detok = self.tokenizer.detokenizer
        detok.reset()
        text_so_far = ""
        finish = "length"
        for item in self._decode(pending, params, constraint, cancel):
            if isinstance(item, Event):  # e.g. SpeculationChanged
                yield item
                continue
            toks, sources = item.tokens, item.sources
            if not tally.first:
                tally.first = time.perf_counter()
            n, seg, finish = self._take(detok, toks, stop, stop_strings, text_so_far,
                                        tally, max_tokens, finish, watch)
            if n < len(toks) and self.speculator is not None:
                self.speculator.drop_emitted(sources[n:])  # accepted past a stop
            if n:
                text_so_far += seg
                out, srcs = tuple(toks[:n]), sources[:n]
                if out[-1] in stop:  # the stop token itself is history, not text
                    out, srcs = out[:-1], srcs[:-1]
                if out:
                    yield TextDelta(seg, out, tuple(s != "target" for s in srcs), tuple(srcs))
            if finish not in ("length", "cancelled") or tally.generated >= max_tokens:
                break
            progress = self._progress(tally)
            if progress is not None:
                yield progress
            if cancel.cancelled:
                finish = "cancelled"
                break
        if finish == "length" and cancel.cancelled and tally.generated < max_tokens:
            finish = "cancelled"  # cancelled before any batch (the draft model reading the prompt)
        detok.finalize()
        if detok.last_segment and finish != "stop_string":
            yield TextDelta(detok.last_segment, (), (), ())
        return finish

    def complete(self, prompt: Sequence[int], **kw: Any) -> Completion:
        """`generate` collected: the turn's tokens, text, final figures and every event (the
        same keywords as `generate`)."""
        tokens: list[int] = []
        text, stats, events = "", None, []
        for ev in self.generate(prompt, **kw):
            events.append(ev)
            if isinstance(ev, TextDelta):
                tokens += ev.tokens
                text += ev.text
            elif isinstance(ev, GenerationStats):
                stats = ev
        return Completion(tokens, text, stats, events)

    def _take(self, detok, toks, stop, stop_strings, before: str, tally: _Tally,
              max_tokens: int, finish: str, watch=None) -> tuple[int, str, str]:
        """Take a batch's tokens one by one, as plain decoding would have produced them, and
        stop at the first that ends the turn (a stop token, the token completing a stop string,
        `max_tokens`). Returns (tokens taken, their text, finish reason); the tokens after a
        stop (accepted drafts) never enter the history or the counts."""
        text, n = "", 0
        for t in toks:
            self.tokens.append(t)
            tally.generated += 1
            n += 1
            if t in stop:
                return n, text, "stop"
            detok.add_token(t)
            piece = detok.last_segment
            cut = _find_stop(before + text, piece, stop_strings)
            if cut is not None:
                return n, text + piece[:cut], "stop_string"
            text += piece
            why = watch(t) if watch is not None else None
            if why:
                return n, text, why
            if tally.generated >= max_tokens:
                break
        return n, text, finish

    def _progress(self, tally: _Tally) -> DecodeProgress | None:
        """A `DecodeProgress` when the last one is `PROGRESS_EVERY_S` old, else None."""
        now = time.perf_counter()
        tps = tally.window_tps(now)
        if now - tally.last_progress < PROGRESS_EVERY_S:
            return None
        tally.last_progress = now
        speculating = self.speculator is not None and self.speculator.policy.mode != "off"
        spec = self.speculator.progress() if speculating else {}
        return DecodeProgress(
            generated=tally.generated, tps=tps, elapsed_s=now - tally.first,
            drafted=spec.get("drafted", 0), accepted=spec.get("accepted", 0),
            rounds=spec.get("rounds", 0), k=spec.get("k", 0),
            speculation=spec.get("speculation", "off"), reason=spec.get("reason", ""),
            context_tokens=len(self.tokens), context_limit=self.context_limit,
        )

    def _prefill(self, todo: Sequence[int], cancel: CancelToken) -> Iterator[PrefillProgress]:
        """Feed the uncached prompt tokens (all but the last) in the chunks `chunk_at` gives
        for their context position (the last one is what is left, no longer than a chunk),
        reporting progress when there is more than one; stops between chunks when cancelled."""
        start = self.tcache.offset
        done, end, chunks = 0, len(todo), 0
        while done < end:
            if cancel.cancelled:
                return
            size = chunk_at(start + done, self.target.device, self.prefill_chunk)
            n = min(size, end - done)
            prefill(self.target.model, todo[done : done + n], self.tcache.cache, chunk=n)
            done, chunks = done + n, chunks + 1
            if done < end or chunks > 1:
                yield PrefillProgress(done, end)

    def _decode(
        self, pending: int, params: SamplingParams, constraint, cancel: CancelToken
    ) -> Iterator[Batch | Event]:
        """`Batch`es (and the speculator's events) until the caller stops or `cancel` is set."""
        if self.speculator is not None and self.speculator.policy.mode != "off":
            yield from self.speculator.decode(self, pending, params, constraint, cancel)
            return
        gen = plain_decode(self.target.model, self.tcache.cache, pending, params, constraint,
                           self.tokens)
        try:
            for tok in gen:
                yield Batch.target(tok)
        finally:
            gen.close()

    def _stats(self, prompt, cached: int, tally: _Tally, finish: str) -> GenerationStats:
        end = time.perf_counter()
        first = tally.first or end
        prefill_s = first - tally.start
        decode_s = end - first
        new_prompt = len(prompt) - cached
        extra = self.speculator.stats() if self.speculator is not None else {}
        return GenerationStats(
            prompt_tokens=len(prompt),
            cached_tokens=cached,
            generated_tokens=tally.generated,
            prefill_s=prefill_s,
            prefill_tps=new_prompt / prefill_s if prefill_s > 0 else 0.0,
            decode_s=decode_s,
            decode_tps=(tally.generated - 1) / decode_s if decode_s > 0 and tally.generated > 1 else 0.0,
            ttft_s=prefill_s,
            peak_memory_gb=mx.get_peak_memory() / 1e9,
            finish_reason=finish,
            context_tokens=len(self.tokens),
            context_limit=self.context_limit,
            **extra,
        )

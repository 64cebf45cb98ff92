"""One streamed chat completion → the agent's events: text deltas, tool calls as `<tool_call>`
text, and the turn's `GenerationStats` from what the server reported and what the stream
showed.

Figures: decode tok/s is measured on the stream (completion tokens after the first, over the
time from the first to the last delta); token counts come from the server's `usage` (or, when
it sends none, the number of content deltas); cached prompt tokens from
`usage.prompt_tokens_details.cached_tokens` (or llama-server's `timings.cache_n`); draft
acceptance from llama-server's `timings.draft_n` / `draft_n_accepted`. A figure the server
did not report stays 0 and is marked as not reported; none is made up. Not here: HTTP and
retries (agent/backends/openai.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from ..core.callformat import CLOSE, OPEN
from ..events import DecodeProgress, GenerationStats, TextDelta
from ..safe_input import loads
from .base import ModelError

PROGRESS_EVERY_S = 0.2  # DecodeProgress at most this often, as the local engine

FINISH = {"stop": "stop", "tool_calls": "stop", "function_call": "stop", "length": "length",
          "eos": "stop"}


@dataclass
class _Call:
    name: str = ""
    arguments: str = ""


@dataclass
class StreamState:
    """What one streamed completion has delivered so far."""

    started: float  # when the request was sent (perf_counter)
    first: float = 0.0  # first delta with text or a call
    last: float = 0.0
    deltas: int = 0
    calls: dict[int, _Call] = field(default_factory=dict)
    finish: str = ""
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    last_progress: float = 0.0
    bytes: int = 0  # of `data` payloads so far

    def progress(self) -> DecodeProgress | None:
        """Live figures from the stream (deltas so far, their rate), at most 5 times a second;
        what only the final usage says (context size, drafting) stays unknown here."""
        now = time.perf_counter()
        if not self.first or now - self.last_progress < PROGRESS_EVERY_S:
            return None
        self.last_progress = now
        elapsed = now - self.first
        tps = (self.deltas - 1) / elapsed if self.deltas > 1 and elapsed > 0 else 0.0
        return DecodeProgress(generated=self.deltas, tps=tps, elapsed_s=elapsed, drafted=0,
                              accepted=0, rounds=0, k=0, speculation="?", reason="",
                              context_tokens=0, context_limit=0)

    def feed(self, data: str) -> list[TextDelta]:
        """Take one SSE `data` payload; returns the text to show now. A chunk whose fields
        have the wrong types is a ModelError naming the field."""
        self.bytes += len(data)
        try:
            chunk = loads(data)
        except json.JSONDecodeError as e:
            raise ModelError(f"the server sent a malformed stream chunk ({e.msg}): {data[:80]!r}") from None
        if not isinstance(chunk, dict):
            raise ModelError(f"the server sent a malformed stream chunk: {data[:80]!r}")
        choices = chunk.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise ModelError(f"the server sent a malformed stream chunk ('choices' is not a list of objects): {data[:80]!r}")
        if "error" in chunk:
            err = chunk["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise ModelError(f"the server reported an error mid-stream: {one_line(str(msg))}")
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):
            self.timings = chunk["timings"]
        out: list[TextDelta] = []
        for choice in choices:
            out += self._choice(choice)
        return out

    def _choice(self, choice: dict[str, Any]) -> list[TextDelta]:
        if choice.get("finish_reason"):
            self.finish = str(choice["finish_reason"])
        delta = choice.get("delta") or {}
        calls = delta.get("tool_calls") or [] if isinstance(delta, dict) else None
        if not isinstance(calls, list) or not all(_is_call_delta(tc) for tc in calls):
            raise ModelError("the server sent a malformed stream chunk ('delta' or its 'tool_calls' "
                             f"have the wrong types): {json.dumps(choice)[:80]!r}")
        out = []
        text = delta.get("content")
        if isinstance(text, str) and text:
            self._tick()
            out.append(TextDelta(text, ()))
        for tc in calls:
            self._tick()
            call = self.calls.setdefault(int(tc.get("index", len(self.calls))), _Call())
            fn = tc.get("function") or {}
            call.name += str(fn.get("name") or "")
            args = fn.get("arguments")
            call.arguments += args if isinstance(args, str) else json.dumps(args or {})
        return out

    def over_limit(self, limits: "StreamLimits") -> str:
        """Which client-side limit the stream has passed ('' when none): a server that
        ignores max_tokens would otherwise stream without end."""
        if self.deltas > limits.deltas:
            return f"{self.deltas} deltas (max_tokens is {limits.max_tokens})"
        if self.bytes > limits.bytes:
            return f"{self.bytes} bytes"
        if time.perf_counter() - self.started > limits.seconds:
            return f"{limits.seconds:g} s"
        return ""

    def _tick(self) -> None:
        now = time.perf_counter()
        self.first = self.first or now
        self.last = now
        self.deltas += 1

    def call_texts(self) -> list[str]:
        """The streamed tool calls in the conversation's `<tool_call>` format (arguments that
        are not JSON are kept as a string: validation then tells the model)."""
        out = []
        for _, c in sorted(self.calls.items()):
            try:
                args: Any = loads(c.arguments) if c.arguments.strip() else {}
            except json.JSONDecodeError:
                args = c.arguments
            out.append(OPEN + json.dumps({"name": c.name, "arguments": args}, ensure_ascii=False) + CLOSE)
        return out

    def stats(self, backend: str, cancelled: bool) -> GenerationStats:
        u = {k: _number(v) for k, v in self.usage.items() if k != "prompt_tokens_details"}
        t = {k: _number(v) for k, v in self.timings.items()}
        details = self.usage.get("prompt_tokens_details")
        u["prompt_tokens_details"] = ({k: _number(v) for k, v in details.items()}
                                      if isinstance(details, dict) else {})
        now = time.perf_counter()
        generated = int(u.get("completion_tokens", self.deltas) or 0)
        prompt = int(u.get("prompt_tokens", t.get("prompt_n", 0)) or 0)
        cached = u["prompt_tokens_details"].get("cached_tokens", t.get("cache_n"))
        ttft = (self.first or now) - self.started
        decode_s = max(self.last - self.first, 0.0) if self.first else 0.0
        tps = (generated - 1) / decode_s if generated > 1 and decode_s > 0 else 0.0
        prefill_s = float(t["prompt_ms"]) / 1000 if t.get("prompt_ms") is not None else ttft
        new = prompt - int(cached or 0)
        drafted, accepted = int(t.get("draft_n", 0) or 0), int(t.get("draft_n_accepted", 0) or 0)
        return GenerationStats(
            prompt_tokens=prompt, cached_tokens=int(cached or 0), generated_tokens=generated,
            prefill_s=prefill_s, prefill_tps=new / prefill_s if prompt and prefill_s > 0 else 0.0,
            decode_s=decode_s, decode_tps=tps, ttft_s=ttft, peak_memory_gb=0.0,
            finish_reason="cancelled" if cancelled else FINISH.get(self.finish, self.finish or "stop"),
            context_tokens=prompt + generated, speculative=drafted > 0, drafter="server" if drafted else "",
            drafted=drafted, accepted=accepted, backend=backend, cache_reported=cached is not None,
        )


@dataclass(frozen=True)
class StreamLimits:
    """What one streamed turn may deliver, whatever the server does with max_tokens:
    content or call deltas (each carries at least one token), bytes, seconds."""

    max_tokens: int
    deltas: int
    bytes: int
    seconds: float

    @classmethod
    def for_tokens(cls, max_tokens: int) -> "StreamLimits":
        """max_tokens deltas (and a few the server may add), 1 MiB plus 1 KiB a token, and
        one minute plus a second a token."""
        return cls(max_tokens, max_tokens + 8, (1 << 20) + 1024 * max_tokens, 60.0 + max_tokens)


def _is_call_delta(tc: Any) -> bool:
    """A tool-call delta of the right shape: an object, its index an integer (if any), its
    function an object (if any) whose arguments are text or an object."""
    if not isinstance(tc, dict):
        return False
    index, fn = tc.get("index", 0), tc.get("function") or {}
    return (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 1024
            and isinstance(fn, dict) and isinstance(fn.get("arguments") or "", (str, dict)))


def _number(value: Any) -> Any:
    """`value` when it is a number (a figure the server reported), else None (mistyped:
    treated as not reported)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."

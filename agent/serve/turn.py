"""One request's generation on the engine's session: text, tool calls, constrained JSON.

`decode(session, plan, cancel)` yields `Text` pieces, `Call`s and one `Done`, from one or two
`Session.generate` calls on the same growing prompt (as agent/backends/local.py does):
- text: free decoding (under the JSON grammar for a `response_format`);
- tools, `tool_choice` auto: free decoding until the model writes `<tool_call>` (a stop
  string), then the calls under `calls_grammar` until its end-of-text token;
- tools, `required` or one named tool: the reply opens with `<tool_call>` and is calls only.
Text that could be the start of a stop string is held back until it is known not to be one
(`StopHold`), so a stop string never reaches the client. Runs on the model's worker thread;
a cancel stops it between rounds.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ..backends.local import merge_stats
from ..cancel import CancelToken
from ..core.callformat import CLOSE, OPEN, call_bodies, decode_call_json
from ..events import GenerationStats, TextDelta


@dataclass(frozen=True)
class Plan:
    """What one request decodes, prepared off the model's thread."""

    prompt: list[int]
    params: Any  # agent.engine.SamplingParams
    max_tokens: int
    stops: tuple[str, ...] = ()
    mode: str = "text"  # text | auto (text or calls) | calls (calls only)
    constraint: Any = None  # GrammarConstraint: the JSON grammar (text) or the calls' (auto, calls)


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Call:
    index: int
    id: str
    name: str
    arguments: str  # JSON text


@dataclass(frozen=True)
class Done:
    finish: str  # the engine's finish reason ("stop", "stop_string", "length", "cancelled")
    stats: GenerationStats
    calls: int


class StopHold:
    """Passes text on except a tail that could begin one of `stops` (or is one: the session
    cuts the text right after a stop string); at a stop string, the text up to it."""

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self.text = ""  # everything seen
        self.sent = 0  # characters passed on

    def feed(self, piece: str) -> str:
        self.text += piece
        keep = 0
        for s in self.stops:
            for n in range(min(len(s), len(self.text)), 0, -1):  # (a whole stop ends the text)
                if s.startswith(self.text[-n:]):
                    keep = max(keep, n)
                    break
        return self._upto(len(self.text) - keep)

    def finish(self, stopped: bool) -> tuple[str, str]:
        """(the rest to pass on, the stop string the text ends with or "")."""
        hit = next((s for s in self.stops if stopped and self.text.endswith(s)), "")
        return self._upto(len(self.text) - len(hit)), hit

    def _upto(self, end: int) -> str:
        out = self.text[self.sent:max(end, self.sent)]
        self.sent = max(end, self.sent)
        return out


def _text_phase(session, prompt: list[int], plan: Plan, stops: Sequence[str], cancel: CancelToken,
                constraint: Any, out: list) -> Iterator[Text]:
    """Free (or JSON-constrained) text; appends (stats, the stop string hit) to `out`."""
    hold = StopHold(stops)
    stats = None
    for ev in session.generate(prompt, params=plan.params, max_tokens=plan.max_tokens,
                               constraint=constraint, stop_strings=list(stops), cancel=cancel):
        if isinstance(ev, TextDelta):
            piece = hold.feed(ev.text)
            if piece:
                yield Text(piece)
        elif isinstance(ev, GenerationStats):
            stats = ev
    rest, hit = hold.finish(stats.finish_reason == "stop_string")
    if rest:
        yield Text(rest)
    out.append((stats, hit, hold.text))


def _calls_phase(session, prompt: list[int], plan: Plan, budget: int, cancel: CancelToken,
                 out: list) -> Iterator[Call | Text]:
    """The calls after `<tool_call>` (in the prompt), each yielded once it is closed; a call
    that max_tokens cuts is yielded as its text (finish_reason "length")."""
    text, sent, stats = "", 0, None
    for ev in session.generate(prompt, params=plan.params, max_tokens=budget,
                               constraint=plan.constraint, cancel=cancel):
        if isinstance(ev, TextDelta):
            text += ev.text
            bodies = call_bodies(OPEN + text)[: (OPEN + text).count(CLOSE)]
            for body in bodies[sent:]:
                obj = decode_call_json(body)
                args = json.dumps(obj.get("arguments", {}), ensure_ascii=False, separators=(",", ":"))
                yield Call(sent, f"call_{uuid.uuid4().hex[:24]}", str(obj.get("name", "")), args)
                sent += 1
        elif isinstance(ev, GenerationStats):
            stats = ev
    whole = OPEN + text
    cut = whole[whole.rfind(CLOSE) + len(CLOSE):] if CLOSE in whole else whole
    if stats is not None and stats.finish_reason == "length" and cut.strip():
        yield Text(cut.strip())  # a call cut by max_tokens: shown as text, never dropped
    out.append((stats, sent))


def decode(session, plan: Plan, cancel: CancelToken) -> Iterator[Text | Call | Done]:
    """The request's reply: text pieces, calls, then `Done`."""
    encode = session.tokenizer.encode
    open_ids = list(encode(OPEN, add_special_tokens=False))
    if plan.mode == "calls":
        found: list = []
        yield from _calls_phase(session, plan.prompt + open_ids, plan, plan.max_tokens, cancel, found)
        stats, calls = found[0]
        yield Done(stats.finish_reason, stats, calls)
        return
    first: list = []
    stops = (*plan.stops, OPEN) if plan.mode == "auto" else plan.stops
    constraint = plan.constraint if plan.mode == "text" else None
    yield from _text_phase(session, plan.prompt, plan, stops, cancel, constraint, first)
    stats, hit, text = first[0]
    if hit != OPEN or cancel.cancelled:
        yield Done(stats.finish_reason, stats, 0)
        return
    budget = plan.max_tokens - stats.generated_tokens
    if budget < 1:
        yield Done("length", stats, 0)
        return
    prompt2 = plan.prompt + list(encode(text, add_special_tokens=False))
    found = []
    yield from _calls_phase(session, prompt2, plan, budget, cancel, found)
    second, calls = found[0]
    both = merge_stats(stats, second)
    yield Done(second.finish_reason, both, calls)

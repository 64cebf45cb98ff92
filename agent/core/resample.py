"""Sampling a reply again when greedy decoding gets stuck (`resample_temperature`, off by
default).

Small models at temperature 0 get stuck in two ways the conversation can see: a reply that
loops (the repetition guard stopped it) and a reply that repeats an earlier reply of the same
conversation word for word (after a failed test run, greedy decoding tends to write the same
code again, which changes nothing; the code blocks alone count, since a larger model writes the
same code under different words). Either reply is dropped and sampled again at
`resample_temperature`, at most MAX_RESAMPLES times per model turn. The sample is asked for
with the call (`Sampling`), seeded from the conversation's length and the attempt, so a rerun
of the same conversation draws the same samples; only a backend that declares per-call
sampling (`Capabilities.sampling`) is resampled; speculation stays exact at any temperature.

Gain: none recorded. On 30 tune Exercism exercises the same 6 pass as at greedy, at 2.3x the
output tokens; with the 1.5B + draft on the first 6 check20 exercises 0 pass, as at greedy,
at 2.5x (bc2a112, lab/results/exercism-1.5b-draft-check20-resample-bc2a112.jsonl; README,
resample_temperature). So it stays off by default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from ..events import Event, GenerationStats, TurnStats, Warning
from .backend import Sampling
from .runstate import Run
from .wholefile import fences

if TYPE_CHECKING:
    from .conversation import Conversation

MAX_RESAMPLES = 2


def _norm(text: str) -> str:
    return " ".join(text.split())


def reason(reply: str, finish_reason: str, history: list[dict[str, str]]) -> str:
    """Why `reply` should be sampled again ('' when it should not)."""
    if finish_reason == "repetition":
        return "the reply kept repeating itself"
    said = _norm(reply)
    earlier = [m["content"] for m in history if m["role"] == "assistant"]
    if said and any(_norm(m) == said for m in earlier):
        return "the reply repeats an earlier one word for word"
    code = {f.body.strip("\n") for f in fences(reply) if f.body.strip()}
    if code and code <= {f.body.strip("\n") for m in earlier for f in fences(m)}:
        return "the reply's code repeats an earlier reply's"
    return ""


def resample_stuck(conv: Conversation, run: Run, messages: list[dict[str, str]], reply: str,
                   stats: GenerationStats | None, led: str) -> Iterator[Event]:
    """(reply, stats): `reply` or, where it loops or repeats an earlier one, a reply drawn
    again at `resample_temperature` (at most MAX_RESAMPLES times; a led reply is led
    again). The dropped replies' figures still count."""
    temp = conv.cfg.resample_temperature
    for attempt in range(1, MAX_RESAMPLES + 1):
        why = reason(reply, stats.finish_reason if stats is not None else "", conv.messages)
        if (not why or temp <= 0 or run.cancel.cancelled
                or not conv.model.capabilities.sampling):
            break
        yield Warning(f"{why}; sampling it again at temperature {temp:g}")
        if stats is not None:
            run.usage.turns.append(stats)
            conv.usage.turns.append(stats)
            yield TurnStats(run.turn, stats)
        run.marks.lead = led
        seed = len(conv.messages) * 100 + attempt
        reply, stats = yield from conv.sample(messages, run, Sampling(temp, seed))
    return reply, stats

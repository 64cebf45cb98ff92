"""Sampling a reply again when greedy decoding gets stuck.

Small models at temperature 0 get stuck in two ways the conversation can see: a reply that
loops (the repetition guard stopped it) and a reply that repeats an earlier reply of the same
conversation word for word (after a failed test run, greedy decoding tends to write the same
code again, which changes nothing; the code blocks alone count, since a larger model writes the
same code under different words). Either reply is dropped and sampled again at
`resample_temperature`, at most MAX_RESAMPLES times per model turn. The sampler is seeded from
the conversation's length and the attempt, so a rerun of the same conversation draws the same
samples. Only a backend with sampling parameters (`params`) can be resampled; speculation
stays exact at any temperature.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Iterator

from .wholefile import fences

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


def can_resample(model: Any) -> bool:
    return getattr(model, "params", None) is not None and hasattr(model.params, "temperature")


@contextmanager
def at_temperature(model: Any, temperature: float, seed: int) -> Iterator[None]:
    """`model` samples at `temperature` (seeded with `seed` where it can be) inside the block."""
    saved = model.params
    model.params = replace(saved, temperature=temperature)
    reseed = getattr(model, "reseed", None)
    if reseed is not None:
        reseed(seed)
    try:
        yield
    finally:
        model.params = saved

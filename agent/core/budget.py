"""The context budget: keep a conversation's prompt inside the model's window.

When the prompt plus the room kept for the reply passes `HIGH` of the window, old material is
elided in one step down to `LOW`: first tool outputs, oldest first, then the bodies of long
older messages. The stable start (the system prompt and the first user message) is never
touched, and the last `KEEP_LAST` messages only when they alone overflow: their older tool
outputs first, the newest one last (its result then says it was too large). Elisions are remembered by message index and applied
to every later request, so once compacted the prompt is append-only again and a prefix cache
keeps everything before the first elided message. The history itself (what is saved and
resumed) stays whole; only what the model reads is shortened.

Not here: counting tokens (the backend does, with its own tokenizer) and summarising.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from .callformat import RESULT_OPEN

HIGH = 0.85  # compact when prompt + reply room passes this share of the window
LOW = 0.60  # ... down to this share, so compaction (which re-reads the tail) stays rare
KEEP_LAST = 4  # the latest messages stay whole (the current exchange and its results)
LONG = 600  # messages shorter than this (characters) are not worth eliding
HEAD = 200  # characters of an elided message that stay, so the model knows what it was

_RESULT = re.compile(r'(<tool_result name="[^"\n]*" status="\w+">\n)(.*?)(\n</tool_result>)', re.DOTALL)


def _elide_results(content: str) -> str:
    def one(m: re.Match) -> str:
        lines = m.group(2).count("\n") + 1
        note = (f"[output elided to fit the context window: {lines} lines, "
                f"{len(m.group(2))} characters; ask again for the part you need, e.g. a line range]")
        return m.group(1) + note + m.group(3)

    return _RESULT.sub(one, content)


def _elide_text(content: str) -> str:
    return (content[:HEAD] + f"\n[... {len(content) - HEAD} more characters elided to fit the "
            "context window]")


def elided(message: dict[str, str]) -> dict[str, str]:
    """The shortened form of one message."""
    text = message["content"]
    short = _elide_results(text) if text.startswith(RESULT_OPEN) else _elide_text(text)
    return {**message, "content": short}


@dataclass
class Compaction:
    messages: int  # messages shortened in this step
    tokens_before: int
    tokens_after: int
    limit: int


@dataclass
class Budget:
    """A conversation's elisions so far (message index -> shortened message)."""

    done: dict[int, dict[str, str]] = field(default_factory=dict)

    def view(self, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        return [self.done.get(i, m) for i, m in enumerate(messages)]

    def fit(self, messages: list[dict[str, str]], count: Callable[[list[dict[str, str]]], int],
            limit: int, reserve: int) -> tuple[list[dict[str, str]], Compaction | None]:
        """The messages to send; compacts first when they would not leave `reserve` tokens
        of the `limit`-token window (see the module docstring). A window of 0 means unknown."""
        view = self.view(messages)
        if limit <= 0:
            return view, None
        before = count(view)
        if before + reserve <= HIGH * limit:
            return view, None
        start = _stable_end(messages)
        tail = max(start, len(messages) - KEEP_LAST)
        is_result = [m["content"].startswith(RESULT_OPEN) for m in messages]
        older = range(start, tail)
        stages = [  # (message indices, compact while above this many tokens)
            ([i for i in older if is_result[i]], LOW * limit - reserve),
            ([i for i in older if not is_result[i] and len(messages[i]["content"]) > LONG],
             LOW * limit - reserve),
            # the tail alone is too big: its older outputs, then the newest one
            ([i for i in range(tail, len(messages) - 1) if is_result[i]], HIGH * limit - reserve),
            ([len(messages) - 1] if is_result[-1] else [], limit - reserve),
        ]
        n, now = 0, before
        for indices, above in stages:
            for i in indices:
                if now <= above:
                    break
                short = elided(messages[i])
                if i in self.done or len(short["content"]) >= len(messages[i]["content"]):
                    continue
                self.done[i] = short
                n += 1
                view = self.view(messages)
                now = count(view)
        if not n:
            return view, None
        return view, Compaction(n, before, now, limit)


def _stable_end(messages: list[dict[str, str]]) -> int:
    """Index after the stable start: the system prompt and the first user message."""
    for i, m in enumerate(messages):
        if m["role"] == "user" and not m["content"].startswith(RESULT_OPEN):
            return i + 1
    return len(messages)

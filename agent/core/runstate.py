"""The state of one user message's run (`Conversation.send`): what the turn loop keeps
(`Run`), what the last reply's code blocks came to (`Reply`, written by core/edits.py), and
the once-a-message marks of the recovery rules (`Marks`, core/recovery.py); and `Usage`, the
figures summed over model turns. Plain data: nothing here acts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..cancel import CancelToken
from ..events import GenerationStats
from .attempts import Attempts, Score
from .outcome import Work


@dataclass
class Usage:
    """Figures summed over model turns: one message's, or a whole conversation's."""

    started: float = field(default_factory=time.perf_counter)
    turns: list[GenerationStats] = field(default_factory=list)
    tool_calls: int = 0

    def as_dict(self) -> dict[str, Any]:
        t = self.turns
        out = sum(s.generated_tokens for s in t)
        decode_s = sum(s.decode_s for s in t)
        prompt = sum(s.prompt_tokens for s in t)
        cached = sum(s.cached_tokens for s in t)
        drafted, accepted = sum(s.drafted for s in t), sum(s.accepted for s in t)
        new = prompt - cached
        prefill_s = sum(s.prefill_s for s in t)
        return {
            "input_tokens": prompt, "cached_input_tokens": cached, "output_tokens": out,
            "cache_hit_rate": cached / prompt if prompt else 0.0,
            "decode_tps": out / decode_s if decode_s > 0 else 0.0,
            "prefill_tps": new / prefill_s if prefill_s > 0 else 0.0,
            "drafted_tokens": drafted, "accepted_tokens": accepted,
            "acceptance_rate": accepted / drafted if drafted else 0.0,
            "tool_calls": self.tool_calls, "model_turns": len(t),
            "duration_s": time.perf_counter() - self.started,
        }


@dataclass
class Reply:
    """What the code blocks of the replies came to (core/edits.py). `refused` and `snippets`
    are the last reply's only; `unchanged` and `same` gather until a rule reads them."""

    refused: list[str] = field(default_factory=list)  # why blocks were not applied
    snippets: list[str] = field(default_factory=list)  # files a reply wrote only a part of
    unchanged: list[str] = field(default_factory=list)  # files written out again, unchanged
    same: list[str] = field(default_factory=list)  # files written out as they are
    bare: bool = False  # the last reply was code blocks and nothing else


@dataclass
class Marks:
    """What the recovery rules (core/recovery.py) have done in this message, and asked of
    the next reply."""

    repeated: bool = False  # the last reply still repeats an earlier one (core/resample.py)
    nudged: bool = False  # ... and the model was told so (or that its file changed nothing)
    rewrote_free: bool = False  # a failed test run of an unchanged rewrite went uncounted
    fresh: bool = False  # the next reply answers the message afresh (fix_mode "resample")
    lead: str = ""  # text the next reply begins with (a refused snippet's file path and fence)
    # the files the message before left as they still are (no one changed them since)
    as_left: list[str] = field(default_factory=list)
    # the files as the last reply read them, where that was not as they are (a restart_view)
    shown: dict[str, str] = field(default_factory=dict)


@dataclass
class Run:
    """State of one `send`: its usage, the task text (for commit messages), the turn."""

    task: str
    cancel: CancelToken
    usage: Usage = field(default_factory=Usage)
    turn: int = 0
    last_text: str = ""
    task_text: str = ""  # the message with context a UserPromptSubmit hook added
    stop_hook_turns: int = 0  # times a Stop hook kept the model going
    edited: list[str] = field(default_factory=list)  # files changed since the last check
    fix_rounds: int = 0  # failed checks fed back to the model
    changed_any: bool = False  # an edit of this message applied
    written_tests: list[str] = field(default_factory=list)  # test files the replies wrote (the test command)
    base: int = 0  # the history's length once the message was added (its replies come after)
    touched: list[str] = field(default_factory=list)  # every file this message changed or checked
    written: list[str] = field(default_factory=list)  # every file this message changed
    attempts: Attempts = field(default_factory=Attempts)  # its test runs (core/attempts.py)
    # each file this message's edits changed, as it was before the first of them (None: it did
    # not exist, or was not text that could be read back)
    start_files: dict[str, str | None] = field(default_factory=dict)
    start_score: tuple[str, Score] | None = None  # (test command, score) of the tests run before its first reply
    test_cmd: str = ""  # the tests run after its edits: test_cmd, or the message's own (core/testcmd.py)
    tests_fail: bool = False  # its own tests are known to fail (shown, or run before its first reply)
    request: int = -1  # the index of the message `send` added before this one (-1: none)
    work: Work = field(default_factory=Work)  # failed edits, check results: the outcome (core/outcome.py)
    reply: Reply = field(default_factory=Reply)
    marks: Marks = field(default_factory=Marks)

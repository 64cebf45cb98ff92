"""Every event the engine and the conversation emit, as frozen dataclasses.

The engine computes figures; UIs (the `-p` renderers, the TUI status bar) only show them.
This module imports nothing heavy so that any UI can import it cheaply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# Where a decoded token came from: the target model itself, a draft model's token the target
# accepted, an accepted prompt-lookup token, one from the suffix index of earlier replies, or
# a token the tool-call grammar determined.
TokenSource = Literal["target", "draft", "lookup", "suffix", "forced"]


@dataclass(frozen=True)
class Event:
    """Base class: `to_dict()` gives a JSON-ready dict with a `type` field."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["type"] = _snake(type(self).__name__)
        return d


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


# ---- engine events ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefillProgress(Event):
    """Prompt processing progress: `done` of `total` new (uncached) prompt tokens."""

    done: int
    total: int


SOURCES = ("target", "draft", "lookup", "forced")  # where a token came from


@dataclass(frozen=True)
class TextDelta(Event):
    """Newly decoded text with the tokens behind it. `sources[i]` says where token i came
    from: "target" (the target model's own token), "draft" (a draft model's token the target
    accepted), "lookup" (an accepted prompt-lookup token) or "forced" (determined by the
    tool-call grammar). `from_draft[i]` is True for every source but "target"."""

    text: str
    tokens: tuple[int, ...]
    from_draft: tuple[bool, ...] = ()
    sources: tuple[TokenSource, ...] = ()


class _Acceptance:
    """Acceptance figures derived from `drafted`, `accepted` and `rounds`."""

    drafted: int
    accepted: int
    rounds: int

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        return self.accepted / self.rounds if self.rounds else 0.0


@dataclass(frozen=True)
class DecodeProgress(_Acceptance, Event):
    """Live figures during one generation, emitted several times a second (for meters)."""

    generated: int  # tokens so far in this generation
    tps: float  # decode tokens/s over the last few seconds
    elapsed_s: float  # since the first decoded token
    drafted: int  # drafted tokens so far (grammar-forced ones not counted)
    accepted: int
    rounds: int
    k: int  # draft length of the last round (0: not drafting)
    speculation: str  # "on", "auto-off" (switched off because it did not pay), "off" (plain)
    reason: str  # why speculation is off, when it is
    context_tokens: int
    context_limit: int


@dataclass(frozen=True)
class GenerationStats(_Acceptance, Event):
    """Figures for one generation call (one model turn)."""

    prompt_tokens: int
    cached_tokens: int  # prompt tokens whose KV came from the session's cache
    generated_tokens: int
    prefill_s: float
    prefill_tps: float
    decode_s: float
    decode_tps: float
    ttft_s: float
    peak_memory_gb: float
    finish_reason: str  # "stop" (EOS / stop token), "stop_string", "length", "cancelled",
    # or the reason a `watch` hook gave (e.g. "repetition")
    context_tokens: int = 0  # tokens in the session's context after this call
    context_limit: int = 0
    speculative: bool = False
    drafter: str = ""
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    forced_tokens: int = 0  # tokens the grammar determined, verified as free drafts
    k: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    by_source: tuple[tuple[str, int, int], ...] = ()  # (drafter source, drafted, accepted) per source
    backend: str = ""  # "" = the in-process engine; else the server ("openai host · model")
    cache_reported: bool = True  # False: a server that did not say how much of the prompt it cached

    @property
    def cache_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def reread_tokens(self) -> int:
        """Prompt tokens this turn had to prefill (not found in any cache)."""
        return self.prompt_tokens - self.cached_tokens

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d.update(
            acceptance_rate=self.acceptance_rate,
            mean_accepted=self.mean_accepted,
            cache_hit_rate=self.cache_hit_rate,
            reread_tokens=self.reread_tokens,
        )
        return d


@dataclass(frozen=True)
class SpeculationChanged(Event):
    """Adaptive speculation changed K or switched drafting on/off, and why."""

    enabled: bool
    k: int
    reason: str


@dataclass(frozen=True)
class Warning(Event):  # noqa: A001 - the event's natural name
    message: str


@dataclass(frozen=True)
class ContextCompacted(Warning):
    """The conversation neared the model's window: `elided` older tool outputs or messages
    are shortened in what the model reads (the saved history keeps them whole)."""

    elided: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    limit: int = 0


@dataclass(frozen=True)
class ContextAttached(Warning):
    """What the agent added to a user message beyond its text, (what, characters) each: files
    it names or that define names it mentions, the file listing, the repository map; and
    the files left out over `budget` tokens. Shown by every UI as a Warning is."""

    added: tuple[tuple[str, int], ...] = ()
    left_out: tuple[tuple[str, int], ...] = ()
    budget: int = 0


@dataclass(frozen=True)
class HookActed(Warning):
    """One of the user's hooks blocked, approved, added context, failed or timed out
    (`message` says which); shown by every UI as a Warning is."""

    event: str = ""  # PreToolUse | PostToolUse | UserPromptSubmit | Stop
    decision: str = ""  # "" | block | allow | ask


# ---- agent events ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnStarted(Event):
    turn: int


@dataclass(frozen=True)
class AssistantMessage(Event):
    """The model's full text for one turn (tool-call markup removed)."""

    text: str
    turn: int


@dataclass(frozen=True)
class ToolCallStarted(Event):
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolCallFinished(Event):
    call_id: str
    name: str
    ok: bool
    output: str


@dataclass(frozen=True)
class ApprovalRequest:
    """What an interactive approver is asked: exactly what will happen if it says yes."""

    call_id: str
    name: str  # the tool
    arguments: dict[str, Any]
    reason: str  # why the policy asks
    kind: str  # "edit" | "shell"
    preview: str  # the unified diff an edit would make, or the command and its directory
    scope: str  # what answering "always" approves for the rest of the conversation
    can_always: bool = True  # False for destructive commands: they are asked every time


@dataclass(frozen=True)
class ApprovalRequired(Event):
    """A tool call needs the user's approval and none could be asked (non-interactive)."""

    call_id: str
    name: str
    reason: str


@dataclass(frozen=True)
class TurnStats(Event):
    turn: int
    stats: GenerationStats

    def to_dict(self) -> dict[str, Any]:
        return {"type": "turn_stats", "turn": self.turn, **self.stats.to_dict()} | {
            "type": "turn_stats"
        }


@dataclass(frozen=True)
class AgentResult(Event):
    """The final event of one user message's run (`stop_reason` as in `RunStopped`)."""

    is_error: bool
    result: str
    num_turns: int
    usage: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    stop_reason: str = ""




@dataclass(frozen=True)
class CheckRun(Event):
    """A check of the agent's edits ran (agent/core/checks.py): `kind` is syntax, ruff, names,
    stubs, lint or test; `round` counts the fix rounds of this message (1 = the check after
    the first edit; 0 = the tests a message says fail, run before its first reply and shown
    with it); `fed_back`: the failure went back to the model (False once the rounds are
    spent, and for round 0)."""

    kind: str
    command: str
    ok: bool
    output: str
    round: int
    fed_back: bool = False


@dataclass(frozen=True)
class GitAction(Event):
    """The agent did something in git: `protect` (saved the user's dirty file), `commit`."""

    action: str
    message: str
    sha: str = ""
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunStopped(Event):
    """Why a run ended: `answered`, `max_turns`, `max_tokens` (the reply was cut at the token
    limit), `approval_required`, `error`, `cancelled`, `repetition` (the model looped on one span
    of text and the turn was stopped), `blocked` (a UserPromptSubmit hook refused the message),
    and, for a message the model answered without the work done (core/outcome.py),
    `checks_failed`, `edit_failed`, `no_change`. agent/exit_codes.py maps each to an exit code."""

    reason: str
    turn: int

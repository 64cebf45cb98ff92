"""Text for the plain REPL (agent/ui/repl.py): the meter line, events as printed lines, and
approval prompts. Pure formatting over agent/events.py: nothing here draws, reads keys or
talks to the engine, so it is tested with plain strings.

- `Meter` keeps the latest figures the engine reported (decode tok/s, acceptance, K,
  speculation state, context, cache hits) plus the workspace (model, approval mode, git) and
  writes them as one status line.
- `Transcript` turns one message's events into streamed text: assistant text with tool-call
  markup removed (`CallFilter`), one line per tool call and result, diffs for edits, and why
  a run stopped (`stop_line`, agent/ui/render.py).
Every text made here is escaped for the terminal (`shown`, agent/core/shown.py); the REPL
escapes what it writes once more (escaping twice changes nothing).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..core.callformat import CLOSE, OPEN, RESULT_OPEN, strip_calls
from ..core.preview import describe_scope
from ..core.shown import shown
from ..events import (AgentResult, ApprovalRequest, CheckRun, DecodeProgress, Event, GenerationStats,
                      GitAction, PrefillProgress, SpeculationChanged, TextDelta, ToolCallFinished,
                      ToolCallStarted, TurnStarted, TurnStats, Warning)
from .render import format_stats, stop_line

EDIT_TOOLS = ("edit_file", "write_file")
MAX_DIFF_LINES = 60


def _short(text: str, n: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


# ---- the meter ---------------------------------------------------------------------------------


@dataclass
class Meter:
    """The latest figures from the engine's events, and the workspace, as one status line."""

    model: str = ""
    draft: str = ""
    mode: str = ""
    branch: str = ""
    dirty: int = 0
    phase: str = ""  # "" (at the prompt), "prefill", "decoding", "running <tool>", ...
    since: float = 0.0  # when the current message started
    tps: float = 0.0
    drafted: int = 0
    acceptance: float = 0.0
    mean_accepted: float = 0.0
    k: int = 0
    speculation: str = ""  # the engine's state: "on" | "auto-off" | "off"
    setting: str = ""  # the configured mode, shown until the engine reports
    context: int = 0
    window: int = 0
    cached: int = 0  # of the last prefill
    prompt: int = 0
    prefill: tuple[int, int] = (0, 0)
    generated: int = 0
    cancelling: bool = False  # Ctrl+C was pressed; the engine stops at its next check

    def update(self, ev: Any) -> None:
        if isinstance(ev, DecodeProgress):
            self.phase, self.generated, self.tps, self.k = "decoding", ev.generated, ev.tps, ev.k
            self.speculation, self.context, self.window = ev.speculation, ev.context_tokens, ev.context_limit
            if ev.drafted:
                self.drafted, self.acceptance = ev.drafted, ev.acceptance_rate
                self.mean_accepted = ev.mean_accepted
        elif isinstance(ev, (TurnStats, GenerationStats)):
            self._stats(ev.stats if isinstance(ev, TurnStats) else ev)
        elif isinstance(ev, PrefillProgress):
            self.phase, self.prefill = "prefill", (ev.done, ev.total)
        elif isinstance(ev, TextDelta) and self.phase != "decoding":
            self.phase = "decoding"
        elif isinstance(ev, SpeculationChanged):
            self.speculation, self.k = ("on" if ev.enabled else "auto-off"), ev.k
        elif isinstance(ev, TurnStarted):
            self.phase, self.prefill, self.generated = "prefill", (0, 0), 0
        elif isinstance(ev, ToolCallStarted):
            self.phase = f"running {ev.name}"
        elif isinstance(ev, AgentResult):
            self.phase = ""

    def _stats(self, s: GenerationStats) -> None:
        self.tps, self.k = s.decode_tps, s.k
        self.context, self.window = s.context_tokens or self.context, s.context_limit or self.window
        self.cached, self.prompt = s.cached_tokens, s.prompt_tokens if s.cache_reported else 0
        if s.drafted:
            self.drafted, self.acceptance, self.mean_accepted = s.drafted, s.acceptance_rate, s.mean_accepted
        if not self.speculation:
            self.speculation = "on" if s.speculative else "off"

    def status(self, now: float | None = None) -> str:
        """What is happening now ("" at the prompt)."""
        if not self.phase:
            return ""
        if self.cancelling:
            return "cancelling…"
        secs = f" {(now or time.monotonic()) - self.since:.1f}s" if self.since else ""
        if self.phase == "prefill":
            done, total = self.prefill
            return f"prefill {done}/{total}{secs}" if total else f"reading prompt{secs}"
        if self.phase == "decoding":
            return f"decoding {self.generated} tok{secs}"
        return self.phase + secs

    def text(self, now: float | None = None) -> str:
        parts = [p for p in (self.status(now),) if p]
        parts.append(f"{self.tps:.1f} tok/s" if self.tps else "- tok/s")
        if self.drafted:
            parts.append(f"accept {self.acceptance:.0%} {self.mean_accepted:.2f}/round")
        spec = self.speculation or self.setting or "?"
        parts.append(f"K={self.k} spec {spec}" if self.k and spec == "on" else f"spec {spec}")
        if self.context or self.window:
            parts.append(f"ctx {self.context}/{self.window or '?'}")
        if self.prompt:
            parts.append(f"cache {self.cached}/{self.prompt}")
        parts.append(self.mode)
        if self.branch:
            parts.append(self.branch + (f" ({self.dirty} dirty)" if self.dirty else ""))
        parts.append(self.model + (f" + {self.draft}" if self.draft else ""))  # last: cut first
        return shown(" │ ".join(parts), keep_newlines=False)


# ---- events → text -----------------------------------------------------------------------------


class CallFilter:
    """Drops tool-call markup from streamed text (a call is shown as one `→ name` line).
    Holds back a possible half tag at the end of a chunk until the next one decides."""

    def __init__(self) -> None:
        self.inside, self.held = False, ""

    def feed(self, text: str) -> str:
        s, out, self.held = self.held + text, [], ""
        while s:
            tag = CLOSE if self.inside else OPEN
            at = s.find(tag)
            if at >= 0:
                if not self.inside:
                    out.append(s[:at])
                s, self.inside = s[at + len(tag):], not self.inside
                continue
            keep = next((n for n in range(min(len(tag) - 1, len(s)), 0, -1) if tag.startswith(s[-n:])), 0)
            if not self.inside:
                out.append(s[: len(s) - keep])
            self.held = s[len(s) - keep:]
            break
        return "".join(out)

    def flush(self) -> str:
        """End of a turn: release held text; forget an unclosed call."""
        text = "" if self.inside else self.held
        self.inside, self.held = False, ""
        return text


class Transcript:
    """Turns one message's events into the text the REPL prints (streamed as they come)."""

    def __init__(self) -> None:
        self.calls = CallFilter()
        self.at_line_start = True
        self.last_stats: GenerationStats | None = None
        self.result: AgentResult | None = None

    def _emit(self, text: str) -> str:
        if text:
            self.at_line_start = text.endswith("\n")
        return shown(text)

    def line(self, text: str) -> str:
        """`text` on a line of its own."""
        return self._emit(("" if self.at_line_start else "\n") + text.rstrip("\n") + "\n")

    def render(self, ev: Event) -> str:
        if isinstance(ev, TextDelta):
            return self._emit(self.calls.feed(ev.text))
        if isinstance(ev, TurnStarted):
            return self._emit(self.calls.flush())
        if isinstance(ev, TurnStats):
            self.last_stats = ev.stats
        elif isinstance(ev, ToolCallStarted):
            return self._emit(self.calls.flush()) + self.line(
                f"→ {ev.name} {_short(json.dumps(ev.arguments, ensure_ascii=False), 140)}")
        elif isinstance(ev, ToolCallFinished):
            return self.line(self._result(ev))
        elif isinstance(ev, GitAction):
            return self.line(f"git: {ev.message}")
        elif isinstance(ev, CheckRun):
            from .render import check_line

            return self.line(check_line(ev))
        elif isinstance(ev, Warning):
            from .render import warning_line

            return self.line(warning_line(ev))
        elif isinstance(ev, AgentResult):
            self.result = ev
            said = stop_line(ev.stop_reason, ev.error if ev.is_error else "")
            return self.line(said) if said else ""
        return ""

    @staticmethod
    def _result(ev: ToolCallFinished) -> str:
        if not ev.ok:
            return f"  failed: {_short(ev.output, 200)}"
        if ev.name in EDIT_TOOLS:  # edit_file's output carries its diff
            lines = ev.output.rstrip("\n").splitlines()
            more = len(lines) - MAX_DIFF_LINES
            return "\n".join(lines[:MAX_DIFF_LINES] + ([f"  [... {more} more lines]"] if more > 0 else []))
        return f"  ok: {_short(ev.output, 120)}"

    def summary(self) -> str:
        """One line of figures for the message's last model turn."""
        return self.line(format_stats(self.last_stats)) if self.last_stats is not None else ""


def approval_text(req: ApprovalRequest) -> str:
    """What an approval shows before asking: why, and exactly what would happen."""
    what = "edit a file" if req.kind == "edit" else "run a command"
    return f"{req.name} wants to {what} ({req.reason}):\n{req.preview.rstrip()}\n"


def approval_question(req: ApprovalRequest) -> str:
    always = f" / [a]lways ({describe_scope(req.scope)})" if req.can_always else ""
    return shown(f"Allow {req.name}? [y]es / [n]o{always} ", keep_newlines=False)


def parse_answer(text: str, can_always: bool) -> str | None:
    """"yes" | "no" | "always" for a typed answer, None when it is not one."""
    t = text.strip().lower()
    if t in ("y", "yes"):
        return "yes"
    if t in ("n", "no"):
        return "no"
    if can_always and t in ("a", "always"):
        return "always"
    return None


def history_summary(conv: Any, last: int = 6) -> str:
    """A few lines about a resumed conversation's earlier messages."""
    said = [m for m in conv.messages if m["role"] in ("user", "assistant")
            and not m["content"].startswith(RESULT_OPEN)]
    lines = [f"resumed conversation {conv.id}: {len(said)} earlier messages"]
    if len(said) > last:
        lines.append("  …")
    for m in said[-last:]:
        who = "you  " if m["role"] == "user" else "agent"
        lines.append(f"  {who}: {_short(strip_calls(m['content']) or '(tool call)', 100)}")
    return "\n".join(lines) + "\n"

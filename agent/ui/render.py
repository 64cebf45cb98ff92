"""Events → output for non-interactive runs (`-p`): text, one JSON object, or JSON lines.

- `text`: progress (tool calls, results, git actions, warnings) on stderr, the final answer on
  stdout; with `stats=True` each turn's figures on stderr too.
- `json`: nothing until the end, then one object: the `AgentResult` fields plus `stop_reason`.
- `events`: one JSON object per line for each step (assistant message, tool call, tool
  result, approval stop, git action, warning, context compaction, speculation change, turn
  stats), then the same final object. (`stream-json`, Claude Code's shapes, is ui/stream_json.py.)
Text deltas are not rendered (a TUI streams them). The text format goes to a terminal: every
line passes through `shown` (agent/core/shown.py); the JSON formats are left to json.dumps.
`stop_line` says why a run stopped, for every UI. This module only formats; it runs nothing.
"""

from __future__ import annotations

import json
from typing import IO, Any

from ..core.shown import shown
from ..events import (AgentResult, ApprovalRequired, AssistantMessage, CheckRun, ContextAttached,
                      Event, GenerationStats, GitAction, PrefillProgress, RunStopped,
                      SpeculationChanged, TextDelta,
                      ToolCallFinished, ToolCallStarted, TurnStats, Warning)
from ..exit_codes import TABLE

_STREAMED = (AssistantMessage, ToolCallStarted, ToolCallFinished, ApprovalRequired, GitAction,
             Warning, TurnStats, SpeculationChanged, CheckRun)  # Warning includes ContextCompacted


def format_stats(s: GenerationStats) -> str:
    if s.backend:
        return _server_stats(s)
    line = (f"[{s.generated_tokens} tokens, decode {s.decode_tps:.1f} tok/s, prefill "
            f"{s.prefill_tps:.0f} tok/s, ttft {s.ttft_s:.2f}s, cache {s.cached_tokens}/"
            f"{s.prompt_tokens}, peak {s.peak_memory_gb:.2f} GB")
    if s.speculative:
        line += (f", {s.drafter} K={s.k} acceptance {s.acceptance_rate:.0%} "
                 f"mean accepted {s.mean_accepted:.2f}")
    return line + "]"


def _server_stats(s: GenerationStats) -> str:
    """A server's turn: the backend, and only the figures it reported or the stream showed."""
    parts = [s.backend, f"{s.generated_tokens} tokens", f"decode {s.decode_tps:.1f} tok/s",
             f"ttft {s.ttft_s:.2f}s"]
    if s.cache_reported:
        parts.append(f"cache {s.cached_tokens}/{s.prompt_tokens}")
    if s.drafted:
        parts.append(f"server drafts: {s.accepted}/{s.drafted} accepted")
    return "[" + ", ".join(parts) + "]"


def warning_line(ev: Warning) -> str:
    """One line for a warning (every UI); what was added to a message is `context:`, not a
    warning."""
    return f"{'context' if isinstance(ev, ContextAttached) else 'warning'}: {ev.message}"


def check_line(ev: CheckRun) -> str:
    """One line for a check of the agent's edits (the -p renderer, the REPL)."""
    if ev.ok:
        return f"check {ev.kind}: ok ({_short(ev.command, 80)})"
    then = ("shown to the model with the message" if ev.round == 0 else
            "sent back to the model" if ev.fed_back else "fix rounds spent")
    return f"check {ev.kind}: FAILED ({_short(ev.command, 80)}), {then}: {_short(ev.output, 160)}"


# What each stop means to the user, where the exit-code table's row (agent/exit_codes.py)
# covers several; a reason not named here is said with its row's meaning.
STOP_WHY = {
    "max_turns": "the turn limit was reached before an answer",
    "max_tokens": "the reply was cut at the token limit",
    "repetition": "the model kept repeating itself",
    "approval_required": "a tool call needed an approval no one could give",
    "blocked": "a hook refused the message",
    "checks_failed": "the checks of the edits still fail",
    "edit_failed": "an edit was refused or failed",
    "no_change": "no file changed though the message asks for a change",
}


def stop_line(reason: str, error: str = "") -> str:
    """One line saying why a run stopped ("" when it answered): `error: …` for a failure,
    `(cancelled)`, else `stopped: REASON — why` (the run's own error text when it has one).
    A reason this module does not know is said with its exit-code row's meaning, or alone."""
    error = shown(error, keep_newlines=False)
    if reason in ("answered", ""):
        return f"error: {error}" if error else ""
    if reason == "error":
        return f"error: {error or 'the run failed'}"
    if reason == "cancelled":
        return "(cancelled)"
    why = error if error and error != reason else STOP_WHY.get(reason) or next(
        (row.meaning for row in TABLE if reason in row.stop_reasons), "")
    return f"stopped: {shown(reason, keep_newlines=False)}" + (f" — {why}" if why else "")


def _short(text: str, n: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


class Renderer:
    """Feed every event to `handle`; the final `AgentResult` writes the closing output."""

    def __init__(self, fmt: str, out: IO[str], err: IO[str], stats: bool = False):
        if fmt not in ("text", "json", "events"):
            raise ValueError(f"unknown output format {fmt!r}")
        self.fmt, self.out, self.err, self.stats = fmt, out, err, stats
        self.stop_reason = ""
        self.result: dict[str, Any] | None = None
        self.cache_reported = True  # False once a server turn did not say what it cached

    def handle(self, ev: Event) -> None:
        if isinstance(ev, TurnStats) and not ev.stats.cache_reported:
            self.cache_reported = False
        if isinstance(ev, RunStopped):
            self.stop_reason = ev.reason
        elif isinstance(ev, AgentResult):
            self.result = {**ev.to_dict(), "type": "result", "stop_reason": self.stop_reason}
            self._final(ev)
        elif self.fmt == "events":
            if isinstance(ev, _STREAMED):
                self._line(ev.to_dict())
        elif self.fmt == "text" and not isinstance(ev, (TextDelta, PrefillProgress)):
            self._text(ev)

    def _line(self, obj: dict[str, Any]) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
        self.out.flush()

    @staticmethod
    def _say(stream: IO[str], text: str) -> None:
        """Text for a terminal: escaped (agent/core/shown.py), then flushed."""
        stream.write(shown(text))
        stream.flush()

    def _text(self, ev: Event) -> None:
        msg = ""
        if isinstance(ev, AssistantMessage) and ev.text:
            msg = f"assistant: {_short(ev.text, 400)}"
        elif isinstance(ev, ToolCallStarted):
            msg = f"→ {ev.name} {_short(json.dumps(ev.arguments, ensure_ascii=False), 160)}"
        elif isinstance(ev, ToolCallFinished):
            msg = f"  {'ok' if ev.ok else 'failed'}: {_short(ev.output, 160)}"
        elif isinstance(ev, (ApprovalRequired,)):
            msg = f"approval required for {ev.name}: {_short(ev.reason, 400)}"
        elif isinstance(ev, CheckRun):
            msg = check_line(ev)
        elif isinstance(ev, GitAction):
            msg = f"git: {ev.message}"
        elif isinstance(ev, Warning):
            msg = warning_line(ev)
        elif isinstance(ev, SpeculationChanged) and self.stats:
            msg = (f"speculation {'on, K=' + str(ev.k) if ev.enabled else 'off'}: {ev.reason}")
        elif isinstance(ev, TurnStats) and self.stats:
            msg = f"turn {ev.turn} {format_stats(ev.stats)}"
        if msg:
            self._say(self.err, msg + "\n")

    def _final(self, ev: AgentResult) -> None:
        if self.fmt in ("json", "events"):
            self._line(self.result)
            return
        if ev.result:
            self._say(self.out, ev.result.rstrip() + "\n")
        stopped = stop_line(ev.stop_reason or self.stop_reason, ev.error if ev.is_error else "")
        if stopped:
            self._say(self.err, f"spec-agent: {stopped}\n")
        if self.stats:
            self._say(self.err, self._summary(ev) + "\n")

    def _summary(self, ev: AgentResult) -> str:
        """The run's figures; "n/a" where nothing measured one (a server that does not report
        its cache, a run without drafting)."""
        u = ev.usage
        cache = f"{u.get('cache_hit_rate', 0):.0%}" if self.cache_reported and \
            u.get("input_tokens") else "n/a"
        accept = f"{u.get('acceptance_rate', 0):.0%}" if u.get("drafted_tokens") else "n/a"
        return (f"[{ev.num_turns} turns, {u.get('output_tokens', 0)} tokens out, decode "
                f"{u.get('decode_tps', 0):.1f} tok/s, cache hits {cache}, acceptance {accept}, "
                f"{u.get('tool_calls', 0)} tool calls]")

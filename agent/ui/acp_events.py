"""Conversation events → Agent Client Protocol (ACP) session updates, and ACP prompts → text.

`Translator.feed(event)` turns one message's events (agent/events.py) into the updates an ACP
client understands: streamed text as `agent_message_chunk`s (tool-call markup removed), each
tool call as a `tool_call` and its result as a `tool_call_update` (edits carry the diff,
computed from the file before the call runs, so `feed` must see `ToolCallStarted` before the
conversation goes on), git's work on the tool calls it belongs to, warnings as short message
lines, and the engine's figures as `usage_update`s: context used / size where the protocol
has fields for them, decode tok/s, acceptance and cache hits under `_meta["spec-agent"]` (the
protocol's place for what it has no field for). Nothing here talks to a client or runs the
model.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from acp import (start_tool_call, text_block, tool_content, tool_diff_content,
                 update_agent_message_text, update_agent_thought_text, update_tool_call)
from acp.schema import (AllowedOutcome, DeniedOutcome, PermissionOption, SessionMode,
                        ToolCallLocation, ToolCallUpdate, Usage, UsageUpdate)

from tools.edits import plan

from ..choices import APPROVAL_MODES as MODES
from ..core.shown import shown
from ..events import (AgentResult, ApprovalRequest, AssistantMessage, ContextAttached, DecodeProgress,
                      Event, GitAction, TextDelta, ToolCallFinished, ToolCallStarted, TurnStats,
                      Warning)
from .repl_text import CallFilter

META_KEY = "spec-agent"  # our figures under `_meta`, the protocol's extension point
USAGE_EVERY_S = 0.5  # live figures reach the client at most twice a second
MAX_OUTPUT_CHARS = 20_000  # of one tool result shown in the client (the model sees it all)

TOOL_KINDS = {"read_file": "read", "list_files": "search", "grep": "search", "edit_file": "edit",
              "write_file": "edit", "run_shell": "execute", "git_status": "read",
              "git_diff": "read"}
EDIT_TOOLS = ("edit_file", "write_file")

MODE_TEXT = {
    "suggest": ("Suggest", "ask before every edit and shell command"),
    "auto-edit": ("Auto-edit", "edit files freely, ask before shell commands"),
    "full-auto": ("Full auto", "edit and run sandboxed commands freely; destructive ones still ask"),
}

STOP_REASONS = {"answered": "end_turn", "max_turns": "max_turn_requests", "max_tokens": "max_tokens",
                "cancelled": "cancelled", "approval_required": "end_turn"}


# ---- tool calls ------------------------------------------------------------------------------


def tool_title(name: str, arguments: dict[str, Any]) -> str:
    """One line for the client to show; control characters escaped (agent/core/shown.py)."""
    if name == "run_shell":
        return shown(f"$ {arguments.get('command', '')}", keep_newlines=False)
    target = arguments.get("path") or arguments.get("pattern") or ""
    return shown(f"{name} {target}".strip(), keep_newlines=False)


def edit_texts(root: Path, name: str, arguments: dict[str, Any]) -> tuple[str, str | None, str] | None:
    """(absolute path, old text or None for a new file, new text) that an edit would make
    now, or None when it would fail (the tool's result then says why)."""
    try:
        planned = plan(root, name, arguments)
    except OSError:
        return None
    if planned.problem or planned.full is None or planned.new is None or not planned.path:
        return None
    return str(planned.full), planned.old, planned.new


def _locations(root: Path, arguments: dict[str, Any]) -> list[ToolCallLocation] | None:
    path = arguments.get("path")
    return [ToolCallLocation(path=str(root / path))] if isinstance(path, str) and path else None


def call_content(root: Path, name: str, arguments: dict[str, Any]) -> list[Any]:
    """What a client shows for a call before it runs: the diff of an edit, or the command."""
    if name in EDIT_TOOLS:
        texts = edit_texts(root, name, arguments)
        if texts is not None:
            path, old, new = texts
            return [tool_diff_content(path, shown(new), None if old is None else shown(old))]
    if name == "run_shell":
        return [tool_content(text_block(shown(f"$ {arguments.get('command', '')}\n(in {root})")))]
    return []


# ---- permissions -----------------------------------------------------------------------------


def permission_options(request: ApprovalRequest) -> list[PermissionOption]:
    """Allow once / always (when "always" may cover this call) / reject, as ACP options."""
    from ..core.preview import describe_scope

    options = [PermissionOption(option_id="yes", name="Allow once", kind="allow_once")]
    if request.can_always:
        options.append(PermissionOption(option_id="always", kind="allow_always",
                                        name=f"Always allow {describe_scope(request.scope)}"))
    options.append(PermissionOption(option_id="no", name="Reject", kind="reject_once"))
    return options


def permission_call(request: ApprovalRequest, root: Path) -> ToolCallUpdate:
    """The tool call a permission request is about, with the exact diff or command."""
    kind = TOOL_KINDS.get(request.name, "other")
    return ToolCallUpdate(tool_call_id=request.call_id, title=tool_title(request.name, request.arguments),
                          kind=kind, status="pending", raw_input=request.arguments,
                          content=call_content(root, request.name, request.arguments) or None,
                          locations=_locations(root, request.arguments))


def answer_of(outcome: AllowedOutcome | DeniedOutcome, offered: list[PermissionOption]) -> str:
    """The approver's "yes" | "always" | "no" for a client's answer (cancelled or unknown: no)."""
    if isinstance(outcome, AllowedOutcome) and outcome.option_id in {o.option_id for o in offered}:
        return outcome.option_id
    return "no"


def session_modes() -> list[SessionMode]:
    return [SessionMode(id=m, name=MODE_TEXT[m][0], description=MODE_TEXT[m][1]) for m in MODES]


# ---- prompts ---------------------------------------------------------------------------------


def prompt_text(blocks: list[Any], root: Path) -> str:
    """One user message from a prompt's content blocks: text as is, file links inside the
    workspace as `@path` mentions (the caller attaches them), embedded text resources inline.
    Raises ValueError for content spec-agent cannot read (images, audio, binary resources)."""
    parts: list[str] = []
    for b in blocks:
        kind = getattr(b, "type", "")
        if kind == "text":
            parts.append(b.text)
        elif kind == "resource_link":
            parts.append(_mention(b.uri, root) or f"{b.name} ({b.uri})")
        elif kind == "resource" and hasattr(b.resource, "text"):
            where = _mention(b.resource.uri, root) or b.resource.uri
            parts.append(f'<file path="{where.lstrip("@")}">\n{b.resource.text}\n</file>')
        else:
            raise ValueError(f"spec-agent reads text only; cannot take a {kind or 'binary'} block")
    return "\n".join(p for p in parts if p)


def _mention(uri: str, root: Path) -> str:
    """`@relative/path` for a file:// URI inside `root`, else ''."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return ""
    try:
        rel = Path(unquote(parsed.path)).resolve().relative_to(root.resolve())
    except ValueError:
        return ""
    return f"@{rel.as_posix()}"


# ---- figures ---------------------------------------------------------------------------------


def figures(usage: dict[str, Any]) -> dict[str, Any]:
    """The figures a status line shows, from an `AgentResult.usage` dict."""
    keys = ("decode_tps", "prefill_tps", "acceptance_rate", "cache_hit_rate", "drafted_tokens",
            "accepted_tokens", "cached_input_tokens", "input_tokens", "output_tokens",
            "model_turns", "tool_calls", "duration_s")
    return {k: usage[k] for k in keys if k in usage}


def prompt_usage(usage: dict[str, Any]) -> Usage:
    inp, out = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
    return Usage(input_tokens=inp, output_tokens=out, total_tokens=inp + out,
                 cached_read_tokens=int(usage.get("cached_input_tokens", 0)))


# ---- the translator ----------------------------------------------------------------------------


class Translator:
    """One message's events → ACP session updates (a list per event, often empty)."""

    def __init__(self, root: Path, clock: Any = time.monotonic) -> None:
        self.root, self.clock = root, clock
        self.calls = CallFilter()
        self.diffs: dict[str, list[Any]] = {}  # call id → the diff shown when it started
        self.current = ""  # the call running now (git protects files during it)
        self.notes: dict[str, list[str]] = {}  # call id → git notes made while it ran
        self.edited: dict[str, list[Any]] = {}  # finished edits of this turn → their content
        self.last_usage = -1e9
        self.finish_reason = ""  # of the last model turn ("length": it hit max_tokens)

    def feed(self, ev: Event) -> list[Any]:
        if isinstance(ev, TextDelta):
            return self._text(self.calls.feed(ev.text))
        if isinstance(ev, AssistantMessage):
            return self._text(self.calls.flush())
        if isinstance(ev, ToolCallStarted):
            return [self._started(ev)]
        if isinstance(ev, ToolCallFinished):
            return [self._finished(ev)]
        if isinstance(ev, GitAction):
            return self._git(ev)
        if isinstance(ev, ContextAttached):  # beside the answer, not in it
            return [update_agent_thought_text(f"context: {ev.message}\n")]
        if isinstance(ev, Warning):
            return self._text(f"\n\n_warning: {ev.message}_\n\n")
        if isinstance(ev, DecodeProgress):
            return self._progress(ev)
        if isinstance(ev, TurnStats):
            self.finish_reason = ev.stats.finish_reason
            s = ev.stats
            return self._usage(s.context_tokens, s.context_limit, {
                "decode_tps": s.decode_tps, "prefill_tps": s.prefill_tps,
                "acceptance_rate": s.acceptance_rate, "cache_hit_rate": s.cache_hit_rate,
                "generated_tokens": s.generated_tokens, "speculative": s.speculative,
                "drafter": s.drafter, "k": s.k}, force=True)
        return []

    def stop_reason(self, result: AgentResult) -> str:
        if result.stop_reason == "answered" and self.finish_reason == "length":
            return "max_tokens"
        return STOP_REASONS.get(result.stop_reason, "end_turn")

    @staticmethod
    def _text(text: str) -> list[Any]:
        return [update_agent_message_text(text)] if text else []

    def _started(self, ev: ToolCallStarted) -> Any:
        content = call_content(self.root, ev.name, ev.arguments)
        if ev.name in EDIT_TOOLS:
            self.diffs[ev.call_id] = content
        self.current = ev.call_id
        return start_tool_call(ev.call_id, tool_title(ev.name, ev.arguments),
                               kind=TOOL_KINDS.get(ev.name, "other"), status="pending",
                               content=content or None, raw_input=ev.arguments,
                               locations=_locations(self.root, ev.arguments))

    def _finished(self, ev: ToolCallFinished) -> Any:
        output = ev.output
        if len(output) > MAX_OUTPUT_CHARS:
            output = output[:MAX_OUTPUT_CHARS] + f"\n[... {len(output) - MAX_OUTPUT_CHARS} more characters]"
        notes = [tool_content(text_block(f"git: {n}")) for n in self.notes.pop(ev.call_id, [])]
        content = [*self.diffs.pop(ev.call_id, []), *notes, tool_content(text_block(output))]
        if ev.ok and ev.name in EDIT_TOOLS:
            self.edited[ev.call_id] = content
        return update_tool_call(ev.call_id, status="completed" if ev.ok else "failed",
                                content=content, raw_output={"ok": ev.ok, "output": output})

    def _git(self, ev: GitAction) -> list[Any]:
        """Git's work shown on the tool calls it belongs to: a file saved before a call edits
        it (on that call), the commit of a turn's edits (on each of them)."""
        if ev.action != "commit":
            self.notes.setdefault(self.current, []).append(ev.message)
            return []
        line = tool_content(text_block(f"git: {ev.message}"))
        updates = [update_tool_call(call_id, content=[*content, line])
                   for call_id, content in self.edited.items()]
        self.edited.clear()
        return updates

    def _progress(self, ev: DecodeProgress) -> list[Any]:
        return self._usage(ev.context_tokens, ev.context_limit, {
            "decode_tps": ev.tps, "generated_tokens": ev.generated,
            "acceptance_rate": ev.acceptance_rate, "mean_accepted": ev.mean_accepted,
            "k": ev.k, "speculation": ev.speculation})

    def _usage(self, used: int, size: int, meta: dict[str, Any], force: bool = False) -> list[Any]:
        """A `usage_update` (only when the context size is known: it is a required field)."""
        now = self.clock()
        if size <= 0 or (not force and now - self.last_usage < USAGE_EVERY_S):
            return []
        self.last_usage = now
        return [UsageUpdate(session_update="usage_update", used=max(0, min(used, size)), size=size,
                            field_meta={META_KEY: meta})]

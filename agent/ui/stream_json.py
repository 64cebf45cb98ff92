"""Events → Claude Code's `stream-json` lines (`--output-format stream-json`).

The message shapes are those Claude Code's headless mode prints and its SDKs parse
(claude-agent-sdk's `parse_message`; tests/test_stream_json.py checks them with it):

- `{"type": "system", "subtype": "init", "session_id", "cwd", "tools", "model", ...}` once;
- `{"type": "assistant", "message": {"role": "assistant", "model", "content": [blocks]}, ...}`
  for the model's text (a `text` block) and for each tool call (a `tool_use` block: `id`,
  `name`, `input`), as Claude Code prints one message per content block;
- `{"type": "user", "message": {"role": "user", "content": [{"type": "tool_result",
  "tool_use_id", "content", "is_error"}]}, ...}` for each tool's result;
- `{"type": "system", "subtype": "<event>", ...}` for what Claude Code has no message for
  (warning, git_action, context_compacted, speculation_changed);
- finally per user message `{"type": "result", "subtype", "is_error", "num_turns",
  "duration_ms", "duration_api_ms", "result", "session_id", "usage", "stop_reason", ...}`.

Our own figures (tok/s, acceptance, cache hits, our stop_reason) ride in a `spec_agent` field
that Claude Code's consumers ignore. This module only formats; it runs nothing.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import IO, Any

from ..events import (AgentResult, ApprovalRequired, AssistantMessage, Event,
                      GitAction, RunStopped, SpeculationChanged, ToolCallFinished,
                      ToolCallStarted, TurnStats, Warning)

# Our stop_reason → Claude Code's result subtype (anything else: error_during_execution).
SUBTYPES = {"answered": "success", "max_turns": "error_max_turns"}
# Our stop_reason → the model-level stop_reason Claude Code reports (None where it has none).
MODEL_STOPS = {"answered": "end_turn", "max_tokens": "max_tokens"}


def _uid() -> str:
    return str(uuid.uuid4())


class LineWriter:
    """Whole JSON lines to `out`, one writer at a time (a reader thread answers control
    requests while the main thread renders)."""

    def __init__(self, out: IO[str]):
        self.out, self.lock = out, threading.Lock()

    def __call__(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, ensure_ascii=False, default=str) + "\n"
        with self.lock:
            self.out.write(line)
            self.out.flush()


class StreamJsonRenderer:
    """Feed every event of a session's runs to `handle`; `init` first."""

    def __init__(self, write: LineWriter, session_id: str, model: str):
        self.write, self.session_id, self.model = write, session_id, model
        self.stop_reason = ""
        self.result: dict[str, Any] | None = None
        self._pending: AssistantMessage | None = None  # text waiting for its turn's figures
        self._message_id = ""
        self._denials: list[dict[str, Any]] = []
        self._inputs: dict[str, dict[str, Any]] = {}

    def init(self, cwd: str, tools: list[str], permission_mode: str, version: str) -> None:
        self.write({"type": "system", "subtype": "init", "session_id": self.session_id,
                    "cwd": cwd, "tools": tools, "model": self.model, "mcp_servers": [],
                    "permissionMode": permission_mode, "slash_commands": [],
                    "apiKeySource": "none", "output_style": "default", "uuid": _uid(),
                    "spec_agent": {"version": version}})

    def _envelope(self, kind: str, content: list[dict[str, Any]], **message: Any) -> dict[str, Any]:
        return {"type": kind, "message": {"role": kind, "content": content, **message},
                "parent_tool_use_id": None, "session_id": self.session_id, "uuid": _uid()}

    def _assistant(self, blocks: list[dict[str, Any]], usage: dict[str, Any] | None = None,
                   figures: dict[str, Any] | None = None) -> None:
        obj = self._envelope("assistant", blocks, id=self._message_id, type="message",
                             model=self.model, stop_reason=None, usage=usage or {})
        if figures:
            obj["spec_agent"] = figures
        self.write(obj)

    def _flush(self, stats: TurnStats | None = None) -> None:
        ev, self._pending = self._pending, None
        if ev is None or not ev.text:
            return
        usage = figures = None
        if stats is not None:
            s = stats.stats
            usage = {"input_tokens": s.prompt_tokens - s.cached_tokens,
                     "cache_read_input_tokens": s.cached_tokens,
                     "cache_creation_input_tokens": 0, "output_tokens": s.generated_tokens}
            figures = {k: v for k, v in stats.to_dict().items() if k != "type"}
        self._assistant([{"type": "text", "text": ev.text}], usage, figures)

    def handle(self, ev: Event) -> None:
        if isinstance(ev, AssistantMessage):
            self._flush()
            self._pending, self._message_id = ev, f"msg_{_uid().replace('-', '')[:24]}"
            return
        if isinstance(ev, TurnStats):
            self._flush(ev)
            return
        self._flush()
        if isinstance(ev, ToolCallStarted):
            self._inputs[ev.call_id] = ev.arguments
            self._assistant([{"type": "tool_use", "id": ev.call_id, "name": ev.name,
                              "input": ev.arguments}])
        elif isinstance(ev, ToolCallFinished):
            self._tool_result(ev.call_id, ev.output, not ev.ok)
        elif isinstance(ev, ApprovalRequired):
            self._denials.append({"tool_name": ev.name, "tool_use_id": ev.call_id,
                                  "tool_input": self._inputs.get(ev.call_id, {})})
            self._tool_result(ev.call_id, f"not approved: {ev.reason}", True)
        elif isinstance(ev, (Warning, GitAction, SpeculationChanged)):
            d = ev.to_dict()
            kind = d.pop("type")  # warning, context_compacted, git_action, speculation_changed
            self.write({"type": "system", "subtype": kind, **d, "session_id": self.session_id,
                        "uuid": _uid()})
        elif isinstance(ev, RunStopped):
            self.stop_reason = ev.reason
        elif isinstance(ev, AgentResult):
            self._final(ev)

    def _tool_result(self, call_id: str, output: str, is_error: bool) -> None:
        block = {"type": "tool_result", "tool_use_id": call_id, "content": output,
                 "is_error": is_error}
        self.write(self._envelope("user", [block]))

    def input_error(self, message: str) -> None:
        """The result line for stdin the run could not use (a client waiting for a result
        gets one: is_error, the error in `errors`)."""
        self.write({
            "type": "result", "subtype": "error_during_execution", "is_error": True,
            "duration_ms": 0, "duration_api_ms": 0, "num_turns": 0, "result": "",
            "session_id": self.session_id, "stop_reason": None, "total_cost_usd": 0.0,
            "usage": {"input_tokens": 0, "cache_read_input_tokens": 0,
                      "cache_creation_input_tokens": 0, "output_tokens": 0},
            "permission_denials": [], "uuid": _uid(), "errors": [message],
            "spec_agent": {"stop_reason": "input_error", "error": message}})

    def _final(self, ev: AgentResult) -> None:
        reason = ev.stop_reason or self.stop_reason
        u = ev.usage
        duration_ms = int(round(float(u.get("duration_s", 0.0)) * 1000))
        cached = int(u.get("cached_input_tokens", 0))
        self.result = {
            "type": "result", "subtype": SUBTYPES.get(reason, "error_during_execution"),
            "is_error": ev.is_error, "duration_ms": duration_ms, "duration_api_ms": duration_ms,
            "num_turns": ev.num_turns, "result": ev.result, "session_id": self.session_id,
            "stop_reason": MODEL_STOPS.get(reason), "total_cost_usd": 0.0,
            "usage": {"input_tokens": int(u.get("input_tokens", 0)) - cached,
                      "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0,
                      "output_tokens": int(u.get("output_tokens", 0))},
            "permission_denials": self._denials, "uuid": _uid(),
            "spec_agent": {"stop_reason": reason, "error": ev.error, "usage": u},
        }
        if ev.is_error and ev.error:
            self.result["errors"] = [ev.error]
        self._denials, self._inputs = [], {}
        self.write(self.result)

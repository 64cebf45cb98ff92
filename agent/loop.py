"""The agent loop: task → model → tool calls → results → model … → answer.

`Agent.run(task)` yields events for every step (agent/events.py): the model's text deltas and
full message, each tool call and its result, git actions, per-turn stats, and one final
`AgentResult`. The loop talks to the model through the small `Model` protocol, so tests can
replay canned outputs; agent/llm.py adapts the real engine `Session` (with constrained calls).

Tool-call format (our own; the embedded model has none):
`<tool_call>{"name": "...", "arguments": {...}}</tool_call>`. Tool errors, invalid calls and
denied approvals go back to the model as results. The conversation is append-only, so a
session with prefix caching re-reads only the new messages each turn.
Not here: rendering (agent/render.py), asking the user (the `approver` callback).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from tools import TOOLS, ToolContext, ToolResult, call_tool, validate

from .approvals import decide
from .config import Config
from .events import (AgentResult, ApprovalRequired, AssistantMessage, Event, GenerationStats,
                     GitAction, RunStopped, TextDelta, ToolCallFinished, ToolCallStarted,
                     TurnStarted, TurnStats, Warning)
from .git import GitGuard, GitSafetyError

OPEN, CLOSE = "<tool_call>", "</tool_call>"
MAX_AGENTS_MD = 4000
_CALL = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|\Z)", re.DOTALL)


class ModelError(Exception):
    """The model could not produce a turn (e.g. the context is full); ends the run."""


class Model(Protocol):
    def generate(self, messages: list[dict[str, str]]) -> Iterator[Event]:
        """Stream one assistant turn: `TextDelta`s, then exactly one `GenerationStats`."""
        ...


Approver = Callable[[str, dict, str], bool]  # (tool name, arguments, reason) -> approved?


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: dict[str, Any]
    error: str = ""  # why the call could not be parsed or validated


def _decode_call(body: str) -> ParsedCall:
    body = body.strip()
    start = body.find("{")
    if start < 0:
        return ParsedCall("?", {}, "a tool call must be a JSON object")
    try:
        obj, _ = json.JSONDecoder().raw_decode(body[start:])
    except json.JSONDecodeError as e:
        return ParsedCall("?", {}, f"the tool call is not valid JSON ({e.msg} at char {e.pos})")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ParsedCall("?", {}, 'a tool call needs {"name": ..., "arguments": {...}}')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    problem = validate(obj["name"], args)
    return ParsedCall(obj["name"], args if isinstance(args, dict) else {}, problem)


def parse_calls(text: str) -> list[ParsedCall]:
    """Every `<tool_call>…</tool_call>` in `text` (an unclosed last one counts too)."""
    return [_decode_call(m.group(1)) for m in _CALL.finditer(text)]


def strip_calls(text: str) -> str:
    return _CALL.sub("", text).strip()


def system_prompt(root: Path) -> str:
    """Instructions, the tool list with schemas, and the project's AGENTS.md if any."""
    lines = [
        "You are spec-agent, a coding agent working inside a code repository. Use the tools "
        "to look at files, change them and run commands. Paths are relative to the repository root.",
        "",
        "To call a tool, write exactly one call and then stop:",
        OPEN + '{"name":"read_file","arguments":{"path":"src/main.py"}}' + CLOSE,
        "The result comes back in the next message. To change a file, read it first, then use "
        "edit_file with `old` copied exactly from the file. When the task is done, reply with a "
        "short summary and no tool call.",
        "",
        "Tools:",
    ]
    for tool in TOOLS.values():
        schema = json.dumps(tool.schema["properties"], separators=(",", ":"))
        lines.append(f"- {tool.name}: {tool.description} Arguments: {schema}")
    agents_md = root / "AGENTS.md"
    if agents_md.is_file():
        try:
            text = agents_md.read_text(encoding="utf-8", errors="replace")[:MAX_AGENTS_MD]
            lines += ["", "Project instructions (AGENTS.md):", text.strip()]
        except OSError:
            pass
    return "\n".join(lines)


def format_result(name: str, result: ToolResult) -> str:
    status = "ok" if result.ok else "error"
    return f'<tool_result name="{name}" status="{status}">\n{result.output}\n</tool_result>'


@dataclass
class _Usage:
    """Figures summed over a run's model turns, for the final result's `usage`."""

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


class Agent:
    """One run of the agent in a workspace. Not thread-safe."""

    def __init__(self, model: Model, root: Path, cfg: Config, approver: Approver | None = None):
        self.model, self.cfg, self.approver = model, cfg, approver
        self.root = root.resolve()
        self.git = GitGuard.open(self.root, cfg.dirty_files, cfg.auto_commit)
        self.ctx = ToolContext(self.root, cfg.shell_timeout_s, in_git=self.git.enabled)
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system_prompt(self.root)}]
        self.usage = _Usage()
        self.read_paths: list[str] = []  # files the model has read (constrained edits prefer them)
        self.turn = 0

    def run(self, task: str) -> Iterator[Event]:
        """Run `task` to an answer, `max_turns`, an approval stop or an error."""
        if self.git.warning:
            yield Warning(self.git.warning)
        self.messages.append({"role": "user", "content": task})
        last_text, turn = "", 0
        for turn in range(1, self.cfg.max_turns + 1):
            self.turn = turn
            yield TurnStarted(turn)
            try:
                text = yield from self._model_turn(turn)
            except ModelError as e:
                yield from self._finish("error", turn, last_text, str(e))
                return
            last_text = strip_calls(text)
            calls = parse_calls(text)
            if not calls:
                yield from self._finish("answered", turn, last_text)
                return
            stop = yield from self._run_calls(calls, turn, task)
            if stop:
                yield from self._finish("approval_required", turn, last_text, stop)
                return
        yield from self._finish("max_turns", turn, last_text)

    def _model_turn(self, turn: int) -> Iterator[Event]:
        parts: list[str] = []
        stats = None
        for ev in self.model.generate(self.messages):
            if isinstance(ev, TextDelta):
                parts.append(ev.text)
            if isinstance(ev, GenerationStats):
                stats = ev
            else:
                yield ev
        text = "".join(parts)
        self.messages.append({"role": "assistant", "content": text})
        yield AssistantMessage(strip_calls(text), turn)
        if stats is not None:
            self.usage.turns.append(stats)
            yield TurnStats(turn, stats)
        return text

    def _run_calls(self, calls: list[ParsedCall], turn: int, task: str) -> Iterator[Event]:
        """Run a turn's calls; returns '' or the approval problem that stops the run."""
        results, changed, stop = [], [], ""
        try:
            for k, call in enumerate(calls, 1):
                call_id = f"call_{turn}_{k}"
                yield ToolCallStarted(call_id, call.name, call.arguments)
                self.usage.tool_calls += 1
                result, stop = yield from self._one_call(call_id, call)
                if stop:
                    break
                yield ToolCallFinished(call_id, call.name, result.ok, result.output)
                results.append(format_result(call.name, result))
                changed += result.changed
        finally:
            yield from self._commit(changed, task, turn)
        if not stop:
            self.messages.append({"role": "user", "content": "\n".join(results)})
        return stop

    def _one_call(self, call_id: str, call: ParsedCall) -> Iterator[Event]:
        """(result, stop): run one call through validation, approval and git protection."""
        if call.error:
            return ToolResult.error(call.error), ""
        tool = TOOLS[call.name]
        decision = decide(self.cfg.approval_mode, tool.kind, call.name, call.arguments, self.root)
        if decision.ask:
            if self.approver is None:
                yield ApprovalRequired(call_id, call.name, decision.reason)
                return ToolResult.error("not approved"), _approval_hint(decision.reason)
            if not self.approver(call.name, call.arguments, decision.reason):
                return ToolResult.error("the user did not approve this call; try something else"), ""
        if tool.kind == "edit":
            for arg in tool.paths:
                problem = self._protect(call.arguments.get(arg, ""))
                if problem:
                    return ToolResult.error(problem), ""
                for note in self.git.notes:
                    yield GitAction("protect", note)
                self.git.notes.clear()
        result = call_tool(call.name, call.arguments, self.ctx)
        if call.name == "read_file" and result.ok:
            self.read_paths.append(call.arguments["path"])
        return result, ""

    def _protect(self, path: str) -> str:
        from tools._paths import PathError, confine

        try:
            confine(self.root, path)
        except PathError as e:
            return str(e)
        return self.git.protect(path)

    def _commit(self, changed: list[str], task: str, turn: int) -> Iterator[Event]:
        if not changed:
            return
        try:
            sha = self.git.commit_turn(changed, task, turn)
        except GitSafetyError as e:
            yield Warning(str(e))
            return
        if sha:
            files = tuple(sorted(set(changed)))
            yield GitAction("commit", f"committed the agent's edits as {sha}", sha, files)

    def _finish(self, reason: str, turn: int, text: str, error: str = "") -> Iterator[Event]:
        yield RunStopped(reason, turn)
        is_error = reason in ("error", "approval_required", "interrupted")
        yield AgentResult(is_error, text, turn, self.usage.as_dict(), error)

    def interrupted(self) -> Iterator[Event]:
        """Events closing a run cut short by Ctrl-C (the caller catches KeyboardInterrupt)."""
        yield from self._finish("interrupted", self.turn, "", "interrupted")


def _approval_hint(reason: str) -> str:
    if reason.startswith("destructive"):
        return f"{reason}; destructive commands always need a person's approval, stopping"
    return f"{reason}; stopping (no one to ask: rerun with --yes or --approval-mode full-auto)"

"""The user's hooks: programs run at points of a conversation, speaking Claude Code's protocol.

`HookRunner.run(event, payload, tool)` runs every hook of `event` whose matcher fits `tool`,
one after another, each through the shell in the repository root, with the payload as JSON
on stdin: `session_id`, `cwd`, `hook_event_name`, and per event `tool_name`/`tool_input`
(PreToolUse), `tool_response` too (PostToolUse), `prompt` (UserPromptSubmit),
`stop_hook_active` (Stop). A hook is started contained (tools/procs.py: its own process
group; on Linux under tools/reaper.py), so whatever it starts, in the background or in a
session of its own, ends when the hook ends and when the agent dies. What a hook says:

- exit 2: block; its stderr is the reason (the model reads it for PreToolUse, PostToolUse and
  Stop; the user for UserPromptSubmit, whose message is then not sent);
- exit 0 with JSON on stdout: `{"decision": "block"|"approve", "reason": ...}`, or
  `{"hookSpecificOutput": {"permissionDecision": "allow"|"deny"|"ask",
  "permissionDecisionReason": ..., "additionalContext": ...}}`, `"systemMessage"` (shown to
  the user) and `"continue": false` with `"stopReason"` (block);
- exit 0 with plain stdout: for UserPromptSubmit, context added to the message;
- any other exit, or running past `timeout_s` (the whole process group is killed): a warning,
  and the conversation goes on as if there were no hook.

Hooks come only from the user's config file (agent/extensions.py). Nothing here renders: what a
hook did comes back as a `HookOutcome`, and the conversation turns it into a `HookActed` event.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools import procs

from ..extensions import HookSpec
from ..safe_input import loads

MAX_HOOK_OUTPUT = 4000  # characters of a hook's reason or context kept


@dataclass
class HookOutcome:
    decision: str = ""  # "" | "block" | "allow" | "ask"
    reason: str = ""  # why it blocked or allowed
    context: str = ""  # text to add for the model (UserPromptSubmit, PostToolUse)
    notes: list[str] = field(default_factory=list)  # one line per hook that acted, for the UIs


class HookRunner:
    def __init__(self, hooks: tuple[HookSpec, ...], session_id: str, root: Path):
        self.hooks, self.session_id, self.root = hooks, session_id, root

    def has(self, event: str) -> bool:
        return any(h.event == event for h in self.hooks)

    def run(self, event: str, payload: dict[str, Any], tool: str = "") -> HookOutcome:
        out = HookOutcome()
        body = {"session_id": self.session_id, "transcript_path": "", "cwd": str(self.root),
                "hook_event_name": event, **payload}
        for hook in self.hooks:
            if hook.event != event or (tool and not hook.matches(tool)):
                continue
            self._one(hook, body, out)
        return out

    def _one(self, hook: HookSpec, body: dict[str, Any], out: HookOutcome) -> None:
        label = f"{hook.event} hook `{hook.command[:60]}`"
        env = {**os.environ, "SPEC_AGENT_PROJECT_DIR": str(self.root),
               "CLAUDE_PROJECT_DIR": str(self.root)}
        try:
            proc = procs.popen(["/bin/sh", "-c", hook.command], contain=True, cwd=self.root,
                               env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        except OSError as e:
            out.notes.append(f"{label} could not start: {e}")
            return
        try:
            stdout, stderr = proc.communicate(json.dumps(body).encode(), timeout=hook.timeout_s)
        except subprocess.TimeoutExpired:
            procs.kill_group(proc)
            try:
                proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            out.notes.append(f"{label} timed out after {hook.timeout_s:g}s and was killed; ignored")
            return
        finally:
            procs.reaped(proc)  # what the hook left running dies with it
        text = stdout.decode("utf-8", "replace").strip()[:MAX_HOOK_OUTPUT]
        err = stderr.decode("utf-8", "replace").strip()[:MAX_HOOK_OUTPUT]
        if proc.returncode == 2:
            out.decision, out.reason = "block", err or "blocked by a hook"
            out.notes.append(f"{label} blocked: {out.reason.splitlines()[0] if out.reason else ''}")
        elif proc.returncode != 0:
            out.notes.append(f"{label} failed (exit {proc.returncode}): {err[:200]}; ignored")
        elif text.startswith("{"):
            self._json(label, text, out)
        elif text and hook.event == "UserPromptSubmit":
            out.context = (out.context + "\n" + text).strip()
            out.notes.append(f"{label} added context ({len(text)} characters)")

    def _json(self, label: str, text: str, out: HookOutcome) -> None:
        try:
            obj = loads(text)  # nesting capped: a RecursionError would escape
        except json.JSONDecodeError as e:
            out.notes.append(f"{label} wrote JSON that does not parse ({e.msg}); ignored")
            return
        if not isinstance(obj, dict):
            return
        spec = obj.get("hookSpecificOutput") if isinstance(obj.get("hookSpecificOutput"), dict) else {}
        decision = {"approve": "allow", "block": "block", "allow": "allow", "deny": "block",
                    "ask": "ask"}.get(str(spec.get("permissionDecision") or obj.get("decision") or ""), "")
        if obj.get("continue") is False:
            decision = "block"
        reason = str(spec.get("permissionDecisionReason") or obj.get("reason")
                     or obj.get("stopReason") or "")
        if decision and (out.decision != "block"):
            out.decision, out.reason = decision, reason
        context = spec.get("additionalContext")
        if isinstance(context, str) and context.strip():
            out.context = (out.context + "\n" + context.strip()[:MAX_HOOK_OUTPUT]).strip()
        said = {"block": "blocked", "allow": "approved", "ask": "asked for approval"}.get(decision, "")
        if said:
            out.notes.append(f"{label} {said}" + (f": {reason}" if reason else ""))
        elif context:
            out.notes.append(f"{label} added context")
        if isinstance(obj.get("systemMessage"), str) and obj["systemMessage"].strip():
            out.notes.append(f"{label}: {obj['systemMessage'].strip()[:300]}")

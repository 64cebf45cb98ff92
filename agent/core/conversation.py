"""The agent as a conversation: user message → model turns → tool calls → … → answer.

`Conversation.send(text, cancel)` runs one user message to an answer and yields events for
every step (agent/events.py): text deltas and live progress, the model's message, each tool
call and its result, git actions, per-turn stats, and finally `RunStopped` + `AgentResult`
(usage of this message; `Conversation.usage` sums the whole conversation). The history is
kept across messages and is append-only, so a session with prefix caching re-reads only the
new messages. A `CancelToken` stops a message between decoding rounds and between tool calls;
the history stays well-formed (a cut assistant message is kept without its partial call, and
every call gets a result). The model is any `Backend` (agent/core/backend.py), known by the
`Capabilities` it declares; asking the user is the `Approver`'s business (agent/ui).

This module is the turn loop, tool calls, approvals and hooks. What a reply's code blocks
write, and the vetting, snapshots and commits of edits, are core/edits.py's; what a reply
that did not deliver is sent back with, core/recovery.py's (and core/resample.py's); the
lint-and-test loop, core/testloop.py's. Nothing here renders.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any, Callable, Iterator, Protocol

from tools import TOOLS, ToolContext, ToolResult, call_tool

from tools.denylist import denylisted

from . import edits, recovery, testloop
from .approvals import Decision, decide
from .attempts import Attempt, Attempts, fresh_temperature, read_files
from .backend import Backend, ModelError, Sampling
from ..cancel import CancelToken
from ..config import Config
from ..events import (AgentResult, ApprovalRequest, ApprovalRequired, AssistantMessage,
                      ContextCompacted, Event, GenerationStats, GitAction, HookActed, RunStopped,
                      TextDelta, ToolCallFinished, ToolCallStarted, TurnStarted, TurnStats, Warning)
from .git import GitGuard
from .history import HistoryError
from .budget import Budget
from .snapshots import SnapshotStore
from .callformat import ParsedCall, format_result, parse_calls, strip_calls
from .preview import approval_request, scope_keys
from .attach import attach, typed_text
from .prompt import system_prompt
from .resample import reason, resample_stuck
from .runstate import Run, Usage
from .outcome import NOT_DONE, verdict
from ..choices import BLOCK_EDIT_FORMATS

__all__ = ["Approver", "Conversation", "ERROR_STOPS", "NOT_RUN", "Usage", "new_id"]

Model = Backend  # what the conversation talks to: any agent.core.backend.Backend


class Approver(Protocol):
    def __call__(self, request: ApprovalRequest) -> str:
        """"yes", "no", or "always" (approve this scope for the rest of the conversation)."""
        ...


# Every stop but "answered" is a run that did not deliver (agent/exit_codes.py gives each a code).
ERROR_STOPS = ("error", "approval_required", "cancelled", "repetition", "max_turns", "max_tokens",
               "blocked", *NOT_DONE)
MAX_STOP_HOOK_TURNS = 3  # a Stop hook may send the model back at most this often per message
CUT_SHORT = ("cancelled", "repetition")  # turns stopped mid-way: a half-written call is dropped
NOT_RUN = "not run: the user cancelled before this call"
DECLINED = "the user did not approve this call; try something else"


class Conversation:
    """A conversation with the agent in one workspace. Not thread-safe: one `send` at a time."""

    def __init__(self, model: Model | None, ctx: ToolContext, cfg: Config, *, git: GitGuard | None = None,
                 approver: Approver | None = None, messages: list[dict[str, str]] | None = None,
                 conv_id: str = "", on_message: Callable[[dict[str, str]], None] | None = None):
        self.model, self.ctx, self.cfg, self.approver = model, ctx, cfg, approver
        self.root = ctx.root
        self.git = git if git is not None else GitGuard.open(self.root, cfg.dirty_files, cfg.auto_commit)
        self.snapshots = SnapshotStore.open(self.root, cfg.snapshot_max_count, cfg.snapshot_max_age_days)
        self.on_message = on_message  # called with every message appended (persistence)
        self.id = conv_id or new_id()
        self.messages: list[dict[str, str]] = list(messages) if messages else []
        self._saved = len(self.messages)  # messages already persisted (a resumed history is)
        self.unsaved: list[str] = []  # why saving failed, for the next Warning (once each)
        self._told = 0
        if not self.messages:
            # schemas sent by the backend (none yet: a UI loads the model after)
            native = model is not None and model.capabilities.native_tools
            prompt = system_prompt(self.root, native, cfg.edit_format)
            self.append({"role": "system", "content": prompt})
        self.usage = Usage()  # the whole conversation
        self.budget = Budget()  # what the model reads of the history (see core/budget.py)
        self.always: set[str] = set()  # approval scopes the user answered "always" for
        self._warned = False
        self.hooks: Any = None  # agent.core.hooks.HookRunner: the user's hooks, if any
        # The files as the last message's test runs left them (core/attempts.py, round 0),
        # with the command that tested them.
        self._tested: tuple[str, Attempt | None] = ("", None)
        # the index of the last message `send` added (-1: none yet in this process), and the
        # files that message changed, as it left them
        self._request = -1
        self._left: dict[str, str | None] = {}
        self._left_at = 0  # the history's length when that message ended

    # ---- state ---------------------------------------------------------------------------

    def append(self, message: dict[str, str]) -> None:
        """Add a message; persist it once the conversation has a user message (a conversation
        opened and left without one is not worth resuming)."""
        self.messages.append(message)
        if self.on_message is None or not any(m["role"] == "user" for m in self.messages):
            return
        try:
            for m in self.messages[self._saved:]:
                self.on_message(m)
                self._saved += 1
        except HistoryError as e:  # (a full disk): the work goes on; saving is retried
            if str(e) not in self.unsaved:
                self.unsaved.append(str(e))

    def set_model(self, model: Model) -> None:
        """Talk to `model` from the next call on (the history stays)."""
        self.model = model

    def set_config(self, cfg: Config) -> None:
        """Use `cfg` from the next call on (e.g. a new approval mode)."""
        self.cfg = cfg
        self.git.dirty_mode, self.git.auto_commit = cfg.dirty_files, cfg.auto_commit

    def add_note(self, text: str) -> None:
        """Add context the user supplied outside a message (e.g. a command's output)."""
        self.append({"role": "user", "content": text})

    @property
    def last_request(self) -> int:
        """The index of the last message `send` added (-1: none yet in this process)."""
        return self._request

    @property
    def user_messages(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "user")

    # ---- one user message ------------------------------------------------------------------

    def send(self, text: str, cancel: CancelToken | None = None, summary: str = "") -> Iterator[Event]:
        """Run the user's `text` to an answer, `max_turns`, an approval stop, an error or a
        cancel; the last two events are `RunStopped` and `AgentResult`. `summary` (default:
        `text`) is what the agent's commits name as the task, e.g. the message without the
        files attached to it."""
        run = Run(summary or text, cancel or CancelToken())
        run.test_cmd, said = testloop.test_command(self, text)
        run.tests_fail = bool(run.test_cmd) and run.test_cmd != self.cfg.test_cmd and not said
        left, self._left = self._left, {}
        if self.cfg.fix_mode == "restart" and len(self.messages) == self._left_at:  # (no note since)
            run.marks.as_left = [p for p, c in read_files(self.root, list(left)).items() if c == left[p]]
        last, self._tested = self._tested, ("", None)
        run.attempts = Attempts(testloop.start_state(self, run.test_cmd, last))
        if self.git.warning and not self._warned:
            self._warned = True
            yield Warning(self.git.warning)
        if run.test_cmd and run.test_cmd != self.cfg.test_cmd:
            what = "says its tests fail" if said else "shows failing tests"
            yield Warning(f"the message {what}; `{run.test_cmd}` runs after each edit "
                          "(infer_test_cmd)")
        blocked = yield from self._prompt_hooks(run, text)
        if blocked:
            yield from self._finish(run, "blocked", blocked)
            return
        text = run.task_text or text
        if said:  # the failures it speaks of, as the tests show them now
            text += yield from testloop.tests_now(self, run)
        if self.cfg.attach_mentioned:
            got = attach(text, self.ctx, plain=True, listing=self.user_messages == 0,
                         budget=self.cfg.auto_attach_tokens)
            text, shown = got.text, got.event()
            if shown is not None:  # what was added beyond the text, with sizes
                yield shown
        self.append({"role": "user", "content": text})
        run.base = len(self.messages)
        run.request, self._request = self._request, run.base - 1
        for turn in range(1, self.cfg.max_turns + 1):
            run.turn = turn
            if run.cancel.cancelled:
                yield from self._finish(run, "cancelled", "cancelled")
                return
            yield from self._save_warnings()
            yield TurnStarted(turn)
            try:
                reply, stats = yield from self._model_turn(run)
            except ModelError as e:
                yield from self._finish(run, "error", str(e))
                return
            cut = stats is not None and stats.finish_reason in CUT_SHORT
            calls = [] if cut else parse_calls(reply)
            if stats is not None and stats.finish_reason == "repetition" and not run.cancel.cancelled:
                again = yield from recovery.after_loop(self, run)
                if again:
                    continue
                yield from self._finish(run, "repetition", "the model kept repeating itself; "
                                        "the turn was stopped")
                return
            if not calls and not cut and self.cfg.edit_format in BLOCK_EDIT_FORMATS:
                stop = yield from self._apply_blocks(run, reply, text)
                if stop:
                    yield from self._finish(run, "approval_required", stop)
                    return
            if not calls:
                more = yield from recovery.more_to_do(self, run)
                if more:
                    self.append({"role": "user", "content": more})
                    continue
                yield from self._finish_answer(run, stats)
                return
            stop = yield from self.run_calls(run, calls)
            if stop:
                yield from self._finish(run, "approval_required", stop)
                return
        yield from self._finish(run, "max_turns", f"stopped after {self.cfg.max_turns} turns "
                                "(max_turns) before an answer")

    def _finish_answer(self, run: Run, stats: GenerationStats | None) -> Iterator[Event]:
        if run.cancel.cancelled:
            yield from self._finish(run, "cancelled", "cancelled")
        elif stats is not None and stats.finish_reason == "length":
            yield from self._finish(run, "max_tokens", "the reply was cut at max_tokens "
                                    f"({self.cfg.max_tokens}); raise --max-tokens")
        else:
            yield from self._finish(run, "answered")

    def _model_turn(self, run: Run) -> Iterator[Event]:
        messages = yield from self._fit()
        fresh, run.marks.fresh = run.marks.fresh, False
        run.marks.shown = {}
        sampling = None
        if fresh:  # the message alone, without the failed attempts (core/recovery.py)
            messages = yield from recovery.fresh_view(self, run, messages)
            sampling = Sampling(fresh_temperature(self.cfg), len(self.messages) * 100 + 50)
        led = run.marks.lead  # (a reply sampled again begins the same way)
        reply, stats = yield from self.sample(messages, run, sampling)
        reply, stats = yield from resample_stuck(self, run, messages, reply, stats, led)
        # A repeated code block changes nothing (a repeated short answer is harmless).
        run.marks.repeated = "```" in reply and bool(reason(reply, "", self.messages))
        cut = stats is not None and stats.finish_reason in CUT_SHORT
        # A reply cut by a cancel keeps its text but not a half-written call.
        self.append({"role": "assistant", "content": strip_calls(reply) if cut else reply})
        run.last_text = strip_calls(reply)
        yield AssistantMessage(run.last_text, run.turn)
        if stats is not None:
            run.usage.turns.append(stats)
            self.usage.turns.append(stats)
            yield TurnStats(run.turn, stats)
        return reply, stats

    def sample(self, messages: list[dict[str, str]], run: Run,
               sampling: Sampling | None = None) -> Iterator[Event]:
        """One reply from the model: (text, its GenerationStats or None). A reply that is to
        begin with `run.marks.lead` (once) is asked for with it, and its text includes it;
        `sampling`, where the backend takes it, replaces its own settings for this reply."""
        parts: list[str] = []
        stats = None
        led, run.marks.lead = run.marks.lead, ""
        caps = self.model.capabilities
        kw: dict[str, Any] = {}
        if led and caps.leads:
            kw["lead"] = led
        if sampling is not None and caps.sampling:
            kw["sampling"] = sampling
        for ev in self.model.generate(messages, run.cancel, **kw):
            if isinstance(ev, TextDelta):
                parts.append(ev.text)
            if isinstance(ev, GenerationStats):
                stats = ev
            else:
                yield ev
        return "".join(parts), stats

    def _fit(self) -> Iterator[Event]:
        """The history as the model reads it, compacted first when it nears the window."""
        caps = self.model.capabilities
        if caps.count_tokens is None or not caps.context_limit:
            return self.budget.view(self.messages)
        view, done = self.budget.fit(self.messages, caps.count_tokens, caps.context_limit,
                                     caps.reply_reserve)
        if done is not None:
            yield ContextCompacted(
                f"context {done.tokens_before}/{done.limit} tokens: elided {done.messages} older "
                f"tool outputs/messages, now {done.tokens_after}", done.messages,
                done.tokens_before, done.tokens_after, done.limit)
        return view

    def _apply_blocks(self, run: Run, reply: str, message: str) -> Iterator[Event]:
        """The code-block edit formats: the files the reply writes (core/edits.py), written
        as write_file calls, so approvals, snapshots and commits apply; returns '' or an
        approval stop. Their results are shown, not added to the history: the reply itself
        records the change, and the next message starts from the files as they now are."""
        calls = yield from edits.block_calls(self, run, reply, message)
        if not calls:
            return ""
        # (vetted against the text the reply read; the file may hold more since)
        return (yield from self.run_calls(run, calls, record=False, vetting=False))

    def run_calls(self, run: Run, calls: list[ParsedCall], record: bool = True,
                  vetting: bool = True) -> Iterator[Event]:
        """Run a turn's calls; returns '' or the approval problem that stops the message.
        `record`: add the results to the history for the model's next turn. `vetting`: whole-file
        writes go through core/editguard.py (not the agent's own restores of tested files)."""
        results, changed, stop = [], [], ""
        try:
            for k, call in enumerate(calls, 1):
                call_id = f"call_{self.user_messages}_{run.turn}_{k}"
                if run.cancel.cancelled:
                    results.append(format_result(call.name, ToolResult.error(NOT_RUN)))
                    continue
                yield ToolCallStarted(call_id, call.name, call.arguments)
                run.usage.tool_calls += 1
                self.usage.tool_calls += 1
                result, stop = yield from self._one_call(call_id, call, run, vetting)
                if stop:
                    break
                yield ToolCallFinished(call_id, call.name, result.ok, result.output)
                results.append(format_result(call.name, result))
                self._outcome(run, call, result, record)
                changed += result.changed
                run.edited += result.changed
                run.touched += result.changed
                run.written += result.changed
                if result.changed:
                    run.attempts.edited()
                run.changed_any = run.changed_any or bool(result.changed)
        finally:
            yield from edits.commit(self, changed, run)
        if not stop and record:
            self.append({"role": "user", "content": "\n".join(results)})
        return stop

    def _approve(self, call_id: str, call: ParsedCall, kind: str, ask: bool = False) -> Iterator[Event]:
        """(approved, stop) for a call the policy (or, `ask`, a hook) wants a person to see."""
        decision = decide(self.cfg.approval_mode, kind, call.name, call.arguments, self.root)
        if ask and not decision.ask:
            decision = Decision(True, f"a PreToolUse hook asks for approval of {call.name}")
        if not decision.ask:
            return True, ""
        request = approval_request(call_id, call.name, kind, call.arguments, decision.reason, self.root)
        keys = scope_keys(request.scope)
        if request.can_always and all(k in self.always for k in keys):
            return True, ""
        if self.approver is None:
            yield ApprovalRequired(call_id, call.name, decision.reason)
            return False, _approval_hint(decision.reason)
        answer = self.approver(request)
        if answer == "always" and request.can_always:
            self.always.update(keys)
        return answer in ("yes", "always"), ""

    def _outcome(self, run: Run, call: ParsedCall, result: ToolResult, record: bool) -> None:
        """Note what a finished call did for the message's outcome (core/outcome.py); an edit
        of a reply's code block that failed goes back to the model (its results are not in
        the history)."""
        kind = TOOLS[call.name].kind if call.name in TOOLS else ""
        if kind == "shell":
            run.work.shell_ran = True
        if kind != "edit":
            return
        if result.ok:
            run.work.edit_applied(result.changed)
        elif result.output.removeprefix("Error: ") not in (DECLINED, NOT_RUN):
            path = str(call.arguments.get("path", ""))
            run.work.edit_failed(path, f"{call.name} {path}: {result.output}")
            if not record:
                run.reply.refused.append(f"{path} was not written: {result.output}")

    def _one_call(self, call_id: str, call: ParsedCall, run: Run, vetting: bool = True) -> Iterator[Event]:
        """(result, stop): run one call through validation, hooks, approval and git protection."""
        if call.error:
            return ToolResult.error(call.error), ""
        tool = TOOLS[call.name]
        verdict = yield from self._hook("PreToolUse", {"tool_name": call.name,
                                                       "tool_input": call.arguments}, call.name)
        if verdict.decision == "block":
            return ToolResult.error(f"a PreToolUse hook blocked this call: {verdict.reason}"), ""
        result, stop = yield from self._run_one(call_id, call, tool, verdict.decision, run, vetting)
        if not stop:
            post = yield from self._hook("PostToolUse", {
                "tool_name": call.name, "tool_input": call.arguments,
                "tool_response": {"ok": result.ok, "output": result.output}}, call.name)
            extra = post.reason if post.decision == "block" else post.context
            if extra:
                result = replace(result, output=f"{result.output}\n[PostToolUse hook] {extra}")
        return result, stop

    def _run_one(self, call_id: str, call: ParsedCall, tool, hook: str, run: Run,
                 vetting: bool = True) -> Iterator[Event]:
        """(result, stop) past the hooks: approval (skipped when a hook allowed the call, except
        for a destructive command; asked when a hook says "ask"), snapshot, git protection,
        the call."""
        command = str(call.arguments.get("command", "")) if tool.kind == "shell" else ""
        if hook == "allow" and not (command and denylisted(command, self.root)):
            approved, stop = True, ""
        else:
            approved, stop = yield from self._approve(call_id, call, tool.kind, ask=hook == "ask")
        if stop:
            return ToolResult.error("not approved"), stop
        if not approved:
            return ToolResult.error(DECLINED), ""
        if tool.kind in ("edit", "shell"):
            problem = edits.snapshot(self, call)
            if problem:
                return ToolResult.error(problem), ""
        if tool.kind == "edit":
            for arg in tool.paths:
                problem = edits.protect(self, call.arguments.get(arg, ""))
                if problem:
                    return ToolResult.error(problem), ""
                for note in self.git.notes:
                    yield GitAction("protect", note)
                self.git.notes.clear()
            return (yield from edits.edit(self, call, tool, run, vetting)), ""
        return call_tool(call.name, call.arguments, self.ctx), ""

    # ---- hooks --------------------------------------------------------------------------------

    def _hook(self, event: str, payload: dict[str, Any], tool: str = "") -> Iterator[Event]:
        """Run the user's `event` hooks; their notes become HookActed events."""
        from .hooks import HookOutcome

        if self.hooks is None or not self.hooks.has(event):
            return HookOutcome()
        outcome = self.hooks.run(event, payload, tool)
        for note in outcome.notes:
            yield HookActed(note, event=event, decision=outcome.decision)
        return outcome

    def _prompt_hooks(self, run: Run, text: str) -> Iterator[Event]:
        """UserPromptSubmit: '' to go on (run.task_text may gain context), or why it was blocked."""
        verdict = yield from self._hook("UserPromptSubmit", {"prompt": text})
        if verdict.decision == "block":
            return f"a UserPromptSubmit hook blocked the message: {verdict.reason}"
        if verdict.context:
            run.task_text = f"{text}\n\n{verdict.context}"
        return ""

    def stop_hooks(self, run: Run) -> Iterator[Event]:
        """Stop: '' to stop, or the reason a hook gave for going on (the model reads it)."""
        if run.stop_hook_turns >= MAX_STOP_HOOK_TURNS:
            return ""
        verdict = yield from self._hook("Stop", {"stop_hook_active": run.stop_hook_turns > 0})
        if verdict.decision != "block":
            return ""
        run.stop_hook_turns += 1
        return f"[Stop hook] {verdict.reason or 'keep going'}"

    def _save_warnings(self) -> Iterator[Event]:
        for text in self.unsaved[self._told:]:
            yield Warning(f"{text}; the conversation goes on, saving is tried again with each message")
        self._told = len(self.unsaved)

    def _finish(self, run: Run, reason: str, error: str = "") -> Iterator[Event]:
        if reason == "answered":  # answered, but is the work done? (core/outcome.py)
            testloop.recheck(self, run)
            reason, error = verdict(typed_text(run.task), run.work)
        self._tested = (run.test_cmd, run.attempts.tested_state(self.root))
        self._left = read_files(self.root, run.written) if self.cfg.fix_mode == "restart" else {}
        self._left_at = len(self.messages)
        yield from self._save_warnings()
        yield RunStopped(reason, run.turn)
        yield AgentResult(reason in ERROR_STOPS, run.last_text, run.turn, run.usage.as_dict(),
                          error, stop_reason=reason)


def new_id() -> str:
    """A conversation id: sortable by creation time, unique enough for one user."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def _approval_hint(reason: str) -> str:
    if reason.startswith("destructive"):
        return f"{reason}; destructive commands always need a person's approval, stopping"
    return f"{reason}; stopping (no one to ask: rerun with --yes or --approval-mode full-auto)"


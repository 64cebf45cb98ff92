"""The agent as a conversation: user message → model turns → tool calls → … → answer.

`Conversation.send(text, cancel)` runs one user message to an answer and yields events for
every step (agent/events.py): text deltas and live progress, the model's message, each tool
call and its result, git actions, per-turn stats, and finally `RunStopped` + `AgentResult`
(usage of this message; `Conversation.usage` sums the whole conversation). The history is
kept across messages and is append-only, so a session with prefix caching re-reads only the
new messages. A `CancelToken` stops a message between decoding rounds and between tool calls;
the history stays well-formed (a cut assistant message is kept without its partial call, and
every call gets a result). The model is any `Backend` (agent/core/backend.py);
asking the user is the `Approver`'s business (agent/ui). Nothing here renders.
"""

from __future__ import annotations

import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from tools import TOOLS, ToolContext, ToolResult, call_tool

from tools.denylist import denylisted

from .approvals import Decision, decide
from .attempts import (Attempt, Attempts, fresh_temperature, read_files, resamples, restart_files,
                       restart_view, run_score)
from .backend import Backend, ModelError
from ..cancel import CancelToken
from ..config import Config
from ..events import (AgentResult, ApprovalRequest, ApprovalRequired, AssistantMessage,
                      CheckRun, ContextCompacted, Event, GenerationStats, GitAction, HookActed, RunStopped,
                      TextDelta,
                      ToolCallFinished, ToolCallStarted, TurnStarted, TurnStats, Warning)
from .git import GitGuard, GitSafetyError
from .history import HistoryError
from .budget import Budget
from .snapshots import SnapshotError, SnapshotStore
from .callformat import ParsedCall, format_result, parse_calls, strip_calls
from .preview import approval_request, scope_keys
from .attach import ADDED, ATTACHED, attach, typed_text
from .prompt import system_prompt
from .resample import at_temperature, can_resample
from .searchreplace import FIX_HOW, apply_edits, is_edit_fence, parse_edits, whole_fixes, whole_verdict
from .wholefile import (FileBlock, asks_change, copies, current_text, defined, is_snippet, judge,
                        lead, leads_to, names_new_file, owners_in, parse_blocks, prose, quotes,
                        retarget, spliced)
from .editguard import parse_problem, same_code, vet
from .outcome import NOT_DONE, Work, verdict
from ..choices import BLOCK_EDIT_FORMATS


Model = Backend  # what the conversation talks to: any agent.core.backend.Backend


class Approver(Protocol):
    def __call__(self, request: ApprovalRequest) -> str:
        """"yes", "no", or "always" (approve this scope for the rest of the conversation)."""
        ...


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


# Every stop but "answered" is a run that did not deliver (agent/exit_codes.py gives each a code).
ERROR_STOPS = ("error", "approval_required", "cancelled", "repetition", "max_turns", "max_tokens",
               "blocked", *NOT_DONE)
MAX_STOP_HOOK_TURNS = 3  # a Stop hook may send the model back at most this often per message
CUT_SHORT = ("cancelled", "repetition")  # turns stopped mid-way: a half-written call is dropped
NOT_RUN = "not run: the user cancelled before this call"
DECLINED = "the user did not approve this call; try something else"
REFUSED = ("Your code block was not saved:\n{why}\n\nTo change a file, reply with its path on one "
           "line and then the complete new file in one code block: every line of it, the "
           "unchanged ones too.")
REFUSED_EDIT = "Your code was not applied:\n{why}\n\n{how}"  # the "diff" and "auto" formats
UNCHANGED = ("The code you wrote for {files} is the file exactly as it already is, so nothing "
             "changed. If the task needs a change, write the whole file again with the change "
             "made; if it needs none, say so in one line, without a code block.")
LOOPED = ("Your reply kept repeating the same text and was stopped. Answer the message again, "
          "with each part of it written once.")
NO_FIX = ("No file changed, and the tests the message is about still fail (`{cmd}`). Fix the "
          "code: {how}")
NO_FIX_HOW = {"whole": "reply with the file's path on one line and then the whole corrected "
              "file in one code block."}
TESTS_NOW = ADDED[4] + "{cmd}`):\n{output}"
REPEATED = ("Your code is the same as in your earlier reply, so it changes nothing and would "
            "fail the same way. Find what causes the error the message before it shows, then "
            "reply with the file's path on one line and the corrected code in one code block, "
            "in the same form as before.")


@dataclass
class _Run:
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
    refused: list[str] = field(default_factory=list)  # why code blocks of the last reply were not applied
    snippets: list[str] = field(default_factory=list)  # files the last reply wrote only a part of
    lead: str = ""  # text the next reply begins with (a refused snippet's file path and fence)
    unchanged: list[str] = field(default_factory=list)  # files the last reply wrote out again, unchanged
    same: list[str] = field(default_factory=list)  # files the last reply wrote out as they are
    bare: bool = False  # the last reply was code blocks and nothing else
    changed_any: bool = False  # an edit of this message applied
    repeated: bool = False  # the last reply still repeats an earlier one (core/resample.py)
    nudged: bool = False  # ... and the model was told so (or that its file changed nothing)
    rewrote_free: bool = False  # a failed test run of an unchanged rewrite went uncounted
    written_tests: list[str] = field(default_factory=list)  # test files the replies wrote (the test command)
    base: int = 0  # the history's length once the message was added (its replies come after)
    touched: list[str] = field(default_factory=list)  # every file this message changed or checked
    written: list[str] = field(default_factory=list)  # every file this message changed
    attempts: Attempts = field(default_factory=Attempts)  # its test runs (core/attempts.py)
    fresh: bool = False  # the next reply answers the message afresh (fix_mode "resample")
    test_cmd: str = ""  # the tests run after its edits: test_cmd, or the message's own (core/testcmd.py)
    tests_fail: bool = False  # its own tests are known to fail (shown, or run before its first reply)
    told_no_fix: bool = False  # a reply that changed nothing was sent back (once a message)
    request: int = -1  # the index of the message `send` added before this one (-1: none)
    # the files the message before left as they still are (no one changed them since)
    as_left: list[str] = field(default_factory=list)
    # the files as the last reply read them, where that was not as they are (a restart_view)
    shown: dict[str, str] = field(default_factory=dict)
    work: Work = field(default_factory=Work)  # failed edits, check results: the outcome (core/outcome.py)


class Conversation:
    """A conversation with the agent in one workspace. Not thread-safe: one `send` at a time."""

    def __init__(self, model: Model, ctx: ToolContext, cfg: Config, *, git: GitGuard | None = None,
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
            native = bool(getattr(model, "native_tools", False))  # schemas sent by the backend
            prompt = system_prompt(self.root, native, cfg.edit_format)
            self._append({"role": "system", "content": prompt})
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

    def _append(self, message: dict[str, str]) -> None:
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
        self._append({"role": "user", "content": text})

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
        run = _Run(summary or text, cancel or CancelToken())
        run.test_cmd, said = self._test_cmd(text)
        run.tests_fail = bool(run.test_cmd) and run.test_cmd != self.cfg.test_cmd and not said
        left, self._left = self._left, {}
        if self.cfg.fix_mode == "restart" and len(self.messages) == self._left_at:  # (no note since)
            run.as_left = [p for p, c in read_files(self.root, list(left)).items() if c == left[p]]
        run.attempts = Attempts(self._start_state(run.test_cmd))
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
            text += yield from self._tests_now(run)
        if self.cfg.attach_mentioned:
            got = attach(text, self.ctx, plain=True, listing=self.user_messages == 0,
                         budget=self.cfg.auto_attach_tokens)
            text, shown = got.text, got.event()
            if shown is not None:  # what was added beyond the text, with sizes
                yield shown
        self._append({"role": "user", "content": text})
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
                again = yield from self._after_loop(run)
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
                more = yield from self._more_to_do(run)
                if more:
                    self._append({"role": "user", "content": more})
                    continue
                yield from self._finish_answer(run, stats)
                return
            stop = yield from self._run_calls(run, calls)
            if stop:
                yield from self._finish(run, "approval_required", stop)
                return
        yield from self._finish(run, "max_turns", f"stopped after {self.cfg.max_turns} turns "
                                "(max_turns) before an answer")

    def _more_to_do(self, run: _Run) -> Iterator[Event]:
        """What the model is sent back with instead of ending the message ('' for nothing): that
        it repeated itself (once), a failed check of its edits, or a Stop hook's reason."""
        if run.cancel.cancelled:
            return ""
        if run.repeated and not run.nudged and self.cfg.resample_temperature > 0:
            run.nudged = True  # once per message: say so, and let it try again
            run.refused, run.snippets = [], []  # (what the nudge answers instead)
            yield Warning("the reply's code repeats an earlier reply's; asking for another")
            return REPEATED
        refused, run.refused = run.refused, []
        snippets, run.snippets = list(dict.fromkeys(run.snippets)), []
        if refused and run.fix_rounds < self.cfg.max_fix_rounds:
            run.fix_rounds += 1  # a refused block counts as a failed check of the reply
            # (at greedy the model writes the refused block again)
            if (len(snippets) == 1 and len(refused) == 1 and self.cfg.lead_refused
                    and self.cfg.edit_format == "whole" and getattr(self.model, "leads", False)
                    and leads_to(snippets[0])):
                # The reply wrote a part of one file (small models copy the message's example
                # statement as the file): the next reply begins with that file's path, an
                # opening fence and the file's first line, and goes on from there (a fresh
                # sample where fix_mode resamples: led at greedy, the 0.5B wrote the stub out).
                run.lead = lead(snippets[0], Path(self.root))
                yield Warning(f"the reply wrote only a part of {snippets[0]}; the next reply "
                              "begins with the file's path and writes it whole (lead_refused)")
            yield from self._afresh(run, "the reply's code could not be used")
            if self.cfg.edit_format in FIX_HOW:
                return REFUSED_EDIT.format(why="\n".join(refused), how=FIX_HOW[self.cfg.edit_format])
            return REFUSED.format(why="\n".join(refused))
        no_fix = yield from self._no_fix(run)
        if no_fix:
            return no_fix
        unchanged, run.unchanged = run.unchanged, []
        # At temperature 0 the 0.5B wrote the same file again after being told (4 of 4 times
        # measured), so this is part of resampling: told once, and a repeat is sampled again.
        if (unchanged and not run.changed_any and not run.nudged
                and self.cfg.resample_temperature > 0 and self.cfg.max_fix_rounds > 0):
            run.nudged = True  # once per message (as the repeat above)
            yield Warning(f"the reply wrote {', '.join(unchanged)} out unchanged; asking once more")
            return UNCHANGED.format(files=", ".join(unchanged))
        same, run.same = run.same, []
        offered = same if run.bare and not run.changed_any else []
        if (offered and not self._tests_judge(run) and run.fix_rounds < self.cfg.max_fix_rounds
                and self._resamples() and asks_change(typed_text(run.task))):
            # Only the files as they stand, not a word besides, for a message that asks for a
            # change: no attempt at it (the 0.5B answers "add a docstring" so), answered by a
            # fresh sample. Nothing tests the sample; what it writes is a reply to the message
            # like any other (definitions it leaves out are kept: core/pymerge.py).
            run.fix_rounds += 1
            yield from self._afresh(run, f"the reply only wrote {', '.join(offered)} out unchanged")
            return UNCHANGED.format(files=", ".join(offered))
        # A message that shows its own failing tests is not answered by the files as they
        # stand, even the first time they are written out.
        retest = unchanged or (offered if run.test_cmd != self.cfg.test_cmd else [])
        rewrote = bool(retest) and self._test_as_answer(run)
        if rewrote:
            # The reply offers the files as they stand as its answer; the tests say whether they
            # are (a model shown a failure often writes its failed code out again).
            yield Warning(f"the reply wrote {', '.join(retest)} out unchanged; running the checks on it")
            run.edited += retest
            run.touched += retest
        if run.edited:
            note = yield from self._checks(run, rewrote)
            if note:
                return note
        yield from self._keep_best(run)
        return (yield from self._stop_hooks(run))

    def _tests_now(self, run: _Run) -> Iterator[Event]:
        """Run the message's tests before its first reply (a message that says they fail and
        names them); returns what to add to the message: their output when they fail."""
        from .checks import clipped, shell

        if run.cancel.cancelled:
            return ""
        out = shell("test", run.test_cmd, self.ctx)
        run.tests_fail = not out.ok
        yield CheckRun("test", run.test_cmd, out.ok, out.output, 0, False)
        return "" if out.ok else TESTS_NOW.format(cmd=run.test_cmd, output=clipped(out.output))

    def _no_fix(self, run: _Run) -> Iterator[Event]:
        """What a reply that changed no file is sent back with, once a message, when the
        message asks to fix tests of its own that fail and they still fail when run again
        ('' otherwise; a fix made through the shell shows as passing tests): a small model
        often explains the fix and writes nothing."""
        from .checks import shell
        from .testcmd import asks_fix

        if (run.told_no_fix or not run.tests_fail or run.changed_any or run.edited or run.same
                or run.unchanged or run.fix_rounds >= self.cfg.max_fix_rounds
                or not asks_fix(typed_text(run.task))):
            return ""
        run.told_no_fix = True
        out = shell("test", run.test_cmd, self.ctx)
        yield CheckRun("test", run.test_cmd, out.ok, out.output, run.fix_rounds + 1, not out.ok)
        if out.ok:
            return ""
        run.fix_rounds += 1
        yield Warning("the reply changed no file and the message's tests still fail; asking for the fix")
        return NO_FIX.format(cmd=run.test_cmd, how=NO_FIX_HOW.get(self.cfg.edit_format,
                                                                   "edit the files it needs."))

    def _tests_judge(self, run: _Run) -> bool:
        """Whether a test command runs after the message's edits (auto_test on)."""
        return self.cfg.auto_test and bool(run.test_cmd)

    def _test_cmd(self, text: str) -> tuple[str, bool]:
        """The message's test command: `test_cmd`, else the failing tests `text` shows, else
        the test files it says fail, where infer_test_cmd is on and the approval policy runs
        it sandboxed without asking (core/testcmd.py); and whether it came from what the
        message says (then it is run before the first reply)."""
        if self.cfg.test_cmd or not (self.cfg.auto_test and self.cfg.infer_test_cmd):
            return self.cfg.test_cmd, False
        if getattr(self.ctx, "sandbox", "off") == "off":
            return "", False
        from .attach import repo_files
        from .testcmd import infer, says_failing

        said = False
        cmd = infer(text, Path(self.root))
        if not cmd and says_failing(typed := typed_text(text)):
            cmd, said = infer(typed, Path(self.root), set(repo_files(self.ctx))), True
        # only a command the approval policy runs, sandboxed, without asking (full-auto)
        if not cmd or decide(self.cfg.approval_mode, "shell", "run_shell", {"command": cmd},
                             Path(self.root)).ask:
            return "", False
        return cmd, said

    def _tests_written(self, run: _Run, edited: list[str]) -> Iterator[Event]:
        """A message without a test command whose replies wrote or changed test files: those
        files (every reply's so far) are its test command (core/testcmd.written_test_files),
        run after this reply's edits and every later one of the message, under the same
        conditions as an inferred command (infer_test_cmd on, the approval policy running it
        sandboxed without asking). A small model asked for a test often writes the function
        under test instead, or a test function that takes the value to test as an argument;
        the run shows it."""
        if not (self.cfg.auto_test and self.cfg.infer_test_cmd) or self.cfg.test_cmd:
            return
        if getattr(self.ctx, "sandbox", "off") == "off":
            return
        from .testcmd import pytest_command, written_test_files

        files = list(dict.fromkeys(run.written_tests + written_test_files(edited, Path(self.root))))
        if files == run.written_tests:
            return
        cmd = pytest_command(files, Path(self.root))
        if not cmd or decide(self.cfg.approval_mode, "shell", "run_shell", {"command": cmd},
                             Path(self.root)).ask:
            return
        run.test_cmd, run.written_tests = cmd, files
        yield Warning(f"the reply wrote test files; `{cmd}` runs after each edit of this message")

    def _test_as_answer(self, run: _Run) -> bool:
        """Whether files a reply wrote out unchanged are checked as an edit would be: with a
        test command, fix rounds left, and the files not known to pass as they are."""
        now = run.attempts.now
        return (self._tests_judge(run) and run.fix_rounds < self.cfg.max_fix_rounds
                and not (now is not None and now.ok))

    def _after_loop(self, run: _Run) -> Iterator[Event]:
        """A reply the repetition guard stopped is no attempt at the message: while fix rounds
        are left and fix_mode resamples, the message is answered afresh (True) instead of
        ending there."""
        if run.fix_rounds >= self.cfg.max_fix_rounds or not self._resamples():
            return False
        run.fix_rounds += 1
        yield from self._afresh(run, "the model kept repeating itself")
        self._append({"role": "user", "content": LOOPED})
        return True

    def _finish_answer(self, run: _Run, stats: GenerationStats | None) -> Iterator[Event]:
        if run.cancel.cancelled:
            yield from self._finish(run, "cancelled", "cancelled")
        elif stats is not None and stats.finish_reason == "length":
            yield from self._finish(run, "max_tokens", "the reply was cut at max_tokens "
                                    f"({self.cfg.max_tokens}); raise --max-tokens")
        else:
            yield from self._finish(run, "answered")

    def _model_turn(self, run: _Run) -> Iterator[Event]:
        from .resample import MAX_RESAMPLES, reason

        messages = yield from self._fit()
        fresh, run.fresh = run.fresh, False
        run.shown = {}
        sampling = nullcontext()
        if fresh:  # the message alone, without the failed attempts and their test runs
            restart = None
            if (self.cfg.fix_mode == "restart" and run.test_cmd and run.as_left
                    and run.test_cmd != self.cfg.test_cmd and self.cfg.edit_format == "whole"
                    and messages[run.request] is self.messages[run.request]):
                # The message reports failing tests of the answer before it: that request is
                # answered again, without the failed code (core/attempts.py). Only with whole
                # files (the other formats' edits apply to the files as they are), and only
                # while the request is read whole (not compacted: core/budget.py).
                shown = restart_files(messages, run.request, run.as_left)
                restart = restart_view(messages, run.request, run.base, shown)
                if restart is not None:
                    run.shown = shown
                    yield Warning("the reply answers the message before it again, as if it "
                                  "had not been answered, with these failures in view")
            messages = restart or messages[:run.base]
            sampling = at_temperature(self.model, fresh_temperature(self.cfg),
                                      len(self.messages) * 100 + 50)
        led = run.lead  # (a reply sampled again begins the same way)
        with sampling:
            reply, stats = yield from self._sample(messages, run)
        temp = self.cfg.resample_temperature
        for attempt in range(1, MAX_RESAMPLES + 1):
            why = reason(reply, getattr(stats, "finish_reason", ""), self.messages)
            if not why or temp <= 0 or run.cancel.cancelled or not can_resample(self.model):
                break
            yield Warning(f"{why}; sampling it again at temperature {temp:g}")
            if stats is not None:  # the dropped reply's figures still count
                run.usage.turns.append(stats)
                self.usage.turns.append(stats)
                yield TurnStats(run.turn, stats)
            run.lead = led
            with at_temperature(self.model, temp, len(self.messages) * 100 + attempt):
                reply, stats = yield from self._sample(messages, run)
        # A repeated code block changes nothing (a repeated short answer is harmless).
        run.repeated = "```" in reply and bool(reason(reply, "", self.messages))
        cut = stats is not None and stats.finish_reason in CUT_SHORT
        # A reply cut by a cancel keeps its text but not a half-written call.
        self._append({"role": "assistant", "content": strip_calls(reply) if cut else reply})
        run.last_text = strip_calls(reply)
        yield AssistantMessage(run.last_text, run.turn)
        if stats is not None:
            run.usage.turns.append(stats)
            self.usage.turns.append(stats)
            yield TurnStats(run.turn, stats)
        return reply, stats

    def _sample(self, messages: list[dict[str, str]], run: _Run) -> Iterator[Event]:
        """One reply from the model: (text, its GenerationStats or None). A reply that is to
        begin with `run.lead` (once) is asked for with it, and its text includes it."""
        parts: list[str] = []
        stats = None
        led, run.lead = run.lead, ""
        turn = (self.model.generate(messages, run.cancel, lead=led) if led
                else self.model.generate(messages, run.cancel))
        for ev in turn:
            if isinstance(ev, TextDelta):
                parts.append(ev.text)
            if isinstance(ev, GenerationStats):
                stats = ev
            else:
                yield ev
        return "".join(parts), stats

    def _fit(self) -> Iterator[Event]:
        """The history as the model reads it, compacted first when it nears the window."""
        count = getattr(self.model, "count_tokens", None)
        limit = int(getattr(self.model, "context_limit", 0) or 0)
        if count is None or not limit:
            return self.budget.view(self.messages)
        reserve = int(getattr(self.model, "reply_reserve", 0) or 0)
        view, done = self.budget.fit(self.messages, count, limit, reserve)
        if done is not None:
            yield ContextCompacted(
                f"context {done.tokens_before}/{done.limit} tokens: elided {done.messages} older "
                f"tool outputs/messages, now {done.tokens_after}", done.messages,
                done.tokens_before, done.tokens_after, done.limit)
        return view

    def _apply_blocks(self, run: _Run, reply: str, message: str) -> Iterator[Event]:
        """The code-block edit formats: write the files the reply gives in full and, in
        "diff" and "auto", apply its search/replace blocks (core/searchreplace.py), as
        write_file calls, so approvals, snapshots and commits apply; returns '' or an
        approval stop. Their results are shown, not added to the history: the reply itself
        records the change, and the next message starts from the files as they now are. Why
        a block was not applied goes back to the model (`run.refused`)."""
        calls = []
        run.refused, run.snippets = [], []  # (about this reply only)
        attached = list(dict.fromkeys(ATTACHED.findall(message)))
        default = attached[0] if len(attached) == 1 else ""
        text, fmt = strip_calls(reply), self.cfg.edit_format
        run.bare = not prose(text)
        edited: set[str] = set()
        if fmt != "whole":
            edits, malformed = parse_edits(text, default)
            problems = list(malformed)
            for fe in apply_edits(edits, self.root, attached):
                problems += fe.problems
                if fe.problems:
                    run.work.edit_failed(fe.path, fe.problems[0])
                if fe.content is not None:
                    edited.add(fe.path)
                    calls.append(ParsedCall("write_file", {"path": fe.path, "content": fe.content}))
            for why in problems:
                yield Warning(why)
            run.refused += problems
            for why in malformed:
                run.work.edit_failed("", why)
        skip = is_edit_fence if fmt != "whole" else None
        asked, intent = self._intent(run)
        shown_files = list(dict.fromkeys(p for m in self.messages if m["role"] == "user"
                                         for p in ATTACHED.findall(str(m["content"]))))
        # Code without its file's name, or under a new file's, goes to a file this message
        # attached; not for a message that only asks a question or names a new file.
        owners = (owners_in(self.root, attached)
                  if asks_change(asked) and not names_new_file(asked, self.root) else {})
        blocks = parse_blocks(text, default, skip, owners)
        written = [b.path for b in blocks]
        seen = shown_files + written
        for block in blocks:
            if block.path in edited:  # the reply's edit blocks for it win
                continue
            if (owner := retarget(block, self.root, owners, asked, intent, written)):
                yield Warning(f"the code block names {block.path}, a new file, and redefines "
                              f"{', '.join(sorted(defined(block.content)))} of {owner}; "
                              f"written to {owner}")
                written.append(owner)  # (one block a file: a second one is not merged in)
                block = FileBlock(owner, block.content)
            shown = run.shown.get(block.path)
            verdict = judge(block, self.root, shown)
            if (fmt != "diff" and is_snippet(verdict)
                    and (whole := spliced(block, self.root, intent, asked, shown))):
                yield Warning(f"the code block for {block.path} is only some of its definitions; "
                              "spliced them into the file")
                block, verdict = whole, "same" if judge(whole, self.root) == "same" else ""
            elif fmt != "whole":
                verdict = whole_verdict(block, self.root, fmt)
            if verdict == "" and (other := copies(block, self.root, seen, intent, tuple(written))):
                verdict = (f"the code block for {block.path} is the text of {other}, not a "
                           f"version of {block.path}: not applied")
            if verdict == "":
                block, verdict = yield from self._vetted(block, intent, shown)
            if verdict == "same":
                run.same.append(block.path)
                # (UNCHANGED asks for the whole file again, which "diff" does not take)
                if fmt != "diff" and self._wrote_before(block.content):
                    run.unchanged.append(block.path)
                continue
            if verdict:
                yield Warning(verdict)
                if not quotes(block, self.root):
                    run.refused.append(verdict)
                    run.work.edit_failed(block.path, verdict)
                    if fmt == "whole" and is_snippet(verdict):
                        run.snippets.append(block.path)
                continue
            calls.append(ParsedCall("write_file", {"path": block.path, "content": block.content}))
        if not calls:
            return ""
        # (vetted above against the text the reply read; the file may hold more since)
        return (yield from self._run_calls(run, calls, record=False, vetting=False))

    def _intent(self, run: _Run) -> tuple[str, str]:
        """(what the message typed; that, the earlier request and the reply before the
        message): what a reply that writes only part of a file answers (core/pymerge.py). A
        restarted reply answers the earlier request; a "yes, go ahead" agrees to the reply."""
        asked = typed_text(run.task)
        parts = [asked]
        if 0 <= run.request < len(self.messages):
            parts.append(typed_text(self.messages[run.request]["content"]))
        before = next((m["content"] for m in reversed(self.messages[:max(run.base - 1, 0)])
                       if m["role"] == "assistant"), "")
        return asked, "\n".join([*parts, prose(before)])

    def _vetted(self, block: FileBlock, intent: str, shown: str | None) -> Iterator[Event]:
        """(block, verdict) once core/editguard.py has vetted a whole-file block: markup
        stripped, left-out code put back, or why it is refused; "same" where it now equals
        the file."""
        old = current_text(self.root, block.path, shown)
        vetted = vet(block.path, old, block.content, intent)
        for note in vetted.notes:
            yield Warning(note)
        if vetted.problem:
            return block, vetted.problem
        if vetted.kept:
            listed = ", ".join(vetted.kept[:6]) + (", ..." if len(vetted.kept) > 6 else "")
            yield Warning(f"the code block for {block.path} leaves out {listed}, which the "
                          "message does not ask to remove; kept them")
        block = FileBlock(block.path, vetted.content)
        if old is not None and same_code(block.path, old, block.content):
            return block, "same"  # (blank lines or comments alone are no change)
        return block, "same" if judge(block, self.root) == "same" else ""

    def _wrote_before(self, content: str) -> bool:
        """Did an assistant message before the last one already write out `content`? (A
        model that writes out a file it wrote before, after being told it fails, is stuck;
        a first quote of a file is a fair answer.)"""
        body = content.strip("\n")
        return bool(body) and any(m["role"] == "assistant" and body in m["content"]
                                  for m in self.messages[:-1])

    def _run_calls(self, run: _Run, calls: list[ParsedCall], record: bool = True,
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
            yield from self._commit(changed, run)
        if not stop and record:
            self._append({"role": "user", "content": "\n".join(results)})
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

    def _outcome(self, run: _Run, call: ParsedCall, result: ToolResult, record: bool) -> None:
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
                run.refused.append(f"{path} was not written: {result.output}")

    def _one_call(self, call_id: str, call: ParsedCall, run: _Run, vetting: bool = True) -> Iterator[Event]:
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

    def _run_one(self, call_id: str, call: ParsedCall, tool, hook: str, run: _Run,
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
            problem = self._snapshot(call)
            if problem:
                return ToolResult.error(problem), ""
        if tool.kind == "edit":
            for arg in tool.paths:
                problem = self._protect(call.arguments.get(arg, ""))
                if problem:
                    return ToolResult.error(problem), ""
                for note in self.git.notes:
                    yield GitAction("protect", note)
                self.git.notes.clear()
            return (yield from self._edit(call, tool, run, vetting)), ""
        return call_tool(call.name, call.arguments, self.ctx), ""

    def _edit(self, call: ParsedCall, tool, run: _Run, vetting: bool = True) -> Iterator[Event]:
        """Run an edit call through core/editguard.py: a whole-file write is vetted before it
        is written (with `vetting`: markup stripped, left-out code kept, or refused); any edit that
        leaves a file that does not parse is undone, so nothing broken is written or
        committed."""
        paths = [str(call.arguments.get(arg, "")) for arg in tool.paths]
        before = {p: current_text(self.root, p) for p in paths}
        if vetting and call.name == "write_file" and paths:
            path = paths[0]
            _, intent = self._intent(run)
            vetted = vet(path, before[path], str(call.arguments.get("content", "")), intent)
            for note in vetted.notes:
                yield Warning(note)
            if vetted.problem:
                return ToolResult.error(vetted.problem)
            if vetted.kept:
                yield Warning(f"the write of {path} leaves out {', '.join(vetted.kept[:6])}, "
                              "which the message does not ask to remove; kept them")
            call = ParsedCall(call.name, {**call.arguments, "content": vetted.content})
        result = call_tool(call.name, call.arguments, self.ctx)
        for path in result.changed:
            text = current_text(self.root, path)
            problem = parse_problem(path, text) if text is not None else ""
            if problem:
                return undo_write(self.root, path, before.get(path), problem)
        return result

    def _checks(self, run: _Run, rewrote: bool = False) -> Iterator[Event]:
        """Check the files edited since the last check (core/checks.py); returns the message
        that gives a failure back to the model, or '' (all passed, or the rounds are spent).
        `rewrote`: the files are a reply's unchanged rewrite, so a failure of any check is one
        the model was already shown."""
        from .checks import feedback, importer_texts, run_checks

        edited, run.edited = run.edited, []
        if self.cfg.max_fix_rounds <= 0:
            return ""
        if not run.test_cmd or run.written_tests:
            yield from self._tests_written(run, edited)
        for out in run_checks(self.cfg, edited, self.ctx, run.task, run.test_cmd):
            back = not out.ok and run.fix_rounds < self.cfg.max_fix_rounds
            shown = out.output + (f"\n{out.missing}" if out.missing else "")
            yield CheckRun(out.kind, out.command, out.ok, shown, run.fix_rounds + 1, back)
            run.work.checked(out.kind, out.ok, () if out.kind in ("test", "lint") else edited)
            if out.kind == "test":
                score = run_score(out.ok, out.output)
                files = read_files(self.root, run.touched)
                run.attempts.tested_run(score, files, run.fix_rounds + 1)
            elif not out.ok:
                run.attempts.rejected()
            if not out.ok:
                # fix_mode "restart": the first reply that writes the files out unchanged and
                # fails their tests made no attempt at a fix; its run sets the score to beat,
                # and the round it used is given back (once a message).
                free = (rewrote and out.kind == "test" and not run.rewrote_free
                        and self.cfg.fix_mode == "restart")
                run.rewrote_free = run.rewrote_free or free
                run.fix_rounds += back and not free
                if back and out.kind == "test":
                    yield from self._afresh(run, score.describe())
                elif back and rewrote:  # a failure the reply was shown and wrote out again
                    yield from self._afresh(run, f"the {out.kind} check still fails")
                whole = whole_fixes(self.cfg.edit_format, edited, self.root)
                return (feedback(out, self.root, whole, importer_texts(out, self.ctx))
                        if back else "")
        run.work.passed(edited)  # every check of these files passed (some yield only failures)
        return ""

    def _resamples(self) -> bool:
        """Whether a failure is answered by a fresh reply (fix_mode, and a model that samples)."""
        return resamples(self.cfg) and can_resample(self.model)

    def _afresh(self, run: _Run, why: str) -> Iterator[Event]:
        """When fix_mode resamples (attempts.resamples), have the next reply answer the
        message afresh."""
        if self._resamples():
            run.fresh = True
            yield Warning(f"{why}; answering the message afresh (fix_mode {self.cfg.fix_mode})")

    def _keep_best(self, run: _Run) -> Iterator[Event]:
        """Write back the best tested attempt of the message when its files are now worse."""
        if run.written_tests:  # the replies' own tests judge them: scores of different tests
            return
        best = run.attempts.to_restore()
        if best is None or run.cancel.cancelled:
            return
        now = run.attempts.now
        calls = [ParsedCall("write_file", {"path": p, "content": c})
                 for p, c in best.files.items() if c is not None]
        which = f"attempt {best.round} of this message" if best.round else \
            "attempt 0, the files as this message found them"
        yield Warning(f"kept {which} ({best.score.describe()}); the last attempt is worse "
                      f"({now.describe()})")
        if calls:
            yield from self._run_calls(run, calls, record=False, vetting=False)
        run.edited = []  # the restored files were tested as they are
        run.attempts.now = best.score
        run.work.checked("test", best.score.ok)

    def _snapshot(self, call: ParsedCall) -> str:
        """Save the work tree before an action that may change it ('' or why it could not be)."""
        what = call.arguments.get("command") or call.arguments.get("path") or ""
        try:
            self.snapshots.take(f"{call.name} {what}", self.id)
        except SnapshotError as e:
            return f"{e}; not running {call.name} (nothing was changed)"
        return ""

    def _protect(self, path: str) -> str:
        from tools._paths import PathError, confine

        try:
            confine(self.root, path)
        except PathError as e:
            return str(e)
        return self.git.protect(path)

    def _commit(self, changed: list[str], run: _Run) -> Iterator[Event]:
        broken = [p for p in dict.fromkeys(changed)
                  if parse_problem(p, current_text(self.root, p) or "")]
        if broken:  # (changed since the edit, e.g. by a command): never committed
            yield Warning(f"not committed: {', '.join(broken)} does not parse")
            changed = [p for p in changed if p not in broken]
        if not changed:
            return
        try:
            sha = self.git.commit_turn(changed, run.task, run.turn)
        except GitSafetyError as e:
            yield Warning(str(e))
            return
        if sha:
            files = tuple(sorted(set(changed)))
            yield GitAction("commit", f"committed the agent's edits as {sha}", sha, files)

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

    def _prompt_hooks(self, run: _Run, text: str) -> Iterator[Event]:
        """UserPromptSubmit: '' to go on (run.task_text may gain context), or why it was blocked."""
        verdict = yield from self._hook("UserPromptSubmit", {"prompt": text})
        if verdict.decision == "block":
            return f"a UserPromptSubmit hook blocked the message: {verdict.reason}"
        if verdict.context:
            run.task_text = f"{text}\n\n{verdict.context}"
        return ""

    def _stop_hooks(self, run: _Run) -> Iterator[Event]:
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

    def _start_state(self, test_cmd: str) -> Attempt | None:
        """The files as the last message's tests saw them, while the same test command runs
        and the files are still as they were then (the user may have changed them since)."""
        (cmd, last), self._tested = self._tested, ("", None)
        if (last is None or not self.cfg.auto_test or not test_cmd or cmd != test_cmd
                or not last.on_disk(self.root)):
            return None
        return last

    def _recheck(self, run: _Run) -> None:
        """Check again the files an earlier check failed on (a later edit of another file may
        have mended them: an importer that now follows a rename), so the outcome is their
        state at the end of the message. The tests are not run again."""
        from .checks import run_checks

        files = sorted(set().union(*(v for k, v in run.work.failing.items()
                                     if k not in ("test", "lint"))) - {""})
        if not files or run.cancel.cancelled:
            return
        cfg = replace(self.cfg, auto_test=False, lint_cmd="")
        for out in run_checks(cfg, files, self.ctx, run.task, ""):
            run.work.checked(out.kind, out.ok, files)
            if not out.ok:
                return
        run.work.passed(files)

    def _finish(self, run: _Run, reason: str, error: str = "") -> Iterator[Event]:
        if reason == "answered":  # answered, but is the work done? (core/outcome.py)
            self._recheck(run)
            reason, error = verdict(typed_text(run.task), run.work)
        self._tested = (run.test_cmd, run.attempts.tested_state(self.root))
        self._left = read_files(self.root, run.written) if self.cfg.fix_mode == "restart" else {}
        self._left_at = len(self.messages)
        yield from self._save_warnings()
        yield RunStopped(reason, run.turn)
        yield AgentResult(reason in ERROR_STOPS, run.last_text, run.turn, run.usage.as_dict(),
                          error, stop_reason=reason)


def undo_write(root: Path, path: str, before: str | None, problem: str) -> ToolResult:
    """Put `path` back as it was before an edit that left it unparseable (remove it where the
    edit created it); the result says so, for the model."""
    from tools._paths import PathError, confine
    from tools.write_file import atomic_write

    try:
        full = confine(root, path)
        if before is None:
            full.unlink(missing_ok=True)
        else:
            atomic_write(full, before, root)
    except (PathError, OSError) as e:
        return ToolResult.error(f"{path} does not parse after this edit ({problem}), and it "
                                f"could not be put back: {e}")
    return ToolResult.error(f"{path} does not parse after this edit ({problem}): not applied; "
                            "the file is as it was")


def new_id() -> str:
    """A conversation id: sortable by creation time, unique enough for one user."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def _approval_hint(reason: str) -> str:
    if reason.startswith("destructive"):
        return f"{reason}; destructive commands always need a person's approval, stopping"
    return f"{reason}; stopping (no one to ask: rerun with --yes or --approval-mode full-auto)"


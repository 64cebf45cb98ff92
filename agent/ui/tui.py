"""The full-screen UI (Textual): `run_tui(runtime)` is what `spec-agent` runs without `-p`.

The App shows the conversation (streamed markdown, tool panels with diffs, notes), a multiline
prompt with `/command` and `@file` completion, an approval dialog and a status bar of live
decoding figures. All model work (loading, messages, slow slash commands, `!commands`) runs on
ONE engine thread (agent/ui/tui_engine.py) fed by a job queue; the App only renders the events
that thread posts, so the UI never waits for the model. A custom command's text is always
sent as a message (`Expansion`), never run as the user's `!command`. Text from the model,
tools or files reaches the screen through agent/ui/tui_widgets.py's `plain` (escaped, no
markup). Not here: how a message runs (agent/core), what the commands do
(agent/ui/slash.py, agent/ui/inputs.py).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.timer import Timer

from ..cancel import CancelToken
from ..core.attach import typed_text
from ..core.callformat import RESULT_OPEN, parse_calls, strip_calls
from ..core.shown import shown
from ..events import (AgentResult, ApprovalRequired, AssistantMessage, CheckRun, ContextAttached,
                      DecodeProgress,
                      GitAction, PrefillProgress, SpeculationChanged, ToolCallFinished, ToolCallStarted,
                      TurnStats, Warning)
from . import custom_commands, inputs, slash
from .render import check_line, stop_line, warning_line
from .tui_engine import (ApprovalAsked, EngineBridge, EngineEvent, JobDone, Note, Streamed)
from .tui_screens import ApprovalScreen, SlashCommands
from .tui_status import Figures, StatusBar, short_name
from .tui_widgets import (ChatView, Completions, Legend, PromptInput, call_summary, diff_syntax)

QUIT_WINDOW_S = 2.0  # a second Ctrl+C within this long quits
SHUTDOWN_WAIT_S = 60.0  # for the engine thread to finish its round (or a model load) on exit
UI_COMMANDS = ("help", "tokens", "quit", "config", "stats", "mcp")  # run on the UI thread, at once
MENTION_AT_CURSOR = re.compile(r"(?:^|\s)@([\w./\-]*)$")


@dataclass(frozen=True)
class Expansion:
    """A custom command's text: a message to the model whatever it starts with (a command
    file is the repository's, not the user's, so its `!` line is never the user's shell)."""

    text: str


class AgentApp(App[int]):
    """The spec-agent TUI on one `Runtime` (agent/runtime.py)."""

    TITLE = "spec-agent"
    COMMANDS = App.COMMANDS | {SlashCommands}
    CSS = """
    Screen { layout: vertical; }
    """
    BINDINGS = [
        Binding("ctrl+c", "interrupt", "cancel / quit", priority=True, show=False),
        Binding("escape", "cancel", "cancel", show=False),
        Binding("ctrl+t", "toggle_tokens", "token colours", show=False),
    ]

    def __init__(self, runtime: Any) -> None:
        super().__init__()
        self.runtime = runtime
        self.engine = EngineBridge(runtime, self._post)
        self.pending = 0  # engine jobs submitted and not yet done
        self.cancel: CancelToken | None = None  # the running message's
        self.last_result: AgentResult | None = None
        self._ctrl_c_at = 0.0
        self._files: list[str] | None = None  # repository files for @ completion (cached)
        self._approval: ApprovalScreen | None = None
        self.engine_started = False
        self.engine_tid = 0  # the engine thread's OS id, once it runs
        self._hint_timer: Timer | None = None
        self.queued: list[str | Expansion] = []  # sent while the engine was busy, oldest first

    def compose(self) -> ComposeResult:
        yield ChatView(id="chat")
        yield Completions(id="completions")
        yield Legend(id="legend")
        yield PromptInput(id="prompt")
        yield StatusBar(id="status")

    @property
    def chat(self) -> ChatView:
        return self.query_one(ChatView)

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one(PromptInput)

    @property
    def busy(self) -> bool:
        return self.pending > 0

    # ---- start and stop -------------------------------------------------------------------

    def on_mount(self) -> None:
        rt = self.runtime
        self.prompt.popup = self.query_one(Completions)
        self.prompt.completer = self._candidates
        self.prompt.focus()
        if rt.conversation is None:
            rt.new_conversation()
            self.chat.add_note(f"spec-agent in {rt.root.name}: /help lists commands, "
                               "@file attaches a file, !command runs one")
        else:
            self._replay(rt.conversation.messages)
        for warning in custom_commands.warnings(rt.root):
            self.chat.add_note(f"warning: {warning}", "warn")
        rt.set_approver(self.engine.approve)
        self._show_settings()
        self.engine_started = True
        self.engine_loop()
        if rt.model is None:
            self.status.phase = f"loading {short_name(rt.cfg.model)}…"
            self._submit("load", rt.load)
        else:
            self._submit("init", lambda: None)  # fills in git status

    @work(thread=True, name="engine", group="engine")
    def engine_loop(self) -> None:
        """The engine thread: every model call of this App runs here, one job at a time."""
        self.engine_tid = threading.get_native_id()
        self.engine.run()

    def on_unmount(self) -> None:
        self.engine.stop()

    def _post(self, message: Message) -> None:
        try:
            self.post_message(message)
        except RuntimeError:  # the event loop closed: the App is gone
            pass

    def _submit(self, kind: str, fn) -> None:
        self.pending += 1
        self.prompt.cursor_blink = False  # no redraws the model does not need while it works
        self.engine.submit(kind, fn)

    def _show_settings(self) -> None:
        rt, status = self.runtime, self.status
        draft = rt.draft_name
        status.model = short_name(rt.model_name) + (f" + {short_name(draft, 16)}" if draft else "")
        status.mode = rt.cfg.approval_mode
        if not status.figures.spec:
            status.figures = Figures(spec=rt.cfg.speculation)

    def _replay(self, messages: list[dict[str, str]]) -> None:
        """Show a resumed conversation's messages."""
        chat = self.chat
        for m in messages:
            if m["role"] == "user" and m["content"].startswith(RESULT_OPEN):
                chat.add_note(m["content"].splitlines()[0], "note")
            elif m["role"] == "user":
                chat.add_user(typed_text(m["content"]))
            elif m["role"] == "assistant":
                chat.end_turn(strip_calls(m["content"]))
                for c in parse_calls(m["content"]):
                    chat.add_note(f"{c.name}: {call_summary(c.name, c.arguments).plain}")

    # ---- input ------------------------------------------------------------------------------

    def on_prompt_input_submitted(self, msg: PromptInput.Submitted) -> None:
        text = msg.text.strip()
        if not text:
            return
        if text.startswith("/"):
            self.prompt.remember(text)
            self._slash(text)
        else:
            self.prompt.remember(text)
            self._queue(text) if self.busy else self._dispatch(text)

    def _queue(self, item: str | Expansion) -> None:
        """Keep a message sent while the model loads or answers; it is sent when it is done."""
        self.queued.append(item)
        first = (item.text if isinstance(item, Expansion) else item).splitlines()[0]
        self.chat.add_note(f"queued: {first[:80]}{'…' if len(first) > 80 else ''} "
                           "(sent when the model is ready)")
        self._flash(f"{len(self.queued)} message(s) queued · Esc cancels the running one")

    def _dispatch(self, item: str | Expansion) -> None:
        """Send a message, or run a `!command` the user typed (the engine is idle). The one
        place input is dispatched: an `Expansion` is always a message."""
        text = item.text if isinstance(item, Expansion) else item
        self.chat.add_user(text)
        if isinstance(item, str) and text.startswith("!"):
            self._submit("shell", partial(self.engine.shell, text[1:].strip()))
        else:
            self.cancel = CancelToken()
            self.status.phase = "thinking…"
            self._submit("send", partial(self.engine.send, text, self.cancel))

    def _slash(self, line: str) -> None:
        cmd, _ = slash.parse(line, self.runtime.root)
        if cmd is not None and cmd.custom:  # a command file's text, sent as a message
            reply = slash.run(self.runtime, line)
            if reply.error or reply.action != "send":
                self._apply(line, reply)
            elif self.busy:
                self._queue(Expansion(reply.text))
            else:
                self._dispatch(Expansion(reply.text))
            return
        self.chat.add_user(line)
        if cmd is None or cmd.name in UI_COMMANDS:
            self._apply(line, slash.run(self.runtime, line))
        else:
            if cmd.slow:
                self.status.phase = f"/{cmd.name}…"
            self._submit("slash", lambda: (line, slash.run(self.runtime, line)))

    def _apply(self, line: str, reply: slash.Reply) -> None:
        """Carry out a slash command's reply on the UI."""
        if reply.action == "quit":
            self.exit(0)
            return
        if reply.action == "clear":
            self.chat.clear()
            self.status.figures = Figures(spec=self.runtime.cfg.speculation)
        elif reply.action == "tokens":
            self.action_toggle_tokens()
        if reply.text:
            diff = line.split()[0] == "/diff" and not reply.error and reply.text != "no changes"
            self.chat.add_note(diff_syntax(reply.text) if diff else reply.text,
                               "error" if reply.error else "note")
        self._show_settings()

    def palette_command(self, name: str, takes_args: bool) -> None:
        """A slash command picked in the command palette."""
        if takes_args:
            self.prompt.load_text(f"/{name} ")
            self.prompt.move_cursor(self.prompt.document.end)
            self.prompt.focus()
        else:
            self._slash(f"/{name}")

    def on_text_area_changed(self, event: PromptInput.Changed) -> None:
        self.prompt.update_completions()

    def on_text_area_selection_changed(self, event: PromptInput.SelectionChanged) -> None:
        self.prompt.update_completions()

    def _candidates(self, before: str, first_line: bool) -> list[tuple[str, str]]:
        """Completions for the text before the cursor: `/command` or `@file`."""
        if first_line and before.startswith("/") and " " not in before:
            commands = slash.available(self.runtime.root)
            return [(c, f"{c:<14} {commands[c[1:]].help}") for c in slash.complete(before, self.runtime.root)]
        m = MENTION_AT_CURSOR.search(before)
        if m is None:
            return []
        if self._files is None:
            self._files = inputs.repo_files(self.runtime.ctx)
        return [("@" + f, "@" + f) for f in inputs.fuzzy_files(m.group(1), self._files, 10)]

    # ---- keys -------------------------------------------------------------------------------

    def action_cancel(self) -> None:
        """Esc: cancel the running message (the conversation is kept)."""
        if self.cancel is not None and not self.cancel.cancelled and self.busy:
            self.cancel.cancel()
            self.status.phase = "cancelling…"
        if self._approval is not None:
            self._approval.dismiss("no")

    def action_interrupt(self) -> None:
        """Ctrl+C: cancel when something runs; when idle, twice within 2 s quits."""
        running = self.busy and self.cancel is not None and not self.cancel.cancelled
        if running or self._approval is not None:
            self.action_cancel()
            return
        now = time.monotonic()
        if now - self._ctrl_c_at <= QUIT_WINDOW_S:
            self.exit(0)
            return
        self._ctrl_c_at = now
        self._flash("press Ctrl+C again to quit")

    def _flash(self, hint: str) -> None:
        """Show `hint` in the status bar for a moment."""
        self.status.hint = hint
        if self._hint_timer is not None:
            self._hint_timer.stop()
        self._hint_timer = self.set_timer(QUIT_WINDOW_S, lambda: setattr(self.status, "hint", ""))

    def action_toggle_tokens(self) -> None:
        on = not self.chat.tokens
        self.chat.set_tokens(on)
        self.query_one(Legend).display = on

    # ---- engine messages --------------------------------------------------------------------

    def on_streamed(self, msg: Streamed) -> None:
        if self.status.prefill is not None:
            self.status.prefill = None
        self.chat.stream(msg.text, msg.spans)

    def on_note(self, msg: Note) -> None:
        self.chat.add_note(msg.text, msg.kind)

    def on_approval_asked(self, msg: ApprovalAsked) -> None:
        def answered(answer: str | None) -> None:
            self._approval = None
            msg.answer.put(answer or "no")

        self._approval = ApprovalScreen(msg.request)
        self.status.phase = "waiting for your approval"
        self.push_screen(self._approval, answered)

    def on_engine_event(self, msg: EngineEvent) -> None:
        ev, status, chat = msg.event, self.status, self.chat
        if isinstance(ev, DecodeProgress):
            status.prefill = None
            status.phase = "generating"
            status.figures = status.figures.with_progress(ev)
        elif isinstance(ev, PrefillProgress):
            status.prefill = (ev.done, ev.total)
            status.phase = "reading"
        elif isinstance(ev, TurnStats):
            status.prefill = None
            status.figures = status.figures.with_stats(ev.stats)
        elif isinstance(ev, SpeculationChanged):
            spec = "on" if ev.enabled else "auto-off"
            status.figures = replace(status.figures, spec=spec, k=ev.k, reason=ev.reason)
        elif isinstance(ev, AssistantMessage):
            chat.end_turn(ev.text)
        elif isinstance(ev, ToolCallStarted):
            status.phase = f"running {ev.name}"
            chat.tool_started(ev.call_id, ev.name, ev.arguments)
        elif isinstance(ev, ToolCallFinished):
            chat.tool_finished(ev.call_id, ev.name, ev.ok, ev.output)
        elif isinstance(ev, (GitAction, Warning, ApprovalRequired, AgentResult, CheckRun)):
            self._note_event(ev)

    def _note_event(self, ev: Any) -> None:
        chat = self.chat
        if isinstance(ev, GitAction):
            chat.add_note(f"git: {ev.message}")
        elif isinstance(ev, CheckRun):  # failures only: the chat stays about the work
            if not ev.ok:
                chat.add_note(check_line(ev), "warn")
        elif isinstance(ev, Warning):
            quiet = isinstance(ev, ContextAttached) and not ev.left_out  # (nothing left out)
            chat.add_note(warning_line(ev), "note" if quiet else "warn")
        elif isinstance(ev, ApprovalRequired):
            chat.add_note(f"approval required for {ev.name}: {shown(ev.reason, keep_newlines=False)}", "warn")
        elif isinstance(ev, AgentResult):
            self.last_result = ev
            said = stop_line(ev.stop_reason, ev.error if ev.is_error else "")
            if said:
                chat.add_note(said, "error" if said.startswith("error:") else "warn")

    def on_job_done(self, msg: JobDone) -> None:
        self.pending -= 1
        status = self.status
        status.git = msg.git
        self._files = None  # the repository may have changed
        if msg.error:
            self.chat.add_note(f"{msg.kind} failed: {msg.error}", "error")
        elif msg.kind == "slash":
            self._apply(*msg.reply)
        elif msg.kind == "shell":
            code, output = msg.reply
            self.chat.add_note(f"exit code {code} (added to the conversation)\n{output.rstrip()}")
        if msg.kind == "load":
            self._show_settings()
            for notice in self.runtime.notices:  # what starting the MCP servers reported
                self.chat.add_note(f"warning: {notice}", "warn")
            self.runtime.notices.clear()
        if not self.busy and self.queued:
            self._dispatch(self.queued.pop(0))
        if not self.busy:
            self.prompt.cursor_blink = True
            status.phase = "" if not (msg.error and msg.kind == "load") else "no model"
            status.prefill = None
            if self._approval is not None:
                self._approval.dismiss("no")


def run_tui(runtime: Any) -> int:
    """Run the TUI until the user quits; returns the exit code (0 unless the App failed)."""
    app = AgentApp(runtime)
    try:
        app.run()
    finally:
        app.engine.stop()
        if app.engine_started:
            app.engine.finished.wait(SHUTDOWN_WAIT_S)
        if app.engine_tid:
            wait_thread_gone(app.engine_tid)
        runtime.close()
    return app.return_code or 0


def wait_thread_gone(native_id: int, timeout_s: float = 2.0) -> None:
    """Wait until an ended thread has really exited. A thread that used MLX runs MLX's
    thread-exit hooks after Python's join() returns; they take the GIL, and if the interpreter
    is shutting down by then the process aborts ("terminate called without an active
    exception"). Linux shows live threads in /proc; elsewhere a short pause does."""
    task = Path(f"/proc/self/task/{native_id}")
    if not task.parent.is_dir():
        time.sleep(0.2)
        return
    end = time.monotonic() + timeout_s
    while task.exists() and time.monotonic() < end:
        time.sleep(0.01)

"""The plain interactive UI (`spec-agent --plain`): a prompt-toolkit REPL with a live meter.

`Repl.handle_line(line)` does one input — a `/command` (agent.ui.slash), a `!command`
(agent.ui.inputs), or a message (`@path` mentions attached) — and writes to a given stream;
`run_repl` is the thin prompt loop around it. All engine work (loading models, `send`, slash
commands) runs on one worker thread, because MLX state is per-thread; the calling thread
shows events as they arrive. On a terminal a small prompt-toolkit application keeps the line
being streamed and the meter below the output, redrawn 4 times a second, and takes y/n/a for
approvals; elsewhere (tests, pipes) events are written as plain text and approvals read with
`ask`. Not here: Textual's full-screen UI, token colouring (/tokens), engine figures (the
engine computes them; the meter only shows them). Everything shown passes through `write`
(or, on a terminal, the live view's text from agent/ui/repl_text.py), which escapes what a
terminal would act on (agent/core/shown.py); a `!command`'s output loses its escape
sequences before it is shown or kept (`plain_output`).
"""

from __future__ import annotations

import asyncio
import queue
import re
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from prompt_toolkit import PromptSession
from prompt_toolkit.application import Application, run_in_terminal
from prompt_toolkit.completion import Completer, Completion
from prompt_toolkit.filters import Condition
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.layout import ConditionalContainer, HSplit, Layout, Window
from prompt_toolkit.layout.controls import FormattedTextControl
from prompt_toolkit.styles import Style

from ..cancel import CancelToken
from ..core.attach import attach
from ..core.shown import plain_output, shown
from ..events import AgentResult, ApprovalRequest
from . import custom_commands, free_mlx_streams, inputs, slash
from .repl_text import (Meter, Transcript, approval_question, approval_text, history_summary,
                        parse_answer)

KEYS_HINT = "Enter sends · Esc-Enter or Ctrl+J new line · /help · @file · !cmd · Ctrl+D quits"
DOUBLE_CTRL_C_S = 2.0
TYPEAHEAD_S = 0.3  # Ctrl+J this soon after the prompt appears was typed ahead as Enter


# ---- the REPL ----------------------------------------------------------------------------------

DONE = object()  # the engine thread finished a message


@dataclass
class Ask:
    """An approval the engine thread waits on; the UI thread sets `box`."""

    request: ApprovalRequest
    box: Future = field(default_factory=Future)


class Repl:
    """One REPL: the runtime, the engine thread, the meter, and what each input line does.

    `out` receives everything shown; `ask(question)` returns a typed approval answer in plain
    mode; `live(repl, events, cancel, transcript)` (the terminal view) consumes one message's
    events instead of the plain writer when given."""

    def __init__(self, runtime: Any, out: IO[str] | None = None, *,
                 ask: Callable[[str], str] | None = None, live: Callable[..., None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.rt, self.out = runtime, out or sys.stdout
        self.ask, self.live, self.clock = ask or input, live, clock
        self.engine = ThreadPoolExecutor(1, thread_name_prefix="spec-agent-engine")
        self.meter = Meter()
        self._events: queue.Queue | None = None
        self._last_interrupt = -1e9

    def write(self, text: str) -> None:
        """Show `text`, escaped for the terminal (the one way the REPL writes)."""
        if text:
            self.out.write(shown(text))
            self.out.flush()

    def on_engine(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn` on the engine thread and wait for it (Ctrl+C cannot stop a model load)."""
        job = self.engine.submit(fn, *args)
        while True:
            try:
                return job.result()
            except KeyboardInterrupt:
                self.write("\n(cannot interrupt this; waiting for it to finish)\n")

    def start(self) -> None:
        """Load models if needed, open or summarise the conversation, take over approvals."""
        rt = self.rt
        if rt.model is None:
            self.write(f"loading {Path(str(rt.cfg.model)).name}…\n")
            self.engine.submit(rt.load).result()  # Ctrl+C here ends the program
        if rt.conversation is None:
            self.on_engine(rt.new_conversation)
        elif rt.conversation.user_messages:
            self.write(history_summary(rt.conversation))
        for warning in custom_commands.warnings(rt.root):
            self.write(f"warning: {warning}\n")
        rt.set_approver(self._approve)
        self.refresh()

    def refresh(self) -> None:
        """Re-read the workspace figures the meter shows (not the engine's)."""
        m, rt = self.meter, self.rt
        m.model, m.draft = Path(str(rt.model_name)).name, rt.draft_name
        m.mode, m.setting = rt.cfg.approval_mode, rt.cfg.speculation
        m.branch, m.dirty = rt.git_info()

    def interrupted(self) -> bool:
        """Ctrl+C at an empty prompt: True when it is the second one within 2 s (leave)."""
        now = self.clock()
        second = now - self._last_interrupt <= DOUBLE_CTRL_C_S
        self._last_interrupt = now
        return second

    def close(self) -> None:
        """Stop the engine thread. MLX streams must be freed on the thread that made them,
        or the process aborts at exit ("terminate called without an active exception")."""
        self.engine.submit(free_mlx_streams).result()
        self.engine.shutdown(wait=True)
        self.rt.close()  # the MCP servers

    # ---- one input line ----------------------------------------------------------------------

    def handle_line(self, line: str) -> bool:
        """Do one input; False when the REPL should end."""
        text = line.strip()
        if not text:
            return True
        if text.startswith("/"):
            return self._slash(text)
        if text.startswith("!"):
            self._shell(text[1:].strip())
            return True
        got = attach(text, self.rt.ctx)
        if got.paths:
            self.write(f"({got.attached_line()})\n")
        self.send(got.text, summary=text)
        return True

    def _slash(self, line: str) -> bool:
        reply = self.on_engine(slash.run, self.rt, line)  # /model and /draft load weights
        if reply.action == "send" and not reply.error:  # a custom command: its text is the message,
            self.send(reply.text, summary=line)  # never a `!command`, whatever it starts with
            return True
        if reply.text:
            self.write(("error: " if reply.error else "") + reply.text.rstrip("\n") + "\n")
        if reply.action == "quit":
            return False
        if reply.action == "clear":
            self.write("─" * 60 + "\n")
            self.meter = Meter()
        elif reply.action == "tokens":
            self.write("/tokens colours tokens by source in the full-screen UI only\n")
        self.refresh()
        return True

    def _shell(self, command: str) -> None:
        if not command:
            self.write("usage: !command (runs it in the repository; its output goes to the agent)\n")
            return
        try:
            code, output = inputs.run_user_command(command, self.rt.root, self.rt.cfg.shell_timeout_s)
        except KeyboardInterrupt:
            self.write("\n(interrupted; nothing added to the conversation)\n")
            return
        output = plain_output(output)  # colours and progress redraws: not for the model or history
        self.write(output if output.endswith("\n") or not output else output + "\n")
        self.write(f"(exit code {code}; output added to the conversation)\n")
        self.rt.conversation.add_note(inputs.shell_note(command, code, output))
        self.refresh()

    # ---- sending -----------------------------------------------------------------------------

    def send(self, text: str, summary: str = "") -> AgentResult | None:
        """Run one message on the engine thread and show its events as they arrive."""
        cancel, events, transcript = CancelToken(), queue.Queue(), Transcript()
        self._events = events
        self.meter.since = self.clock()
        job = self.engine.submit(self._drive, self.rt.conversation, text, cancel, events, summary)
        try:
            if self.live is not None:
                self.live(self, events, cancel, transcript)
            else:
                self._consume(events, cancel, transcript)
        finally:
            if not job.done():  # the view failed: stop the message, answer what it asks
                cancel.cancel()
                self._drain(events)
            self._events, self.meter.since, self.meter.phase = None, 0.0, ""
            self.meter.cancelling = False
        job.result()  # an engine failure surfaces here, on the UI thread
        self.write(transcript.summary())
        self.refresh()
        return transcript.result

    @staticmethod
    def _drive(conv: Any, text: str, cancel: CancelToken, events: queue.Queue, summary: str = "") -> None:
        try:
            for ev in conv.send(text, cancel, summary):
                events.put(ev)
        finally:
            events.put(DONE)

    def _approve(self, request: ApprovalRequest) -> str:
        """The conversation's approver; runs on the engine thread, answered by the UI thread."""
        events = self._events
        if events is None:
            return "no"
        ask = Ask(request)
        events.put(ask)
        return ask.box.result()

    def _consume(self, events: queue.Queue, cancel: CancelToken, transcript: Transcript) -> None:
        """Plain mode: write events as they arrive; Ctrl+C cancels the message."""
        while True:
            item = None
            try:
                item = events.get(timeout=0.25)
                if item is DONE:
                    return
                if isinstance(item, Ask):
                    self.write(transcript.line(approval_text(item.request)))
                    item.box.set_result(self._ask_plain(item.request, cancel))
                    continue
                self.meter.update(item)
                self.write(transcript.render(item))
            except queue.Empty:
                continue
            except KeyboardInterrupt:
                cancel.cancel()
                self.meter.cancelling = True
                if isinstance(item, Ask) and not item.box.done():
                    item.box.set_result("no")
                self.write("\n(cancelling…)\n")

    def _ask_plain(self, request: ApprovalRequest, cancel: CancelToken) -> str:
        while True:
            try:
                typed = self.ask(approval_question(request))
            except EOFError:
                cancel.cancel()
                return "no"
            answer = parse_answer(typed, request.can_always)
            if answer is not None:
                return answer
            self.write("answer y or n" + (" or a" if request.can_always else "") + "\n")

    def _drain(self, events: queue.Queue) -> None:
        """Wait for a cancelled message to end, declining any approval it still asks for."""
        while True:
            item = events.get()
            if item is DONE:
                return
            if isinstance(item, Ask):
                item.box.set_result("no")


# ---- the terminal ------------------------------------------------------------------------------


class LiveView:
    """One message on a terminal: a prompt-toolkit application below the output that shows
    the unfinished line, an approval question, and the meter (redrawn 4 times a second).
    Finished lines are printed above it; y/n/a answer approvals; Ctrl+C or Esc cancels."""

    def __init__(self, repl: Repl, events: queue.Queue, cancel: CancelToken, transcript: Transcript):
        self.repl, self.events, self.cancel, self.transcript = repl, events, cancel, transcript
        self.partial = ""  # streamed text not yet ended by a newline
        self.asking: Ask | None = None

    def run(self) -> None:
        def meter():
            return [("class:bottom-toolbar", " " + self.repl.meter.text())]

        rows = HSplit([
            ConditionalContainer(Window(FormattedTextControl(lambda: self.partial), wrap_lines=True,
                                        dont_extend_height=True), Condition(lambda: bool(self.partial))),
            ConditionalContainer(Window(FormattedTextControl(self._question), height=1),
                                 Condition(lambda: self.asking is not None)),
            Window(FormattedTextControl(meter), height=1, style="class:bottom-toolbar"),
        ])
        app = Application(layout=Layout(rows), key_bindings=self._keys(),
                                       refresh_interval=0.25, erase_when_done=True, style=STYLE)
        app.run(pre_run=lambda: app.create_background_task(self._pump(app)))

    def _question(self) -> list[tuple[str, str]]:
        return [("class:question", approval_question(self.asking.request))] if self.asking else []

    def _keys(self) -> KeyBindings:
        kb = KeyBindings()
        asking = Condition(lambda: self.asking is not None)
        can_always = Condition(lambda: self.asking is not None and self.asking.request.can_always)

        @kb.add("c-c")
        @kb.add("<sigint>")
        @kb.add("escape")
        def _cancel(event) -> None:
            self.cancel.cancel()
            self.repl.meter.cancelling = True
            if self.asking is not None:
                self._answer("no")

        for key, answer, when in (("y", "yes", asking), ("n", "no", asking), ("a", "always", can_always)):
            kb.add(key, filter=when)(lambda event, a=answer: self._answer(a))
        return kb

    def _answer(self, answer: str) -> None:
        ask, self.asking = self.asking, None
        self.partial += f"→ {answer}\n"
        self.repl.meter.phase = "thinking"
        ask.box.set_result(answer)

    async def _pump(self, app) -> None:
        """Move the engine's events into the view; end the application after the last one."""
        done = False
        while not done:
            while not done:
                try:
                    item = self.events.get_nowait()
                except queue.Empty:
                    break
                done = self._take(item)
            lines = self._finished_lines(app.output.get_size().columns, done)
            if lines:
                await run_in_terminal(lambda text=lines: self.repl.write(text))
            app.invalidate()
            if not done:
                await asyncio.sleep(0.05)
        app.exit()

    def _take(self, item: Any) -> bool:
        """Add one engine item to the view; True for the end of the message."""
        if item is DONE:
            return True
        if isinstance(item, Ask):
            self.partial += self.transcript.line(approval_text(item.request))
            self.asking, self.repl.meter.phase = item, "waiting for approval"
            if self.cancel.cancelled:
                self._answer("no")
            return False
        self.repl.meter.update(item)
        self.partial += self.transcript.render(item)
        return False

    def _finished_lines(self, width: int, done: bool) -> str:
        """Take the lines ready to print above the view (all of them at the end); a line
        longer than the terminal is broken at a space so the view stays small."""
        if done:
            out = self.partial + ("" if not self.partial or self.partial.endswith("\n") else "\n")
            self.partial = ""
            return out
        cut = self.partial.rfind("\n") + 1
        out, rest = self.partial[:cut], self.partial[cut:]
        while len(rest) >= max(width, 20):
            at = rest.rfind(" ", 0, width) + 1 or width
            out, rest = out + rest[:at].rstrip() + "\n", rest[at:]
        self.partial = rest
        return out


def live_consumer(repl: Repl, events: queue.Queue, cancel: CancelToken, transcript: Transcript) -> None:
    LiveView(repl, events, cancel, transcript).run()


STYLE = Style.from_dict({"bottom-toolbar": "reverse", "question": "bold", "prompt": "bold"})


class ReplCompleter(Completer):
    """Completes `/commands` at the start of the input and `@paths` (fuzzy) anywhere."""

    MENTION_AT_END = re.compile(r"(?<![\w@])@([\w./\-]*)$")

    def __init__(self, ctx: Any, ttl_s: float = 5.0):
        self.ctx, self.ttl_s = ctx, ttl_s
        self._files: list[str] = []
        self._read_at = -1e9

    def files(self) -> list[str]:
        if time.monotonic() - self._read_at > self.ttl_s:  # a repository's file list, briefly cached
            self._files, self._read_at = inputs.repo_files(self.ctx), time.monotonic()
        return self._files

    def get_completions(self, document, complete_event) -> Iterator[Completion]:
        text = document.text_before_cursor
        if text.startswith("/") and not any(c.isspace() for c in text):
            commands = slash.available(self.ctx.root)
            for name in slash.complete(text, self.ctx.root):
                yield Completion(name, -len(text), display_meta=commands[name[1:]].help)
            return
        m = self.MENTION_AT_END.search(text)
        if m:
            for path in inputs.fuzzy_files(m.group(1), self.files()):
                yield Completion("@" + path, -len(m.group(0)))


def prompt_session(repl: Repl) -> PromptSession:
    """The input line: history file, completion, Enter sends, Esc-Enter / Ctrl+J add a line,
    the meter and the keys in the bottom toolbar."""
    from ..store import home

    home().mkdir(parents=True, exist_ok=True)
    kb = KeyBindings()

    shown = [0.0]  # when the prompt appeared

    @kb.add("escape", "enter")
    @kb.add("c-j")
    def _newline(event) -> None:
        if event.data == "\n" and time.monotonic() - shown[0] < TYPEAHEAD_S:
            event.current_buffer.validate_and_handle()  # Enter typed ahead: the tty made it \n
        else:
            event.current_buffer.insert_text("\n")

    @kb.add("c-c", filter=Condition(lambda: bool(session.default_buffer.text)))
    def _clear(event) -> None:  # Ctrl+C on a typed line clears it; on an empty one it counts
        event.current_buffer.reset()

    def toolbar():
        return [("class:bottom-toolbar", f" {repl.meter.text()}\n {KEYS_HINT}")]

    session = PromptSession([("class:prompt", "› ")], history=FileHistory(str(home() / "repl_history")),
                            completer=ReplCompleter(repl.rt.ctx), complete_while_typing=True,
                            bottom_toolbar=toolbar, key_bindings=kb, style=STYLE,
                            prompt_continuation="  ")
    session.mark_shown = lambda: shown.__setitem__(0, time.monotonic())
    return session


def run_repl(runtime: Any) -> int:
    """The plain interactive UI; returns the exit code (0 after /quit, Ctrl+D or Ctrl+C twice)."""
    repl = Repl(runtime, sys.stdout, live=live_consumer if sys.stdout.isatty() else None)
    try:
        repl.start()
        repl.write(f"spec-agent REPL in {runtime.root} ({repl.meter.model}). {KEYS_HINT}\n")
        session = prompt_session(repl)
        while True:
            try:
                line = session.prompt(pre_run=session.mark_shown)
            except KeyboardInterrupt:
                if repl.interrupted():
                    return 0
                repl.write("(Ctrl+C again within 2 s, Ctrl+D or /quit leaves)\n")
                continue
            except EOFError:
                return 0
            if not repl.handle_line(line):
                return 0
    finally:
        repl.close()

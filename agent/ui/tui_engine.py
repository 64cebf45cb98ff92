"""The TUI's engine thread: the one place where the model runs while the TUI is up.

`EngineBridge` owns a job queue that one long-lived thread (the App's `@work(thread=True)`
worker) drains in order: loading the models, sending a message, `!commands`, slash commands
that touch the runtime. MLX keeps per-thread state, so every model call happens on that
thread. Results go back to the App as Textual messages: text deltas are batched (one post
per `STREAM_EVERY_S` at most) so that rendering does not compete with decoding; every other
event is posted as it comes. The approver blocks this thread until the App's dialog answers
or the message is cancelled. Nothing here draws.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterable

from textual.message import Message

from ..cancel import CancelToken
from ..core.attach import attach
from ..core.shown import plain_output
from ..events import AgentResult, ApprovalRequest, Event, TextDelta
from . import free_mlx_streams, inputs

STREAM_EVERY_S = 0.1  # streamed text reaches the view at most ~10 times a second
APPROVAL_POLL_S = 0.1  # how often a waiting approver checks for a cancel

Span = tuple[str, str]  # (text, source) with source one of agent.events.SOURCES


class Streamed(Message):
    """A batch of streamed assistant text, with the token sources behind each span."""

    def __init__(self, text: str, spans: tuple[Span, ...]) -> None:
        super().__init__()
        self.text, self.spans = text, spans


class EngineEvent(Message):
    """Any conversation event other than text (progress, tool calls, stats, the result)."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class Note(Message):
    """A line for the conversation view that is not an event (e.g. attached files)."""

    def __init__(self, text: str, kind: str = "note") -> None:
        super().__init__()
        self.text, self.kind = text, kind


class ApprovalAsked(Message):
    """The approver waits for an answer: the App puts "yes" | "no" | "always" in `answer`."""

    def __init__(self, request: ApprovalRequest, answer: queue.Queue) -> None:
        super().__init__()
        self.request, self.answer = request, answer


class JobDone(Message):
    """A job finished: `reply` is what it returned, `error` its failure ('' if none), `git`
    the repository's (branch, dirty files) afterwards."""

    def __init__(self, kind: str, reply: Any, error: str, git: tuple[str, int]) -> None:
        super().__init__()
        self.kind, self.reply, self.error, self.git = kind, reply, error, git


def token_spans(delta: TextDelta, decode: Callable[[list[int]], str] | None) -> list[Span]:
    """`delta.text` cut into (text, source) spans, one per run of tokens from one source.

    A delta of one source is one span. A mixed delta is cut where its tokens' own texts end
    (`decode` of each token); when those do not add up to the text (a multi-byte character
    split across tokens) or there is no tokenizer, the cuts are spread evenly."""
    srcs = delta.sources
    if not srcs or len(set(srcs)) == 1:
        return [(delta.text, srcs[0] if srcs else "target")] if delta.text else []
    pieces = [decode([t]) for t in delta.tokens] if decode is not None else []
    if "".join(pieces) != delta.text:
        n, size = len(srcs), len(delta.text)
        pieces = [delta.text[i * size // n:(i + 1) * size // n] for i in range(n)]
    spans: list[Span] = []
    for piece, src in zip(pieces, srcs):
        if spans and spans[-1][1] == src:
            spans[-1] = (spans[-1][0] + piece, src)
        elif piece:
            spans.append((piece, src))
    return spans


class EngineBridge:
    """Jobs for the engine thread, and the approver that runs on it.

    `post` delivers a Textual message to the App (thread-safe: `App.post_message`)."""

    def __init__(self, runtime: Any, post: Callable[[Message], Any]) -> None:
        self.runtime, self.post = runtime, post
        self.jobs: queue.Queue = queue.Queue()
        self.cancel: CancelToken | None = None  # the running message's token
        self.stopping = threading.Event()
        self.finished = threading.Event()  # the engine thread has returned

    # ---- the thread ---------------------------------------------------------------------

    def submit(self, kind: str, fn: Callable[[], Any]) -> None:
        self.jobs.put((kind, fn))

    def run(self) -> None:
        """The engine thread's body: run jobs until `stop`."""
        try:
            while not self.stopping.is_set():
                job = self.jobs.get()
                if job is None:
                    return
                kind, fn = job
                reply, error = None, ""
                try:
                    reply = fn()
                except Exception as e:  # noqa: BLE001 - the engine thread must outlive a failed job
                    error = str(e) or type(e).__name__
                self.post(JobDone(kind, reply, error, self.runtime.git_info()))
        finally:
            free_mlx_streams()  # the thread's MLX streams go with it
            self.finished.set()

    def stop(self) -> None:
        """Cancel what runs, answer a waiting approval "no", and end the thread."""
        self.stopping.set()
        if self.cancel is not None:
            self.cancel.cancel()
        self.jobs.put(None)

    # ---- jobs -----------------------------------------------------------------------------

    def send(self, text: str, cancel: CancelToken) -> AgentResult | None:
        """Run one user message (with its @mentions attached) and stream its events."""
        if self.runtime.model is None:
            raise RuntimeError("no model is loaded (/model <ref> loads one)")
        got = attach(text, self.runtime.ctx)
        if got.paths:
            self.post(Note(got.attached_line()))
        self.cancel = cancel
        try:
            return self._stream(self.runtime.conversation.send(got.text, cancel))
        finally:
            self.cancel = None

    def _stream(self, events: Iterable[Event]) -> AgentResult | None:
        session = getattr(self.runtime, "session", None)
        tokenizer = getattr(session, "tokenizer", None)
        decode = tokenizer.decode if tokenizer is not None else None
        text: list[str] = []
        spans: list[Span] = []
        last, result = 0.0, None

        def flush() -> None:
            if text:
                self.post(Streamed("".join(text), tuple(spans)))
                text.clear()
                spans.clear()

        for ev in events:
            if isinstance(ev, TextDelta):
                text.append(ev.text)
                spans.extend(token_spans(ev, decode))
                now = time.monotonic()
                if now - last >= STREAM_EVERY_S:
                    flush()
                    last = now
                continue
            flush()
            if isinstance(ev, AgentResult):
                result = ev
            self.post(EngineEvent(ev))
        flush()
        return result

    def shell(self, command: str) -> tuple[int, str]:
        """The user's `!command`: run it and add its output, escape sequences taken out, to
        the conversation."""
        rt = self.runtime
        code, output = inputs.run_user_command(command, rt.root, rt.cfg.shell_timeout_s)
        output = plain_output(output)
        rt.conversation.add_note(inputs.shell_note(command, code, output))
        return code, output

    # ---- approvals (called by the conversation, on this thread) ---------------------------

    def approve(self, request: ApprovalRequest) -> str:
        """Ask the App and wait for its answer; "no" when the message is cancelled."""
        answer: queue.Queue = queue.Queue()
        self.post(ApprovalAsked(request, answer))
        while True:
            try:
                return answer.get(timeout=APPROVAL_POLL_S)
            except queue.Empty:
                cancel = self.cancel
                if self.stopping.is_set() or (cancel is not None and cancel.cancelled):
                    return "no"

"""Headless runs (`-p`, `--input-format stream-json`): one task, or user messages line by line.

A headless conversation is saved like an interactive one (agent/core/history.py), so
`-c`/`--continue` and `--resume ID` pick it up again with `-p`; the prefix cache (memory within
a process, disk across processes) makes the resumed history cheap to re-read.

`--input-format stream-json` reads Claude Code's input lines from stdin: `{"type": "user",
"message": {"role": "user", "content": "..." | [{"type": "text", "text": "..."}]}}` runs one
message (each gets its own `result`), and `{"type": "control_request", "request_id",
"request": {"subtype": "initialize" | "interrupt"}}` is answered with a `control_response`
(interrupt cancels the message being run). A reader thread answers control requests while a
message runs. The exit code is the last message's (agent/exit_codes.py).
"""

from __future__ import annotations

import queue
import sys
import threading
from typing import IO, Any, Iterator

from .config import Config, ConfigError
from .engine.bounded import InputError, loads_json
from .exit_codes import for_stop_reason

EXIT_USAGE = 2
MAX_LINE = 16 << 20  # characters of one stream-json input line


class _LockedOut:
    """A text stream whose writes go through the line writer's lock."""

    def __init__(self, write):
        self._write = write

    def write(self, text: str) -> int:
        with self._write.lock:
            self._write.out.write(text)
        return len(text)

    def flush(self) -> None:
        with self._write.lock:
            self._write.out.flush()


def user_text(obj: dict[str, Any]) -> str:
    """The text of a stream-json user message; ValueError says what is wrong with it."""
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str) and content.strip():
        return content
    if isinstance(content, list) and content:
        texts = []
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "text" \
                    or not isinstance(block.get("text"), str):
                kind = block.get("type") if isinstance(block, dict) else type(block).__name__
                raise ValueError(f"only text content blocks are supported, got {kind!r}")
            texts.append(block["text"])
        if "".join(texts).strip():
            return "\n".join(texts)
    raise ValueError("a user message needs message.content: a non-empty string or text blocks")


class StreamInput:
    """stdin's stream-json lines: user messages queue up, control requests are answered."""

    def __init__(self, stdin: IO[str], write):
        self.stdin, self.write = stdin, write
        self.inbox: queue.Queue = queue.Queue()
        self.cancel: Any = None  # the CancelToken of the message being run
        self.error = ""
        threading.Thread(target=self._read, name="stream-json-input", daemon=True).start()

    def _read(self) -> None:
        """Every line into `_line`; always ends with one "eof" or "error" in the inbox (the
        main thread waits on it), whatever the input does."""
        try:
            for n, line in enumerate(iter(lambda: self.stdin.readline(MAX_LINE + 1), ""), 1):
                if len(line) > MAX_LINE:
                    self.inbox.put(("error", f"stdin line {n}: longer than {MAX_LINE} characters"))
                    return
                if not line.strip():
                    continue
                problem = self._line(n, line)
                if problem:
                    self.inbox.put(("error", f"stdin line {n}: {problem}"))
                    return
        except (OSError, UnicodeDecodeError, ValueError) as e:
            self.inbox.put(("error", f"cannot read stdin: {' '.join(str(e).split())}"))
            return
        except Exception as e:  # noqa: BLE001 - a dead reader would leave the run waiting forever
            self.inbox.put(("error", f"cannot read stdin: {type(e).__name__}"))
            return
        self.inbox.put(("eof", None))

    def _line(self, n: int, line: str) -> str:
        """Handle one line; '' or what is wrong with it."""
        try:
            obj = loads_json(line, f"stdin line {n}", max_bytes=4 * MAX_LINE)
        except InputError as e:
            return e.why
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "user":
            try:
                self.inbox.put(("user", user_text(obj)))
            except ValueError as e:
                return str(e)
        elif kind == "control_request":
            self._control(obj)
        elif kind not in ("control_response", "control_cancel_request", "keep_alive"):
            return f"unknown message type {kind!r} (expected 'user' or 'control_request')"
        return ""

    def _control(self, obj: dict[str, Any]) -> None:
        request = obj.get("request") if isinstance(obj.get("request"), dict) else {}
        rid, subtype = obj.get("request_id", ""), request.get("subtype")
        if subtype == "interrupt":
            if self.cancel is not None:
                self.cancel.cancel()
        if subtype in ("initialize", "interrupt"):
            body = {"commands": [], "models": []} if subtype == "initialize" else {}
            response = {"subtype": "success", "request_id": rid, "response": body}
        else:
            response = {"subtype": "error", "request_id": rid,
                        "error": f"spec-agent does not support the control request {subtype!r}"}
        self.write({"type": "control_response", "response": response})

    def messages(self) -> Iterator[str]:
        while True:
            kind, value = self.inbox.get()
            if kind != "user":
                self.error = value if kind == "error" else ""
                return
            yield value


def _renderer(args, runtime, conversation, write, err):
    from . import __version__
    from .ui.render import Renderer
    from .ui.stream_json import StreamJsonRenderer

    fmt = getattr(args, "output_format", "text")
    if fmt != "stream-json":
        return Renderer(fmt, _LockedOut(write), err, bool(getattr(args, "stats", False)))
    r = StreamJsonRenderer(write, conversation.id, runtime.model_name)
    from .core.prompt import tools_for

    tools = sorted(tools_for(runtime.cfg.edit_format))
    r.init(str(runtime.root), tools, runtime.cfg.approval_mode, __version__)
    return r


def _run_messages(runtime, args, task: str | None, inbox, write, model) -> tuple[int, int]:
    """Each message through one conversation; (the last run's exit code, messages run)."""
    from .cancel import CancelOnSigint, CancelToken

    if model is None:
        runtime.load()
    resume = "last" if getattr(args, "continue_last", False) else getattr(args, "resume", None)
    conversation = runtime.resume(resume) if resume else runtime.new_conversation()
    renderer = _renderer(args, runtime, conversation, write, sys.stderr)
    code, ran = 0, 0
    for text in (inbox.messages() if inbox is not None else [task or ""]):
        cancel = CancelToken()
        if inbox is not None:
            inbox.cancel = cancel
        result = None
        with CancelOnSigint(cancel):
            for ev in conversation.send(text, cancel):
                renderer.handle(ev)
                result = ev
        code, ran = for_stop_reason(getattr(result, "stop_reason", "")), ran + 1
    if inbox is not None and (inbox.error or not ran) and hasattr(renderer, "input_error"):
        renderer.input_error(inbox.error or "no user message on stdin")
    return code, ran


def run_headless(task: str | None, args, cfg: Config, model=None,
                 stdin: IO[str] | None = None) -> int:
    """Run `task` (or, with `--input-format stream-json`, every user message on stdin) in a
    new conversation or the one `--continue` / `--resume ID` names; returns the exit code.
    `model` replaces the local engine (tests)."""
    from .config import workspace
    from .core.history import HistoryStore
    from .runtime import Runtime
    from .ui.stream_json import LineWriter

    root = workspace(args)
    write = LineWriter(sys.stdout)
    inbox = None
    if getattr(args, "input_format", "text") == "stream-json":
        inbox = StreamInput(stdin if stdin is not None else sys.stdin, write)
    runtime = Runtime(cfg, root, model=model, history=HistoryStore(root))
    try:
        code, ran = _run_messages(runtime, args, task, inbox, write, model)
    finally:
        runtime.close()  # the MCP servers
    if inbox is not None and (inbox.error or not ran):
        print(f"spec-agent: error: {inbox.error or 'no user message on stdin'}", file=sys.stderr)
        return EXIT_USAGE
    return code


def check_headless_flags(args) -> None:
    """Refuse flag combinations a headless run cannot honour (ConfigError: one line, exit 2)."""
    if getattr(args, "input_format", "text") == "stream-json" and args.prompt not in (None, "-"):
        raise ConfigError("--input-format stream-json reads the messages from stdin; "
                          "give no TASK to -p")
    if getattr(args, "continue_last", False) and getattr(args, "resume", None):
        raise ConfigError("give either -c/--continue or --resume ID, not both")
    if getattr(args, "system_prompt", None):
        raise ConfigError("--system-prompt: replacing the system prompt is not supported "
                          "(spec-agent's prompt describes its tools); only \"\" is accepted")

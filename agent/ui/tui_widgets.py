"""The TUI's widgets: the conversation view, the prompt input, the completion list and the
token-colour legend (the status bar is in tui_status.py).

Widgets only show what the App hands them (figures computed by the engine, events from the
engine thread); none of them calls the model or the runtime. Text that a model, tool, file or
server wrote is shown through `plain` (or `shown` for markdown and code): escaped for the
terminal (agent/core/shown.py) and never parsed as Rich or Textual markup.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Callable

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text
from textual import events
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Markdown, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from ..core.shown import shown

SOURCE_STYLES = {"target": "", "draft": "bold green", "lookup": "bold cyan", "forced": "magenta"}
MAX_OUTPUT_LINES = 30  # of a tool's output shown in its panel
UI_CPU_BUDGET = 0.03  # share of one core streamed-text rendering may take (see AssistantBlock)
RENDER_MIN_S, RENDER_MAX_S = 0.1, 1.0  # bounds of the time between two renders of a stream


def plain(text: str, style: str = "") -> Text:
    """`text` as the TUI shows it: control characters escaped, markup left as typed."""
    return Text(shown(text), style=style)


class Legend(Static):
    """The token-source colours, shown while token colouring is on."""

    DEFAULT_CSS = "Legend { height: 1; padding: 0 1; display: none; }"

    def on_mount(self) -> None:
        legend = Text("tokens: ")
        for src, style in SOURCE_STYLES.items():
            legend.append("■ " + src, style=style or "bold")
            legend.append("  ")
        self.update(legend)


# ---- input -----------------------------------------------------------------------------------


class Completions(OptionList):
    """Candidates for the word being typed (`/command`, `@file`), above the input."""

    DEFAULT_CSS = """
    Completions { height: auto; max-height: 8; display: none; border: none; padding: 0 1; }
    """

    def show(self, candidates: list[tuple[str, str]]) -> None:
        """(value, label) pairs; hides the list when there are none."""
        self.clear_options()
        self.add_options([Option(plain(label), id=value) for value, label in candidates])
        self.display = bool(candidates)
        if candidates:
            self.highlighted = 0

    def chosen(self) -> str | None:
        if not self.display or self.highlighted is None:
            return None
        return self.get_option_at_index(self.highlighted).id


class PromptInput(TextArea):
    """The multiline prompt: Enter sends, Shift+Enter or Ctrl+J inserts a newline, Up/Down on
    the first/last line walk the history; Tab/Enter/Up/Down/Esc drive the completion list."""

    DEFAULT_CSS = """
    PromptInput { height: auto; min-height: 3; max-height: 10; }
    """

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, **kw: Any) -> None:
        super().__init__(soft_wrap=True, tab_behavior="focus", **kw)
        self.sent: list[str] = []  # what was sent, oldest first
        self._pos: int | None = None  # index into `sent` while walking it
        self._draft = ""  # what was typed before walking the history
        self.popup: Completions | None = None
        # (text before the cursor, cursor on the first line) -> (value, label) candidates
        self.completer: Callable[[str, bool], list[tuple[str, str]]] | None = None

    def remember(self, text: str) -> None:
        """Add a sent `text` to the history and empty the input."""
        if text and (not self.sent or self.sent[-1] != text):
            self.sent.append(text)
        self._pos = None
        self.load_text("")

    def _walk(self, step: int) -> None:
        if self._pos is None:
            if step > 0:
                return
            self._draft, self._pos = self.text, len(self.sent)
        self._pos = max(0, self._pos + step)
        if self._pos >= len(self.sent):
            self._pos = None
            self.load_text(self._draft)
        else:
            self.load_text(self.sent[self._pos])
        self.move_cursor(self.document.end)

    def word(self) -> str:
        """The word before the cursor."""
        row, col = self.cursor_location
        before = self.document.get_line(row)[:col]
        return before.split()[-1] if before.strip() and not before[-1].isspace() else ""

    def update_completions(self) -> None:
        """Offer completions for the word before the cursor (none when it is complete)."""
        if self.popup is None or self.completer is None:
            return
        row, col = self.cursor_location
        candidates = self.completer(self.document.get_line(row)[:col], row == 0)
        if len(candidates) == 1 and candidates[0][0] == self.word():
            candidates = []
        self.popup.show(candidates)

    def _accept(self) -> None:
        """Replace the word before the cursor with the highlighted completion."""
        value = self.popup.chosen() if self.popup is not None else None
        if value is not None:
            row, col = self.cursor_location
            self.replace(value + " ", (row, col - len(self.word())), (row, col))
        self.popup.display = False

    def _popup_key(self, key: str) -> bool:
        popup = self.popup
        if popup is None or not popup.display:
            return False
        if key in ("tab", "enter"):
            self.update_completions()  # the list may lag behind fast typing
            if not popup.display:
                return key == "tab"  # nothing to complete: Enter sends
            self._accept()
        elif key == "escape":
            popup.display = False
        elif key in ("up", "down"):
            popup.action_cursor_up() if key == "up" else popup.action_cursor_down()
        else:
            return False
        return True

    async def _on_key(self, event: events.Key) -> None:
        key, handled = event.key, True
        row, last = self.cursor_location[0], self.document.line_count - 1
        if self._popup_key(key):
            pass
        elif key == "enter":
            self.post_message(self.Submitted(self.text))
        elif key in ("shift+enter", "ctrl+j"):
            self.insert("\n")
        elif key == "up" and row == 0 and self.sent:
            self._walk(-1)
        elif key == "down" and row == last and self._pos is not None:
            self._walk(+1)
        else:
            handled = False
        if handled:
            event.stop()
            event.prevent_default()  # TextArea's own handler (which inserts) is skipped


# ---- the conversation view ------------------------------------------------------------------


def call_summary(name: str, args: dict[str, Any]) -> Text:
    """A tool call's arguments as one short block (the command, the path, or JSON)."""
    if name == "run_shell":
        return plain("$ " + str(args.get("command", "")), style="bold")
    if name == "edit_file":
        edits = args.get("edits", [])
        return plain(f"{args.get('path', '')} ({len(edits) if isinstance(edits, list) else '?'} edit(s))")
    if name == "write_file":
        lines = str(args.get("content", "")).count("\n") + 1
        return plain(f"{args.get('path', '')} ({lines} lines)")
    return plain(json.dumps(args, ensure_ascii=False)[:300])


def clip(text: str, n: int = MAX_OUTPUT_LINES) -> str:
    lines = text.rstrip("\n").splitlines()
    return "\n".join(lines[:n] + ([f"… {len(lines) - n} more lines"] if len(lines) > n else []))


def diff_syntax(diff: str) -> Syntax:
    return Syntax(shown(diff.rstrip("\n")), "diff", theme="ansi_dark", word_wrap=True,
                  background_color="default")


def result_body(name: str, ok: bool, output: str) -> RenderableType:
    """A tool's result: an edit's diff highlighted, other output clipped, failures in red."""
    if not ok:
        return plain(clip(output), style="red")
    head, _, diff = output.partition("\n")
    if name in ("edit_file", "write_file") and diff.startswith("---"):
        return Group(plain(head, style="green"), diff_syntax(clip(diff, 60)))
    return plain(clip(output), style="dim")


class ToolPanel(Static):
    """One tool call: its name and arguments, then its result."""

    DEFAULT_CSS = "ToolPanel { margin: 0 0 1 0; }"

    def __init__(self, name: str, args: dict[str, Any]) -> None:
        super().__init__()
        self.tool, self.args = name, args
        self.update(Panel(call_summary(name, args), title=plain(name), title_align="left",
                          border_style="yellow"))

    def finish(self, ok: bool, output: str) -> None:
        result = result_body(self.tool, ok, output)
        shows_diff = isinstance(result, Group)  # an edit's "edited … :" line and its diff
        body = result if shows_diff else Group(call_summary(self.tool, self.args), result)
        self.update(Panel(body, title=plain(f"{self.tool} {'✓' if ok else '✗'}"), title_align="left",
                          border_style="green" if ok else "red"))


_FILE_OPEN = re.compile(r'<file path="([^"\n]+)">\n?')
_EXT_LANG = {".py": "python", ".js": "javascript", ".ts": "typescript", ".rs": "rust", ".go": "go",
             ".sh": "bash", ".json": "json", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml",
             ".md": "markdown", ".c": "c", ".h": "c", ".cpp": "cpp", ".java": "java", ".rb": "ruby",
             ".html": "html", ".css": "css"}


def reply_markdown(text: str) -> str:
    """A reply as the view renders it: a `<file path="...">…</file>` block (the form files are
    attached in, which models copy) becomes the path and a fenced code block; markdown would
    drop it as HTML or run its lines together. An unclosed block (still streaming) runs to
    the end."""
    if '<file path="' not in text:
        return text
    out, pos = [], 0
    for m in _FILE_OPEN.finditer(text):
        if m.start() < pos:
            continue
        end = text.find("</file>", m.end())
        body = text[m.end(): end if end >= 0 else len(text)].rstrip("\n")
        lang = _EXT_LANG.get(Path(m.group(1)).suffix.lower(), "")
        fence = "````" if "```" in body else "```"
        out += [text[pos:m.start()].rstrip(" "), f"\n\n**{m.group(1)}**\n{fence}{lang}\n{body}\n{fence}\n\n"]
        pos = end + len("</file>") if end >= 0 else len(text)
    out.append(text[pos:])
    return "".join(out)


class _Markdown(Markdown):
    def on_mount(self) -> None:
        if isinstance(self.parent, AssistantBlock):  # after Markdown's own (empty) first update
            self.call_later(self.parent.markdown_ready)


class AssistantBlock(Vertical):
    """One model turn's text: markdown while streaming, or coloured by token source.

    Rendering is throttled by its cost: the next render waits until the UI thread's CPU time
    since the previous one is at most `UI_CPU_BUDGET` of the time between them (10 Hz at
    most), so that drawing never takes a noticeable share of the CPU the model decodes on."""

    DEFAULT_CSS = """
    AssistantBlock { height: auto; margin: 0 0 1 0; }
    AssistantBlock Markdown { margin: 0; padding: 0; }
    AssistantBlock > Static { display: none; }
    AssistantBlock.tokens > Static { display: block; }
    AssistantBlock.tokens Markdown { display: none; }
    """

    def __init__(self, tokens: bool) -> None:
        self._md, self._plain = _Markdown(), Static()
        super().__init__(self._md, self._plain, classes="tokens" if tokens else "")
        self.text, self.spans = "", []  # everything streamed, and its (text, source) spans
        self.final: str | None = None  # the turn's text without tool-call markup
        self._ready = False  # the Markdown child is attached; what streamed before is shown then
        self._shown = 0  # characters of `text` the markdown shows
        self._timer: Timer | None = None
        self._next_at = 0.0  # monotonic time of the earliest next render
        self._cpu_mark = time.thread_time()

    def markdown_ready(self) -> None:
        self._ready = True
        self._show_all()

    @property
    def tokens(self) -> bool:
        return self.has_class("tokens")

    def stream(self, text: str, spans: tuple) -> None:
        self.text += text
        self.spans += spans
        if not self._ready or self._timer is not None:
            return
        delay = self._next_at - time.monotonic()
        if delay > 0:
            self._timer = self.set_timer(delay, self._draw_stream)
        else:
            self._draw_stream()

    def _draw_stream(self) -> None:
        self._timer = None
        cpu = time.thread_time()  # this is the UI thread
        spent, self._cpu_mark = cpu - self._cpu_mark, cpu
        wait = min(max(spent / UI_CPU_BUDGET, RENDER_MIN_S), RENDER_MAX_S)
        self._next_at = time.monotonic() + wait
        if self.tokens:
            self._show_spans()
        elif self._shown < len(self.text) and self.final is None:
            if '<file path="' in self.text:  # re-rendered whole: the block is shown as code
                self._md.update(shown(reply_markdown(self.text)))
            else:
                self._md.append(shown(self.text[self._shown:]))
            self._shown = len(self.text)

    def finish(self, text: str) -> None:
        self.final = text
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self._ready:
            self._show_all()

    def set_tokens(self, on: bool) -> None:
        self.set_class(on, "tokens")
        if self._ready:
            self._show_all()

    def _show_all(self) -> None:
        if self.tokens:
            self._show_spans()
        else:
            self._md.update(shown(reply_markdown(self.final if self.final is not None else self.text)))
            self._shown = len(self.text)

    def _show_spans(self) -> None:
        out = Text()
        for text, src in self.spans:
            out.append(shown(text), style=SOURCE_STYLES.get(src, ""))
        self._plain.update(out)


class ChatView(VerticalScroll):
    """The conversation: user messages, assistant turns, tool panels and notes."""

    DEFAULT_CSS = """
    ChatView { height: 1fr; padding: 0 1; }
    ChatView .user { color: $text; background: $boost; margin: 0 0 1 0; padding: 0 1; }
    ChatView .note { color: $text-muted; margin: 0 0 1 0; }
    ChatView .warn { color: $warning; margin: 0 0 1 0; }
    ChatView .error { color: $error; margin: 0 0 1 0; }
    """

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.tokens = False
        self.current: AssistantBlock | None = None
        self.panels: dict[str, ToolPanel] = {}

    def on_mount(self) -> None:
        self.anchor()  # follow new content until the user scrolls up

    def add_user(self, text: str) -> None:
        self.mount(Static(plain("> " + text), classes="user"))

    def add_note(self, text: RenderableType, kind: str = "note") -> None:
        """A line of text (shown plain and escaped) or a renderable built from `plain`."""
        self.mount(Static(plain(text) if isinstance(text, str) else text, classes=kind))

    def stream(self, text: str, spans: tuple) -> None:
        if self.current is None:
            self.current = AssistantBlock(self.tokens)
            self.mount(self.current)
        self.current.stream(text, spans)

    def end_turn(self, text: str) -> None:
        """The turn's final text (tool-call markup removed) replaces what streamed."""
        block, self.current = self.current, None
        if block is None:
            if text:
                block = AssistantBlock(self.tokens)
                block.finish(text)
                self.mount(block)
        elif not text and not block.tokens:
            block.remove()
        else:
            block.finish(text)

    def tool_started(self, call_id: str, name: str, args: dict[str, Any]) -> None:
        self.panels[call_id] = panel = ToolPanel(name, args)
        self.mount(panel)

    def tool_finished(self, call_id: str, name: str, ok: bool, output: str) -> None:
        panel = self.panels.pop(call_id, None)
        if panel is None:
            self.tool_started(call_id, name, {})
            panel = self.panels.pop(call_id)
        panel.finish(ok, output)

    def set_tokens(self, on: bool) -> None:
        self.tokens = on
        for block in self.query(AssistantBlock):
            block.set_tokens(on)

    def clear(self) -> None:
        self.current, self.panels = None, {}
        self.remove_children()

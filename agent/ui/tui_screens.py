"""The TUI's dialog and palette: the approval modal and the slash-command palette provider.

`ApprovalScreen` shows exactly what a tool call will do (the diff an edit would make before
it is applied, or the command and its directory) and dismisses with "yes" | "no" | "always".
`SlashCommands` lists every slash command in Textual's command palette. Neither runs a tool
or the model: the App passes the answer back to the engine thread. What a request or a
command file says is shown as plain text (`plain`: escaped, never parsed as markup).
"""

from __future__ import annotations

from functools import partial

from textual.app import ComposeResult
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from ..core.preview import describe_scope
from ..core.shown import shown
from ..events import ApprovalRequest
from . import slash
from .tui_widgets import diff_syntax, plain


class ApprovalScreen(ModalScreen[str]):
    """Approve one tool call: Yes (y), No (n, Esc), Always (a, when the request allows it)."""

    DEFAULT_CSS = """
    ApprovalScreen { align: center middle; }
    ApprovalScreen > Vertical {
        width: 90%; height: auto; max-height: 90%; border: thick $warning;
        background: $surface; padding: 0 1;
    }
    ApprovalScreen .title { text-style: bold; }
    ApprovalScreen .reason { color: $text-muted; }
    ApprovalScreen VerticalScroll { height: auto; max-height: 18; margin: 1 0; }
    ApprovalScreen Horizontal { height: auto; align: center middle; }
    ApprovalScreen Button { margin: 0 1; }
    """
    BINDINGS = [
        Binding("y", "answer('yes')", "Yes"),
        Binding("n,escape", "answer('no')", "No"),
        Binding("a", "answer('always')", "Always"),
    ]

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__()
        self.request = request

    def compose(self) -> ComposeResult:
        r = self.request
        what = "edit a file" if r.kind == "edit" else "run a command"
        with Vertical():
            yield Static(plain(f"The agent wants to {what}: {r.name}"), classes="title")
            yield Static(plain(f"why you are asked: {r.reason}"), classes="reason")
            with VerticalScroll():
                yield Static(diff_syntax(r.preview) if r.kind == "edit" else plain(r.preview))
            with Horizontal():
                yield Button("Yes (y)", id="yes", variant="success")
                yield Button("No (n)", id="no", variant="error")
                if r.can_always:
                    yield Button(plain(f"Always (a): {describe_scope(r.scope)}"), id="always")

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_answer(event.button.id or "no")

    def action_answer(self, answer: str) -> None:
        if answer == "always" and not self.request.can_always:
            return
        self.dismiss(answer)


class SlashCommands(Provider):
    """Every slash command in the command palette (Ctrl+P). Commands that take arguments
    put `/name ` in the input; the others run at once."""

    def _hits(self):
        """(label, help, action) per command; label and help escaped as markup, since the
        palette parses both (a command file's description and argument hint are its own)."""
        app = self.app
        for name, cmd in slash.available(app.runtime.root).items():
            label = escape(shown(f"/{name} {cmd.usage}".rstrip(), keep_newlines=False))
            yield label, escape(shown(cmd.help, keep_newlines=False)), partial(
                app.palette_command, name, bool(cmd.usage))

    async def discover(self) -> Hits:
        for label, help_text, run in self._hits():
            yield DiscoveryHit(Content.from_markup(label), run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for label, help_text, run in self._hits():
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), run, help=help_text)

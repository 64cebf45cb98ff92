"""The Textual UI driven with a Pilot: streaming, the status bar, approvals, cancel, slash
commands, completion, `!commands`, and SVG snapshots of the main screen and the approval
dialog at 100×30.

Snapshots: `tests/__snapshots__/test_tui/<name>.svg`; rerun with SNAPSHOT_UPDATE=1 to
rewrite them after a deliberate change (and look at them before committing). A mismatch
writes the new screen next to the snapshot as `<name>.actual.svg`.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from rich.console import Console
from scripted import SAMPLE, ScriptedModel, call, full_auto, git, make_repo

from agent.cancel import CancelToken
from agent.config import Config
from agent.core.backend import Capabilities
from agent.events import DecodeProgress, Event, GenerationStats, TextDelta
from agent.runtime import Runtime
from agent.ui.tui import AgentApp, wait_thread_gone
from agent.ui.tui_engine import token_spans
from agent.ui.tui_screens import ApprovalScreen
from agent.ui.tui_widgets import AssistantBlock, Completions

SIZE = (100, 30)
SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_tui"
EDIT = {"path": "calc.py", "edits": [{"old": "return a + b", "new": "return a + b  # sum"}]}


# ---- helpers ---------------------------------------------------------------------------------


def drive(app: AgentApp, scenario) -> None:
    """Run `scenario(pilot)` against `app` headless at 100×30."""

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: not app.busy)  # startup job (git status / model load)
            await scenario(pilot)

    asyncio.run(main())


async def until(pilot, cond, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for the UI")
        await pilot.pause(0.02)


async def say(pilot, text: str, wait: bool = True) -> None:
    """Type `text` into the prompt and press Enter; wait until the engine is idle again."""
    pilot.app.prompt.load_text(text)
    await pilot.press("enter")
    if wait:
        await until(pilot, lambda: not pilot.app.busy)
        await pilot.pause()


def screen_text(app: AgentApp) -> str:
    """The screen (modal included) as plain text."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      force_terminal=True, color_system="truecolor", legacy_windows=False)
    screen = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    console.print(screen)
    return console.export_text()


async def until_approval(pilot, app: AgentApp) -> None:
    """Until the approval dialog is up and drawn (on a loaded machine the screen is pushed a
    few frames before its first paint, and reads empty until then)."""
    await until(pilot, lambda: isinstance(app.screen, ApprovalScreen) and screen_text(app).strip())


def status_text(app: AgentApp) -> str:
    return app.status.render().plain


def assert_snapshot(app: AgentApp, name: str) -> None:
    """Compare an SVG screenshot with the stored one (SNAPSHOT_UPDATE=1 rewrites it)."""
    app.prompt.cursor_blink = False
    svg = re.sub(r"\bterminal-\d+-", "terminal-", app.export_screenshot())  # a content hash
    path = SNAPSHOTS / f"{name}.svg"
    actual = path.with_suffix(".actual.svg")
    if os.environ.get("SNAPSHOT_UPDATE") or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg)
        actual.unlink(missing_ok=True)
        if not os.environ.get("SNAPSHOT_UPDATE"):
            pytest.fail(f"no snapshot {path.name} yet: wrote it; check it and rerun")
        return
    if svg != path.read_text():
        actual.write_text(svg)
        pytest.fail(f"{name} differs from its snapshot; see {actual} (SNAPSHOT_UPDATE=1 accepts)\n"
                    + screen_text(app))
    actual.unlink(missing_ok=True)


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo", SAMPLE)


def scripted_app(repo: Path, turns: list, cfg: Config | None = None) -> AgentApp:
    model = turns if hasattr(turns, "generate") else ScriptedModel(turns)
    return AgentApp(Runtime(cfg or full_auto(), repo, model=model))


class FiguresModel:
    """One turn with known figures: a `DecodeProgress`, a pause until `go` is set, then the
    turn's `GenerationStats`."""

    capabilities = Capabilities()  # (agent/core/backend.py: nothing beyond turns)

    def __init__(self) -> None:
        self.go = threading.Event()

    def generate(self, messages, cancel: CancelToken | None = None) -> Iterator[Event]:
        yield TextDelta("Counting ", (1, 2), (False, True), ("target", "draft"))
        yield DecodeProgress(generated=42, tps=12.3, elapsed_s=1.0, drafted=50, accepted=32,
                             rounds=15, k=5, speculation="on", reason="", context_tokens=1203,
                             context_limit=8192)
        self.go.wait(10)
        yield TextDelta("done.", (3,), (False,), ("target",))
        yield GenerationStats(prompt_tokens=1203, cached_tokens=890, generated_tokens=44,
                              prefill_s=0.1, prefill_tps=3130.0, decode_s=1.88, decode_tps=23.4,
                              ttft_s=0.1, peak_memory_gb=0.5, finish_reason="stop",
                              context_tokens=1247, context_limit=8192, speculative=True,
                              drafter="lookup", rounds=16, drafted=60, accepted=45, k=4)


class BlockingModel:
    """Streams "Partial" and then waits for the cancel token, as a long generation would."""

    capabilities = Capabilities()  # (agent/core/backend.py: nothing beyond turns)

    def __init__(self) -> None:
        self.waiting = threading.Event()

    def generate(self, messages, cancel: CancelToken | None = None) -> Iterator[Event]:
        yield TextDelta("Partial", ())
        self.waiting.set()
        end = time.monotonic() + 10
        while cancel is not None and not cancel.cancelled and time.monotonic() < end:
            time.sleep(0.01)
        yield GenerationStats(prompt_tokens=10, cached_tokens=0, generated_tokens=1, prefill_s=0.0,
                              prefill_tps=0.0, decode_s=0.1, decode_tps=10.0, ttft_s=0.0,
                              peak_memory_gb=0.0, finish_reason="cancelled")


# ---- streaming and status --------------------------------------------------------------------


def test_prompt_streams_markdown_into_the_view(repo):
    app = scripted_app(repo, ["Hello **world**, this is a streamed answer with `code`."])

    async def scenario(pilot):
        await say(pilot, "hi there")
        text = screen_text(app)
        assert "> hi there" in text
        assert "Hello world, this is a streamed answer with code." in text  # rendered markdown
        assert app.last_result is not None and app.last_result.stop_reason == "answered"
        assert app.runtime.conversation.messages[-1]["content"].startswith("Hello **world**")

    drive(app, scenario)


def test_status_bar_shows_the_engine_figures(repo):
    model = FiguresModel()
    app = scripted_app(repo, model)

    async def scenario(pilot):
        await say(pilot, "count", wait=False)
        await until(pilot, lambda: "tok/s" in status_text(app) and "12.3" in status_text(app))
        live = status_text(app)
        assert "12.3 tok/s" in live and "acc 64% (2.1/round) K=5 spec on" in live
        assert "ctx 1203/8192" in live and "generating" in live
        model.go.set()
        await until(pilot, lambda: not app.busy)
        await pilot.pause()
        final = status_text(app)
        assert "23.4 tok/s" in final and "acc 75% (2.8/round) K=4 spec on" in final
        assert "ctx 1247/8192" in final and "cache 890/1203" in final
        assert "qwen2.5-coder-0.5b │ full-auto │ main +0" in final  # model, approval mode, git

    drive(app, scenario)


def test_token_colours_follow_the_sources(repo):
    app = scripted_app(repo, FiguresModel())
    app.runtime.model.go.set()

    async def scenario(pilot):
        await say(pilot, "count")
        await pilot.press("ctrl+t")
        await pilot.pause()
        block = app.query_one(AssistantBlock)
        assert block.tokens and app.query_one("#legend").display
        assert block.spans == [("Coun", "target"), ("ting ", "draft"), ("done.", "target")]
        assert "tokens: ■ target  ■ draft  ■ lookup  ■ forced" in screen_text(app)
        await say(pilot, "/tokens")
        assert not block.tokens

    drive(app, scenario)


def test_token_spans_cut_mixed_deltas_at_token_boundaries():
    delta = TextDelta("def f", (7, 8, 9), (False, True, True), ("target", "lookup", "lookup"))
    pieces = {7: "def", 8: " ", 9: "f"}
    assert token_spans(delta, lambda ids: pieces[ids[0]]) == [("def", "target"), (" f", "lookup")]
    assert token_spans(delta, None) == [("d", "target"), ("ef f", "lookup")]  # even cuts
    assert token_spans(TextDelta("x", (1,), (True,), ("forced",)), None) == [("x", "forced")]


def test_wait_thread_gone_returns_once_the_thread_has_exited():
    ids = []
    thread = threading.Thread(target=lambda: ids.append(threading.get_native_id()))
    thread.start()
    thread.join()
    start = time.monotonic()
    wait_thread_gone(ids[0])
    assert time.monotonic() - start < 1.0
    assert not Path(f"/proc/self/task/{ids[0]}").exists() or not Path("/proc/self/task").is_dir()


# ---- approvals -------------------------------------------------------------------------------


def suggest() -> Config:
    return Config(approval_mode="suggest")


@pytest.mark.parametrize("key,edited", [("y", True), ("n", False)])
def test_approval_yes_edits_and_no_does_not(repo, key, edited):
    app = scripted_app(repo, [call("edit_file", **EDIT), "Done."], suggest())

    async def scenario(pilot):
        await say(pilot, "add a comment", wait=False)
        await until_approval(pilot, app)
        text = screen_text(app)
        assert "+    return a + b  # sum" in text and "-    return a + b" in text  # the diff before
        assert (repo / "calc.py").read_text() == SAMPLE["calc.py"]  # nothing written yet
        await pilot.press(key)
        await until(pilot, lambda: not app.busy)
        assert ("# sum" in (repo / "calc.py").read_text()) is edited
        # (declined, the message's change was not made: said, not reported as done)
        assert app.last_result.stop_reason == ("answered" if edited else "no_change")

    drive(app, scenario)


def test_approval_always_is_not_asked_again(repo):
    second = {"path": "calc.py", "edits": [{"old": "return a - b", "new": "return a - b  # diff"}]}
    app = scripted_app(repo, [call("edit_file", **EDIT), call("edit_file", **second), "Done."],
                       suggest())
    asked = []
    approve = app.engine.approve
    app.engine.approve = lambda request: asked.append(request.call_id) or approve(request)

    async def scenario(pilot):
        await say(pilot, "comment both", wait=False)
        await until_approval(pilot, app)
        assert "Always (a): all file edits" in screen_text(app)
        await pilot.press("a")
        await until(pilot, lambda: not app.busy)
        text = (repo / "calc.py").read_text()
        assert "# sum" in text and "# diff" in text
        assert len(asked) == 1  # the second edit was covered by "always"

    drive(app, scenario)


def test_cancel_while_the_dialog_is_open_answers_no(repo):
    app = scripted_app(repo, [call("edit_file", **EDIT), "Done."], suggest())

    async def scenario(pilot):
        await say(pilot, "edit", wait=False)
        await until_approval(pilot, app)
        await pilot.press("ctrl+c")
        await until(pilot, lambda: not app.busy)
        assert not isinstance(app.screen, ApprovalScreen)
        assert (repo / "calc.py").read_text() == SAMPLE["calc.py"]
        assert app.last_result.stop_reason == "cancelled"

    drive(app, scenario)


# ---- cancel ----------------------------------------------------------------------------------


def test_escape_cancels_and_keeps_the_conversation(repo):
    model = BlockingModel()
    app = scripted_app(repo, model)

    async def scenario(pilot):
        await say(pilot, "go on forever", wait=False)
        await until(pilot, model.waiting.is_set)
        await pilot.press("escape")
        await until(pilot, lambda: not app.busy)
        assert app.last_result.stop_reason == "cancelled"
        roles = [m["role"] for m in app.runtime.conversation.messages]
        assert roles == ["system", "user", "assistant"]  # the cut answer is kept
        assert "cancelled" in screen_text(app)

    drive(app, scenario)


def test_ctrl_c_twice_quits_when_idle(repo):
    app = scripted_app(repo, [])

    async def scenario(pilot):
        await pilot.press("ctrl+c")
        assert "press Ctrl+C again to quit" in status_text(app)
        await pilot.press("ctrl+c")
        await pilot.pause()

    drive(app, scenario)
    assert app.return_code == 0


class PauseAfterProgress:
    """Passes a real model's events through; after the first `DecodeProgress` it holds the
    engine (between two of its rounds) until the cancel token is set, so that Esc always
    lands mid-generation however fast the tiny model decodes."""

    capabilities = Capabilities()  # (agent/core/backend.py: nothing beyond turns)

    def __init__(self, model) -> None:
        self.model, self.paused = model, threading.Event()

    def generate(self, messages, cancel: CancelToken | None = None) -> Iterator[Event]:
        for ev in self.model.generate(messages, cancel):
            yield ev
            if isinstance(ev, DecodeProgress) and not self.paused.is_set():
                self.paused.set()
                while cancel is not None and not cancel.cancelled:
                    time.sleep(0.01)


def test_cancelled_message_then_next_equals_a_cold_run(tmp_path, llama_dir):
    """Real tiny model, greedy: after Esc, the next message's output is what a fresh
    Runtime given the same history produces (warm caches == cold)."""
    repo = make_repo(tmp_path / "repo", SAMPLE)
    cfg = Config(model=str(llama_dir), device="cpu", approval_mode="full-auto", max_tokens=3000,
                 temperature=0.0)
    rt = Runtime(cfg, repo)
    app = AgentApp(rt)
    history: list[dict] = []

    async def scenario(pilot):
        assert rt.session is not None  # loaded on the engine thread
        local = rt.model
        rt.conversation.model = held = PauseAfterProgress(local)
        await say(pilot, "Write a long story.", wait=False)
        await until(pilot, held.paused.is_set)
        await pilot.press("escape")
        await until(pilot, lambda: not app.busy)
        assert app.last_result.stop_reason == "cancelled"
        assert app.last_result.usage["output_tokens"] > 0  # cut mid-generation
        rt.conversation.model = local
        rt.set("max_tokens", 24)
        history.extend(dict(m) for m in rt.conversation.messages)
        await say(pilot, "Now a short one.")
        assert app.last_result.stop_reason in ("answered", "max_turns", "max_tokens")

    drive(app, scenario)
    cold = Runtime(Config(**{**cfg.__dict__, "max_tokens": 24}), repo)
    cold.load()
    conv = cold.new_conversation()
    conv.messages = history
    result = list(conv.send("Now a short one."))[-1]
    assert conv.messages[-1] == rt.conversation.messages[-1]
    assert cold.session.tokens == rt.session.tokens  # the whole context, token for token
    assert result.usage["output_tokens"] == app.last_result.usage["output_tokens"] > 0


# ---- commands and input ----------------------------------------------------------------------


def test_diff_undo_and_clear(repo):
    app = scripted_app(repo, [call("edit_file", **EDIT), "Done."])

    async def scenario(pilot):
        await say(pilot, "/diff")
        assert "no changes" in screen_text(app)
        await say(pilot, "add a comment")
        assert "# sum" in (repo / "calc.py").read_text()
        await say(pilot, "/diff")
        assert "+    return a + b  # sum" in screen_text(app)  # the agent's last commit
        await say(pilot, "/undo")
        assert (repo / "calc.py").read_text() == SAMPLE["calc.py"]
        assert git(repo, "log", "--format=%s", "-1").strip() == "initial"
        old = app.runtime.conversation.id
        await say(pilot, "/clear")
        assert app.runtime.conversation.id != old
        assert "> add a comment" not in screen_text(app)
        assert f"new conversation {app.runtime.conversation.id}" in screen_text(app)

    drive(app, scenario)


def test_slash_and_file_completion(repo):
    app = scripted_app(repo, [])

    async def scenario(pilot):
        popup = app.query_one(Completions)
        await pilot.press("/", "d", "i")
        await pilot.pause()
        assert popup.display and popup.chosen() == "/diff"
        await pilot.press("tab")
        await pilot.pause()
        assert app.prompt.text == "/diff " and not popup.display
        app.prompt.load_text("")
        await pilot.press(*"look at @cal")
        await pilot.pause()
        assert popup.display and popup.chosen() == "@calc.py"
        assert "@calc.py" in screen_text(app)
        await pilot.press("escape")
        assert not popup.display and app.prompt.text == "look at @cal"
        await pilot.press("p", "tab")
        await pilot.pause()
        assert app.prompt.text == "look at @calc.py "

    drive(app, scenario)


def test_enter_sends_even_when_the_completion_list_lags(repo):
    """Typing faster than the App handles `Changed` leaves the list showing stale candidates;
    Enter re-checks the word and sends `/quit` instead of completing `/help`."""
    app = scripted_app(repo, [])

    async def scenario(pilot):
        from textual.widgets import TextArea

        await pilot.press("/")
        assert app.query_one(Completions).chosen() == "/help"
        with app.prompt.prevent(TextArea.Changed, TextArea.SelectionChanged):  # list not told
            app.prompt.load_text("/quit")
            app.prompt.move_cursor(app.prompt.document.end)
        await pilot.press("enter")
        await pilot.pause(0.2)

    drive(app, scenario)
    assert app.return_code == 0


def test_mentions_are_attached(repo):
    model = ScriptedModel(["Read it."])
    app = scripted_app(repo, model)

    async def scenario(pilot):
        await say(pilot, "explain @calc.py")
        assert "attached calc.py" in screen_text(app)
        assert '<file path="calc.py">' in model.seen[0][-1]["content"]

    drive(app, scenario)


def test_shell_command_adds_a_note(repo):
    app = scripted_app(repo, [])

    async def scenario(pilot):
        await say(pilot, "!echo hi")
        text = screen_text(app)
        assert "> !echo hi" in text and "exit code 0" in text and "hi" in text
        note = app.runtime.conversation.messages[-1]
        assert note["role"] == "user" and "I ran `echo hi` myself" in note["content"]

    drive(app, scenario)


def test_input_history_and_newlines(repo):
    app = scripted_app(repo, ["one", "two"])

    async def scenario(pilot):
        await say(pilot, "first")
        await say(pilot, "second")
        await pilot.press("up")
        assert app.prompt.text == "second"
        await pilot.press("up")
        assert app.prompt.text == "first"
        await pilot.press("down", "down")
        assert app.prompt.text == ""
        await pilot.press("a", "ctrl+j", "b")
        assert app.prompt.text == "a\nb"

    drive(app, scenario)


def test_long_paste_grows_the_input_to_a_maximum(repo):
    app = scripted_app(repo, [])

    async def scenario(pilot):
        from textual import events

        pasted = "\n".join(f"line {i}" for i in range(40))
        app.post_message(events.Paste(pasted))  # as the terminal driver delivers a paste
        await pilot.pause()
        assert app.prompt.text.count("\n") == 39
        assert app.prompt.size.height <= 10 and app.chat.size.height >= 12  # the view stays

    drive(app, scenario)


def test_mode_command_updates_the_status_bar(repo):
    app = scripted_app(repo, [], suggest())

    async def scenario(pilot):
        assert "│ suggest │" in status_text(app)
        await say(pilot, "/mode auto-edit")
        assert "│ auto-edit │" in status_text(app)
        assert app.runtime.cfg.approval_mode == "auto-edit"

    drive(app, scenario)


def test_a_resumed_conversation_is_shown(repo):
    rt = Runtime(full_auto(), repo, model=ScriptedModel([]))
    conv = rt.new_conversation()
    conv.messages += [{"role": "user", "content": "What does add do?"},
                      {"role": "assistant", "content": "It **adds** two numbers."}]
    app = AgentApp(rt)

    async def scenario(pilot):
        await pilot.pause(0.2)
        text = screen_text(app)
        assert "> What does add do?" in text and "It adds two numbers." in text

    drive(app, scenario)


def test_quit_command_exits_zero(repo):
    app = scripted_app(repo, [])

    async def scenario(pilot):
        await say(pilot, "/quit", wait=False)
        await pilot.pause()

    drive(app, scenario)
    assert app.return_code == 0


def test_palette_lists_slash_commands(repo):
    app = scripted_app(repo, [])

    async def scenario(pilot):
        from textual.command import CommandPalette

        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"undo")
        await pilot.pause(0.5)
        assert "/undo" in screen_text(app)

    drive(app, scenario)


# ---- snapshots -------------------------------------------------------------------------------


@pytest.fixture
def fixed_dates(monkeypatch):
    """Commit dates fixed, so the agent's commit (and its sha on screen) is reproducible."""
    for var in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
        monkeypatch.setenv(var, "2025-01-01T12:00:00+00:00")


def test_snapshot_main_screen(fixed_dates, tmp_path):
    repo = make_repo(tmp_path / "repo", SAMPLE)
    answer = "Here is the change:\n\n- adds a comment to `add`\n- keeps `sub`\n"
    app = scripted_app(repo, [call("edit_file", **EDIT), answer])

    async def scenario(pilot):
        await say(pilot, "Comment the add function in calc.py")
        await pilot.pause(0.3)
        assert_snapshot(app, "main_screen")

    drive(app, scenario)


def test_snapshot_approval_dialog(repo):
    app = scripted_app(repo, [call("edit_file", **EDIT), "Done."], suggest())

    async def scenario(pilot):
        await say(pilot, "Comment the add function in calc.py", wait=False)
        await until_approval(pilot, app)
        await pilot.pause(0.3)
        assert_snapshot(app, "approval_dialog")
        await pilot.press("n")

    drive(app, scenario)

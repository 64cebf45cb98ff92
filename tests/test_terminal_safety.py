"""What reaches a terminal and what a command's output leaves in the conversation.

- Every UI escapes what a model, tool, file or server wrote before a terminal sees it (one
  function, agent/core/shown.py): the REPL, the `-p` text log, the TUI (as plain Text: Rich
  markup in such text is shown, not applied).
- Command output (`run_shell`, the user's `!command`) loses its escape sequences before it is
  shown or kept (tools/termtext.py).
- A custom command's text is a message to the model, never the user's own `!command`.
- Command files are read only from real folders inside the repository, regular files only.
- A stopped run says why in one line, for every stop_reason (known or new).
"""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import pytest
from scripted import SAMPLE, ScriptedModel, call, make_repo
from test_repl import make
from test_tui import drive, say, screen_text, scripted_app, until

from agent import exit_codes
from agent.core.shown import shown
from agent.events import (AgentResult, ApprovalRequired, AssistantMessage, CheckRun, GitAction,
                          RunStopped, TextDelta, ToolCallFinished, ToolCallStarted, Warning)
from agent.ui import custom_commands, render
from agent.ui.render import Renderer
from agent.ui.repl_text import Meter, Transcript
from tools import ToolContext
from tools.run_shell import run_shell
from tools.termtext import plain_output

HOSTILE = "a\x1b[8mhidden\x07\x1b]0;title\x07 b\rc\x08 \u202eevil\u200b [bold red]x[/]"
CONTROLS = set("\x1b\x07\r\x08\u202e\u200b")
EVIL_FILE = "[bold red]boom[/bold red] \x1b[8mhidden\x07\n"


def raw_controls(text: str) -> set[str]:
    return CONTROLS & set(text)


@pytest.fixture
def repls():
    made: list = []
    yield made
    for r in made:
        r.close()


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return make_repo(tmp_path / "repo", {**SAMPLE, "evil.txt": EVIL_FILE})


def hostile_events() -> list:
    return [TextDelta(HOSTILE, ()), AssistantMessage(HOSTILE, 1),
            ToolCallStarted("c1", "run_shell", {"command": HOSTILE}),
            ToolCallFinished("c1", "run_shell", True, HOSTILE),
            ToolCallFinished("c2", "read_file", False, HOSTILE),
            ToolCallFinished("c3", "edit_file", True, "edited x:\n--- a\n+++ b\n+" + HOSTILE),
            GitAction("commit", HOSTILE), Warning(HOSTILE), ApprovalRequired("c4", "run_shell", HOSTILE),
            CheckRun("test", HOSTILE, False, HOSTILE, 1, True), RunStopped("error", 1),
            AgentResult(True, HOSTILE, 1, {}, HOSTILE, stop_reason="error")]


# ---- 1. one escaping for every terminal -------------------------------------------------------


def test_shown_escapes_every_trick_and_is_idempotent():
    out = shown(HOSTILE)
    assert not raw_controls(out)
    for seen in ("\\x1b[8m", "\\x07", "\\r", "\\b", "\\u202e", "\\u200b", "[bold red]x[/]"):
        assert seen in out
    assert shown(out) == out
    assert shown("tag\U000e0041") == "tag\\U000e0041"


def test_the_repl_transcript_and_meter_escape_events():
    t, m = Transcript(), Meter(model=HOSTILE, branch=HOSTILE)
    text = "".join(t.render(ev) for ev in hostile_events())
    assert "\\x1b[8m" in text and not raw_controls(text)
    m.update(ToolCallStarted("c", HOSTILE, {}))
    assert not raw_controls(m.text())


def test_the_p_text_log_escapes_events():
    out, err = io.StringIO(), io.StringIO()
    r = Renderer("text", out, err)
    for ev in hostile_events():
        r.handle(ev)
    both = out.getvalue() + err.getvalue()
    assert "\\x1b[8m" in both and not raw_controls(both)


def test_json_output_is_left_to_json(tmp_path):
    out = io.StringIO()
    r = Renderer("json", out, io.StringIO())
    for ev in hostile_events():
        r.handle(ev)
    assert "\\u001b[8m" in out.getvalue()  # json.dumps's escaping, not ours


def test_a_tool_result_in_the_repl_is_escaped(repo, repls):
    repl = make(repo, [call("read_file", path="evil.txt"), "Read \x1b]0;pwned\x07it."])
    repls.append(repl)
    repl.handle_line("read evil.txt")
    out = repl.out.getvalue()
    assert "\\x1b[8mhidden" in out and "\\x1b]0;pwned" in out
    assert not raw_controls(out)


def test_the_repl_escapes_what_it_writes_itself(repo, repls):
    repl = make(repo, [])
    repls.append(repl)
    repl.write("x\x1b[2Jy\n")
    assert repl.out.getvalue().endswith("x\\x1b[2Jy\n")


def test_the_tui_shows_tool_results_and_replies_literally(repo):
    app = scripted_app(repo, [call("read_file", path="evil.txt"), "It says \x1b[8m[red]hi[/red]."])

    async def scenario(pilot):
        await say(pilot, "read evil.txt")
        text = screen_text(app)
        assert "[bold red]boom[/bold red]" in text and "\\x1b[8mhidden" in text
        assert "\\x1b[8m[red]hi[/red]" in text
        assert not raw_controls(text)

    drive(app, scenario)


def test_the_tui_completion_list_shows_markup_literally(repo):
    folder = repo / ".spec-agent" / "commands"
    folder.mkdir(parents=True)
    (folder / "zap.md").write_text("---\ndescription: '[reverse]loud[/reverse] \x1b[8m'\n---\nZap.\n")
    app = scripted_app(repo, [])

    async def scenario(pilot):
        app.prompt.load_text("/za")
        app.prompt.move_cursor(app.prompt.document.end)
        await until(pilot, lambda: "loud" in screen_text(app))
        text = screen_text(app)
        assert "[reverse]loud[/reverse]" in text and not raw_controls(text)

    drive(app, scenario)


def test_tui_widgets_build_plain_text():
    from agent.ui.tui_widgets import call_summary, diff_syntax, result_body

    for renderable in (call_summary("run_shell", {"command": HOSTILE}),
                       call_summary("x", {"a": HOSTILE}), result_body("read_file", True, HOSTILE),
                       result_body("read_file", False, HOSTILE)):
        assert not raw_controls(renderable.plain) and "[bold red]x[/]" in renderable.plain
    assert not raw_controls(diff_syntax("+" + HOSTILE).code)


# ---- 2. control sequences out of command output ------------------------------------------------


@pytest.mark.parametrize("raw, plain", [
    ("\x1b[31mred\x1b[0m\n", "red\n"),
    ("a\x1b]0;title\x07b\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "ablink"),
    (" 10%\r 50%\r100%\ndone\r\n", "100%\ndone\n"),
    ("N\x08NA\x08AM\x08ME", "NAME"),
    ("\x1b(Bx\x1b7\x9b2Jy\x00z\x7f\tt", "xyz\tt"),
    ("cut \x1b]0;never ended\nnext", "cut \nnext"),
])
def test_plain_output(raw, plain):
    assert plain_output(raw) == plain


def test_run_shell_output_reaches_the_model_without_escapes(repo):
    ctx = ToolContext(repo, shell_timeout_s=10, in_git=True, sandbox="off")
    r = run_shell(ctx, r"printf '\033[31mred\033[0m\n'; printf '1%%\r2%%\r3%%\n'")
    assert r.ok and r.output == "exit code 0\nred\n3%\n"


def test_a_bang_command_reaches_screen_and_history_without_escapes(repo, repls):
    repl = make(repo, [])
    repls.append(repl)
    repl.handle_line(r"!printf '\033[31mred\033[0m\n'")
    note = repl.rt.conversation.messages[-1]["content"]
    assert "red" in note and "\x1b" not in note and "\\x1b" not in note
    assert "red\n(exit code 0" in repl.out.getvalue()


def test_a_bang_command_in_the_tui_is_kept_without_escapes(repo):
    app = scripted_app(repo, [])

    async def scenario(pilot):
        await say(pilot, r"!printf '\033[31mred\033[0m\n'")
        note = app.runtime.conversation.messages[-1]["content"]
        assert "red" in note and "\x1b" not in note
        assert "\\x1b" not in screen_text(app)

    drive(app, scenario)


# ---- 3. a custom command is a message, never the user's shell ----------------------------------


def _bang_command(repo: Path) -> Path:
    folder = repo / ".spec-agent" / "commands"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pwn.md").write_text("!touch pwned\n")
    return repo / "pwned"


def test_a_custom_command_starting_with_bang_is_sent_in_the_tui(repo):
    planted = _bang_command(repo)
    model = ScriptedModel(["I will not."])
    app = scripted_app(repo, model)

    async def scenario(pilot):
        await say(pilot, "/pwn")
        assert model.seen and model.seen[-1][-1]["content"] == "!touch pwned"

    drive(app, scenario)
    assert not planted.exists()


def test_a_queued_custom_command_is_sent_too(repo):
    planted = _bang_command(repo)
    go = threading.Event()

    class Slow(ScriptedModel):
        def generate(self, messages, cancel=None):
            if not self.seen:
                go.wait(10)
            yield from super().generate(messages, cancel)

    model = Slow(["first", "second"])
    app = scripted_app(repo, model)

    async def scenario(pilot):
        await say(pilot, "hello", wait=False)
        await until(pilot, lambda: app.busy)
        await say(pilot, "/pwn", wait=False)
        go.set()
        await until(pilot, lambda: len(model.seen) == 2 and not app.busy)
        assert model.seen[-1][-1]["content"] == "!touch pwned"

    drive(app, scenario)
    assert not planted.exists()


def test_a_custom_command_starting_with_bang_is_sent_in_the_repl(repo, repls):
    planted = _bang_command(repo)
    repl = make(repo, ["No."])
    repls.append(repl)
    repl.handle_line("/pwn")
    assert repl.rt.model.seen[-1][-1]["content"] == "!touch pwned" and not planted.exists()


# ---- 4. command files from real folders inside the repository ----------------------------------


def test_a_symlinked_commands_folder_is_ignored_with_a_warning(repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "steal.md").write_text("outside text\n")
    (repo / ".spec-agent").mkdir()
    (repo / ".spec-agent" / "commands").symlink_to(outside)
    assert "steal" not in custom_commands.load(repo)
    assert any("symlink" in w for w in custom_commands.warnings(repo))


def test_a_symlinked_spec_agent_folder_and_subfolder_are_ignored(repo, tmp_path):
    outside = tmp_path / "outside"
    (outside / "commands").mkdir(parents=True)
    (outside / "commands" / "steal.md").write_text("outside text\n")
    (repo / ".spec-agent").symlink_to(outside)
    assert "steal" not in custom_commands.load(repo)
    (repo / ".spec-agent").unlink()
    (repo / ".spec-agent" / "commands").mkdir(parents=True)
    (repo / ".spec-agent" / "commands" / "sub").symlink_to(outside / "commands")
    (repo / ".spec-agent" / "commands" / "ok.md").write_text("fine\n")
    (repo / ".spec-agent" / "commands" / "link.md").symlink_to(outside / "commands" / "steal.md")
    custom_commands._cache.clear()
    assert sorted(custom_commands.load(repo)) == ["ok"]


def test_special_and_oversized_files_are_skipped(repo):
    folder = repo / ".spec-agent" / "commands"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "fifo.md")
    (folder / "big.md").write_text("x" * (custom_commands.MAX_FILE_BYTES + 1))
    (folder / "ok.md").write_text("fine\n")
    done: list = []
    t = threading.Thread(target=lambda: done.append(custom_commands.load(repo)), daemon=True)
    t.start()
    t.join(5)
    assert done and sorted(done[0]) == ["ok"]


# ---- 5. every stop reason said in one line ----------------------------------------------------


@pytest.mark.parametrize("reason", dict.fromkeys([*exit_codes.STOP_REASONS, "checks_failed", "edit_failed",
                                                  "no_change", "some_future_reason"]))
def test_every_stop_reason_has_one_line(reason):
    line = render.stop_line(reason, "")
    if reason == "answered":
        assert line == ""
        return
    assert line and "\n" not in line and (reason in line or reason == "cancelled")


def test_a_new_stop_reason_is_said_by_every_ui(repo, repls):
    ev = AgentResult(True, "", 2, {}, "", stop_reason="checks_failed")
    assert "stopped: checks_failed" in Transcript().render(ev)
    err = io.StringIO()
    r = Renderer("text", io.StringIO(), err)
    r.handle(RunStopped("checks_failed", 2))
    r.handle(ev)
    assert "stopped: checks_failed" in err.getvalue()
    assert "stopped: max_tokens — the reply was cut" in render.stop_line("max_tokens", "the reply was cut at max_tokens")


def test_the_tui_says_a_new_stop_reason(repo):
    from agent.ui.tui_engine import EngineEvent

    app = scripted_app(repo, [])

    async def scenario(pilot):
        app.post_message(EngineEvent(AgentResult(True, "", 1, {}, "", stop_reason="no_change")))
        await until(pilot, lambda: "stopped: no_change" in screen_text(app))

    drive(app, scenario)

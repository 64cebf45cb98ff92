"""The TUI with a Pilot: messages sent while the model loads or answers are queued and sent
when it is ready; a reply's `<file path=...>` block shows as code; custom slash commands
(.spec-agent/commands/*.md and the user's folder) complete, appear in the palette and send
their text; /mcp answers without servers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from scripted import SAMPLE, ScriptedModel, full_auto, make_repo
from test_tui import drive, say, screen_text, scripted_app, until

from agent.core.backend import Capabilities
from agent.events import GenerationStats, TextDelta
from agent.runtime import Runtime
from agent.ui.tui import AgentApp
from agent.ui.tui_widgets import Completions, reply_markdown


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no user commands or servers
    return make_repo(tmp_path / "repo", SAMPLE)


def _stats() -> GenerationStats:
    return GenerationStats(prompt_tokens=10, cached_tokens=0, generated_tokens=3, prefill_s=0.0,
                           prefill_tps=0.0, decode_s=0.1, decode_tps=30.0, ttft_s=0.0,
                           peak_memory_gb=0.0, finish_reason="stop")


class GatedModel:
    """Answers each message with `answers[i]`; the first waits until `go` is set."""

    capabilities = Capabilities()  # (agent/core/backend.py: nothing beyond turns)

    def __init__(self, answers: list[str]) -> None:
        self.answers, self.seen = list(answers), []
        self.go, self.started = threading.Event(), threading.Event()

    def generate(self, messages, cancel=None):
        self.seen.append(messages[-1]["content"])
        self.started.set()
        if len(self.seen) == 1:
            self.go.wait(10)
        yield TextDelta(self.answers.pop(0), ())
        yield _stats()


def test_a_message_sent_while_the_model_answers_is_queued_then_sent(repo):
    model = GatedModel(["First answer.", "Second answer."])
    app = AgentApp(Runtime(full_auto(), repo, model=model))

    async def scenario(pilot):
        await say(pilot, "first", wait=False)
        await until(pilot, lambda: model.started.is_set())
        await say(pilot, "second", wait=False)
        await pilot.pause(0.1)
        assert app.prompt.text == "" and app.queued == ["second"]
        assert "queued: second (sent when the model is ready)" in screen_text(app)
        assert model.seen == ["first"]
        model.go.set()
        await until(pilot, lambda: len(model.seen) == 2 and not app.busy)
        await pilot.pause(0.2)
        text = screen_text(app)
        assert model.seen == ["first", "second"] and not app.queued
        assert text.index("First answer.") < text.index("> second") < text.index("Second answer.")

    drive(app, scenario)


class SlowLoad(Runtime):
    """A Runtime whose model "loads" until `loaded` is set."""

    loaded = threading.Event()

    def load(self) -> None:
        self.loaded.wait(10)
        self.model = ScriptedModel(["Hello after loading."])
        self.conversation.model = self.model


def test_a_message_sent_while_the_model_loads_is_sent_once_it_has(repo):
    rt = SlowLoad(full_auto(), repo)
    app = AgentApp(rt)

    async def scenario(pilot):
        await pilot.pause(0.2)
        assert app.busy  # loading
        await say(pilot, "hello", wait=False)
        await pilot.pause(0.1)
        assert app.queued == ["hello"] and "queued: hello" in screen_text(app)
        rt.loaded.set()
        await until(pilot, lambda: not app.busy and not app.queued)
        await pilot.pause(0.3)
        assert "Hello after loading." in screen_text(app)
        assert rt.model.seen[0][-1]["content"] == "hello"

    async def main():
        async with app.run_test(size=(100, 30)) as pilot:
            await scenario(pilot)

    import asyncio

    asyncio.run(main())


REPLY = ('Here is the file: <file path="stats.py">\ndef median(xs):\n    s = sorted(xs)\n'
         '    return s[len(s) // 2]\n</file>\nDone.')


def test_a_file_block_in_a_reply_shows_as_code(repo):
    app = scripted_app(repo, [REPLY])

    async def scenario(pilot):
        await say(pilot, "add median to stats.py")
        await pilot.pause(0.3)
        lines = screen_text(app).splitlines()
        assert any(line.strip() == "def median(xs):" for line in lines)
        code = [line for line in lines if "s = sorted(xs)" in line]
        assert code and code[0].index("s = sorted") > code[0].index("   ")  # its own line, indented
        assert any(line.strip() == "Done." for line in lines)
        assert (repo / "stats.py").read_text().startswith("def median(xs):")  # and it was applied

    drive(app, scenario)


def test_reply_markdown_fences_file_blocks_even_unclosed():
    assert reply_markdown("plain **text**") == "plain **text**"
    out = reply_markdown('<file path="a.py">\nx = 1\n')  # still streaming
    assert out.strip() == "**a.py**\n```python\nx = 1\n```"


# ---- custom commands -----------------------------------------------------------------------


def _commands(repo: Path, tmp_path: Path) -> None:
    folder = repo / ".spec-agent" / "commands"
    folder.mkdir(parents=True)
    (folder / "review.md").write_text("---\ndescription: Review a file for bugs\n"
                                      "argument-hint: [file]\n---\nReview $ARGUMENTS for bugs.\n")
    user = tmp_path / "xdg" / "spec-agent" / "commands"
    user.mkdir(parents=True)
    (user / "explain.md").write_text("Explain what this repository does.\n")


def test_custom_commands_complete_show_in_help_and_send_their_text(repo, tmp_path):
    _commands(repo, tmp_path)
    model = ScriptedModel(["Looks fine.", "It adds."])
    app = scripted_app(repo, model)

    async def scenario(pilot):
        popup = app.query_one(Completions)
        await pilot.press("/", "r", "e", "v")
        await pilot.pause()
        assert popup.display and popup.chosen() == "/review"
        assert "Review a file for bugs (project)" in screen_text(app)
        app.prompt.load_text("")
        await say(pilot, "/review calc.py")
        assert model.seen[-1][-1]["content"] == "Review calc.py for bugs."
        await say(pilot, "/explain")
        assert model.seen[-1][-1]["content"] == "Explain what this repository does."
        await say(pilot, "/help")
        text = screen_text(app)
        assert "/review [file]" in text and "/explain" in text

    drive(app, scenario)


def test_custom_commands_are_in_the_palette(repo, tmp_path):
    _commands(repo, tmp_path)
    app = scripted_app(repo, [])

    async def scenario(pilot):
        from textual.command import CommandPalette

        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"review")
        await pilot.pause(0.5)
        text = screen_text(app)
        assert "/review" in text and "Review a file for bugs (project)" in text

    drive(app, scenario)


def test_mcp_command_without_servers(repo):
    app = scripted_app(repo, [])

    async def scenario(pilot):
        await say(pilot, "/mcp")
        assert "no MCP servers: declare them in your config file" in screen_text(app)

    drive(app, scenario)


def test_importing_transformers_through_the_agent_prints_no_pytorch_advice():
    """Every `-p` run loads a tokenizer through transformers, which advises on import that
    PyTorch is missing; importing the agent first keeps that line off stderr."""
    import subprocess
    import sys

    bare = subprocess.run([sys.executable, "-c", "import transformers"], capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    if "PyTorch was not found" not in bare.stderr:
        pytest.skip("this transformers does not print the advice (PyTorch installed?)")
    code = "import agent.engine.loading, transformers; print('ok')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok"
    assert "PyTorch was not found" not in r.stderr

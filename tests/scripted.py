"""Test helpers for the agent: a scripted model that replays canned turns, and temp git repos.

Import the fixtures into a test module with `from scripted import git_repo, plain_dir`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from dataclasses import replace

from agent.cancel import CancelToken
from agent.config import Config
from agent.core.backend import Capabilities
from agent.events import Event, GenerationStats, TextDelta


def call(name: str, **arguments) -> str:
    """Tool-call markup as the model writes it."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def fake_stats(generated: int = 10, prompt: int = 100, cached: int = 80) -> GenerationStats:
    return GenerationStats(
        prompt_tokens=prompt, cached_tokens=cached, generated_tokens=generated, prefill_s=0.01,
        prefill_tps=2000.0, decode_s=0.5, decode_tps=generated / 0.5, ttft_s=0.01,
        peak_memory_gb=0.1, finish_reason="stop", speculative=True, drafter="lookup", rounds=4,
        drafted=12, accepted=6, k=3,
    )


INTERRUPT = "<Ctrl-C>"  # a turn the user cancels after "Partial", as Esc or Ctrl-C would


class ScriptedModel:
    """Replays `turns` (one string per model turn) and records the messages it was given. Its
    capabilities (agent/core/backend.py) come from the class attributes below, which a test's
    subclass sets (a counter and a window, `lead=` or `sampling=` taken by its `generate`)."""

    native_tools = False
    leads = False
    sampling = False
    count_tokens = None
    context_limit = reply_reserve = 0

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities("", self.native_tools, self.leads, self.sampling, self.count_tokens,
                            self.context_limit, self.reply_reserve)

    def __init__(self, turns: list[str]):
        self.turns = list(turns)
        self.seen: list[list[dict]] = []

    def generate(self, messages: list[dict], cancel: CancelToken | None = None) -> Iterator[Event]:
        self.seen.append([dict(m) for m in messages])
        text = self.turns.pop(0) if self.turns else "Done."
        if text == INTERRUPT:
            yield TextDelta("Partial", ())
            if cancel is not None:
                cancel.cancel()
            yield replace(fake_stats(generated=2), finish_reason="cancelled")
            return
        for i in range(0, len(text), 7):
            yield TextDelta(text[i : i + 7], ())
        yield fake_stats(generated=max(1, len(text) // 4))


def conversation(root: Path, model, cfg: Config | None = None, approver=None):
    """A Conversation on `model` in `root`, built the way the CLI builds it."""
    from agent.runtime import Runtime

    rt = Runtime(cfg or full_auto(), root, model=model, approver=approver)
    return rt.new_conversation()


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path, files: dict[str, str]) -> Path:
    """A git repo with `files` in one commit by a test user."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test User")
    git(root, "config", "user.email", "user@example.com")
    git(root, "config", "commit.gpgsign", "false")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


SAMPLE = {
    "calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
    "README.md": "# sample\n",
    ".gitignore": "build/\n*.log\n",
}


@pytest.fixture
def git_repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo", SAMPLE)


@pytest.fixture
def plain_dir(tmp_path) -> Path:
    root = tmp_path / "plain"
    root.mkdir()
    for name, text in SAMPLE.items():
        (root / name).write_text(text)
    return root


def full_auto(**over) -> Config:
    """Full-auto, and (unless asked) without the files and listing the agent attaches to a
    message, so tests of other features see messages exactly as sent."""
    return Config(**{"approval_mode": "full-auto", "attach_mentioned": False, **over})


def tmux_cli() -> Path:
    """The installed `spec-agent` for a test that drives it in tmux; skips (saying why) when
    tmux or the embedded model is missing."""
    import shutil
    import sys

    from agent import store

    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    if not store.is_present():
        pytest.skip(f"embedded model not pulled (run: {store.PULL_HINT})")
    return Path(sys.executable).parent / "spec-agent"

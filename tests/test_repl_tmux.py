"""End to end: the real `spec-agent --plain` with the embedded model in a detached tmux pane.

Types a prompt, waits until the meter shows a non-zero tok/s (live while decoding, or in the
prompt's toolbar afterwards), then leaves with /quit and checks the exit code. Run with
`pytest -s` to see the captured pane.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time

import pytest
from scripted import SAMPLE, make_repo, tmux_cli

from agent import store

TPS = re.compile(r"(\d+\.\d) tok/s")
HINT = " Enter sends"  # the second toolbar line: only the input prompt shows it


def meter_tps(pane: str) -> float:
    """The tok/s the meter shows (a status line: the one with │ separators), 0 if none."""
    found = [float(m.group(1)) for line in pane.splitlines() if "│" in line for m in TPS.finditer(line)]
    return max(found, default=0.0)


class Pane:
    def __init__(self, socket: str, name: str):
        self.socket, self.name = socket, name

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True,
                              timeout=10).stdout

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def wait(self, test, timeout_s: float, every_s: float = 0.25) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pane = self.text()
            if test(pane):
                return pane
            time.sleep(every_s)
        raise AssertionError(f"timed out after {timeout_s:.0f} s; the pane:\n{self.text()}")


def at_prompt(pane: str) -> bool:
    lines = [line for line in pane.splitlines() if line.strip()]
    return bool(lines) and lines[-1].startswith(HINT)


def asking(pane: str) -> bool:
    """An approval question is waiting for y/n/a."""
    return any(line.startswith("Allow ") and "[y]es" in line for line in pane.splitlines())


@pytest.mark.embedded
def test_plain_repl_in_tmux_shows_a_live_meter(tmp_path):
    cli = tmux_cli()
    repo = make_repo(tmp_path / "repo", SAMPLE)
    exit_file = tmp_path / "exit"
    q = shlex.quote
    command = (f"cd {q(str(repo))} && SPEC_AGENT_HOME={q(str(tmp_path / 'home'))} {q(str(cli))} --plain "
               f"--model {q(str(store.model_path()))} --max-tokens 48; echo EXIT=$? > {q(str(exit_file))}")
    pane = Pane(f"spec-agent-test-{os.getpid()}", "repl")
    pane.tmux("new-session", "-d", "-s", "repl", "-x", "120", "-y", "35", command)
    try:
        pane.wait(at_prompt, 150)  # sandbox probe + re-exec + model load
        pane.keys("Say hello in one short sentence.", "Enter")
        shown = pane.wait(lambda p: meter_tps(p) > 0, 90)
        where = "at the prompt" if at_prompt(shown) else "live, mid-generation"
        print(f"\n--- the pane when the meter first showed tok/s ({where}):\n{shown}")
        if not at_prompt(shown):
            assert "decoding" in shown or "running" in shown  # the live meter, mid-generation
        final = pane.wait(lambda p: at_prompt(p) or asking(p), 90)
        while asking(final):  # the model wrote a tool call: decline it (nothing runs)
            pane.keys("n")
            final = pane.wait(lambda p: at_prompt(p) or (asking(p) and p != final), 90)
        print(f"--- after the answer:\n{final}")
        assert meter_tps(final) > 0 and "[" in final and "decode" in final  # the summary line
        pane.keys("/quit", "Enter")
        deadline = time.monotonic() + 30
        while not exit_file.exists() and time.monotonic() < deadline:
            time.sleep(0.25)
        assert exit_file.exists(), pane.text()
        assert exit_file.read_text().strip() == "EXIT=0"
    finally:
        pane.tmux("kill-server")

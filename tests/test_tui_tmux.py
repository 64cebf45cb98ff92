"""End to end: the real `spec-agent` TUI in a detached tmux session with the embedded model.

Types a prompt, waits until the status bar shows a non-zero decode speed, saves the screen
(for people to look at: printed with `pytest -s`), quits with /quit and checks the exit code.
Skipped without tmux or without the embedded model.
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

TPS = re.compile(r"(?<![\d.])(?!0\.0 )\d+\.\d tok/s")  # a non-zero decode speed
PROMPT = "Write a Python function that checks whether a number is prime."


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=10).stdout


def wait_for(check, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.mark.embedded
def test_tui_in_tmux_streams_and_quits(tmp_path):
    repo = make_repo(tmp_path / "repo", SAMPLE)
    exit_file, capture_file = tmp_path / "exit.txt", tmp_path / "tui_capture.txt"
    exe = tmux_cli()
    q = lambda p: shlex.quote(str(p))  # noqa: E731
    cmd = (f"cd {q(repo)} && unset COLUMNS LINES && SPEC_AGENT_HOME={q(tmp_path / 'home')} "
           f"{q(exe)} --model {q(store.model_path())} --approval-mode suggest; "
           f"echo EXIT=$? > {q(exit_file)}")
    session = f"spec-agent-test-{os.getpid()}"
    tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "35", cmd)
    tmux("resize-window", "-t", session, "-x", "120", "-y", "35")  # whatever the server's default
    pane = lambda: tmux("capture-pane", "-p", "-t", session)  # noqa: E731
    try:
        wait_for(lambda: "tok/s" in pane() and "loading" not in pane(), 90, "the model to load")
        tmux("send-keys", "-t", session, "-l", PROMPT)
        tmux("send-keys", "-t", session, "Enter")
        wait_for(lambda: TPS.search(pane()), 90, "a non-zero tok/s in the status bar")
        time.sleep(4)  # a few more lines of the answer for the capture
        screen = pane()
        assert "tok/s" in screen and "suggest" in screen
        capture_file.write_text(screen)
        print(f"\n--- TUI mid-generation ({capture_file}) ---\n{screen}")
        if "The agent wants to" in screen:  # an approval dialog: answer no first
            tmux("send-keys", "-t", session, "n")
        tmux("send-keys", "-t", session, "-l", "/quit")
        tmux("send-keys", "-t", session, "Enter")
        wait_for(exit_file.exists, 60, "spec-agent to exit")
        assert exit_file.read_text().strip() == "EXIT=0"
    finally:
        tmux("kill-session", "-t", session)

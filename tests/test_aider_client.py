"""Aider, a real OpenAI client, editing a file through `spec-agent serve`.

`spec-agent serve` runs in a subprocess with `--log` and `--record`; Aider runs once with
`--message` on a one-file git repository, pointed at the server with `--openai-api-base`.
Aider sends its chat streamed at temperature 0 (and its commit message unstreamed).

- The embedded SmolLM2 (135M) does not write a usable whole-file edit, so its test checks the
  protocol end to end: Aider exits 0, every request was answered 200 and streamed, and the
  text Aider printed is the model's reply (the recorded messages sent again, unstreamed, give
  the same greedy text).
- Qwen2.5-Coder-0.5B (when pulled) makes the edit: `add()` gains a docstring and still adds,
  and Aider commits it with a message the model wrote.

Aider pins many packages, so it lives in its own environment, found as `$SPEC_AGENT_AIDER`,
`aider-venv/bin/aider` beside this checkout, or `aider` on PATH; the tests skip without it.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agent import store

ROOT = Path(__file__).resolve().parents[1]
CALC = "def add(a, b):\n    return a + b\n"
ASK = "Add a docstring to add() in calc.py"
pytestmark = pytest.mark.slow


def aider_exe() -> str | None:
    for candidate in (os.environ.get("SPEC_AGENT_AIDER"), str(ROOT.parent / "aider-venv" / "bin" / "aider"),
                      shutil.which("aider")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """`spec-agent serve -m MODEL` in a subprocess, with its request log and record."""

    def __init__(self, model: str, folder: Path, max_tokens: int):
        self.port, self.log, self.record = _free_port(), folder / "log.jsonl", folder / "record.jsonl"
        self.stderr = folder / "serve.stderr"
        env = {**os.environ, "SPEC_AGENT_DISK_CACHE_MB": "0", "HF_HUB_OFFLINE": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "serve", "-m", model, "--port", str(self.port),
             "--max-tokens", str(max_tokens), "--log", str(self.log), "--record", str(self.record)],
            stdout=subprocess.DEVNULL, stderr=self.stderr.open("w"), env=env, cwd=ROOT)
        self.base = f"http://127.0.0.1:{self.port}/v1"

    def wait_ready(self, seconds: float = 180) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.stderr.read_text()
            try:
                if httpx.get(self.base.removesuffix("/v1") + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        pytest.fail(f"spec-agent serve was not ready in {seconds:.0f}s: {self.stderr.read_text()}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)

    def requests(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def serve(tmp_path):
    started: list[Served] = []

    def start(model: str, max_tokens: int) -> Served:
        s = Served(model, tmp_path, max_tokens)
        started.append(s)
        s.wait_ready()
        return s

    yield start
    for s in started:
        s.stop()


def make_repo(path: Path) -> Path:
    path.mkdir()
    (path / "calc.py").write_text(CALC)
    for cmd in (["init", "-q"], ["add", "calc.py"],
                ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "calc"]):
        subprocess.run(["git", *cmd], cwd=path, check=True)
    return path


def run_aider(exe: str, served: Served, model_id: str, repo: Path, *flags: str) -> subprocess.CompletedProcess:
    cmd = [exe, "--openai-api-base", served.base, "--openai-api-key", "unused",
           "--model", f"openai/{model_id}", "--edit-format", "whole", "--yes-always",
           "--no-show-model-warnings", "--no-check-update", "--no-analytics", "--no-gitignore",
           "--no-pretty", "--no-fancy-input", "--map-tokens", "0", *flags, "--message", ASK, "calc.py"]
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL, check=False)


def words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def aider() -> str:
    exe = aider_exe()
    if exe is None:
        pytest.skip("no aider executable: set SPEC_AGENT_AIDER, or `python3 -m venv aider-venv && "
                    "aider-venv/bin/pip install aider-chat` beside this checkout")
    return exe


@pytest.mark.embedded
def test_aider_session_streams_through_serve(aider, serve, tmp_path):
    if not store.is_present():
        pytest.skip(f"embedded model not pulled (run: {store.PULL_HINT})")
    served = serve("embedded", 48)
    done = run_aider(aider, served, "embedded", make_repo(tmp_path / "repo"), "--no-auto-commits")
    assert done.returncode == 0, done.stdout + done.stderr
    reqs = served.requests()
    assert reqs and all(r["status"] == 200 for r in reqs), reqs
    chat = [r for r in reqs if r["path"] == "/v1/chat/completions"]
    assert chat[0]["stream"] is True and chat[0]["completion_tokens"] > 0
    # The same messages sent again: the greedy reply is the text Aider showed.
    sent = json.loads(served.record.read_text().splitlines()[0])["messages"]
    again = httpx.post(served.base + "/chat/completions", timeout=300,
                       json={"model": "embedded", "messages": sent, "temperature": 0}).json()
    reply = again["choices"][0]["message"]["content"]
    assert reply.strip() and words(reply) in words(done.stdout), (reply, done.stdout)


def test_aider_edits_and_commits_through_serve(aider, serve, tmp_path):
    qwen = store.lookup("qwen2.5-coder-0.5b")
    if not store.is_present(qwen):
        pytest.skip(f"qwen2.5-coder-0.5b not pulled (run: {store.PULL_HINT} qwen2.5-coder-0.5b)")
    served = serve(qwen.name, 512)
    repo = make_repo(tmp_path / "repo")
    done = run_aider(aider, served, qwen.name, repo)
    assert done.returncode == 0, done.stdout + done.stderr
    reqs = served.requests()
    assert reqs and all(r["status"] == 200 for r in reqs), reqs
    assert reqs[0]["stream"] is True and "stream" not in reqs[-1]  # the edit, then the commit message
    source = (repo / "calc.py").read_text()
    fn = ast.parse(source).body[0]
    assert isinstance(fn, ast.FunctionDef) and ast.get_docstring(fn), source
    subprocess.run([sys.executable, "-c", "from calc import add; assert add(2, 3) == 5"], cwd=repo,
                   check=True)
    log = subprocess.run(["git", "log", "--format=%s", "-n", "1", "--", "calc.py"], cwd=repo,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert log and log != "calc", "Aider did not commit the edit"

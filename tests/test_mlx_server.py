"""The OpenAI backend against a real server on loopback: mlx-lm's own `mlx_lm server`.

A tiny random qwen2 model with Qwen2.5's chat template (so the server renders `tools` and
parses `<tool_call>` output) checks the protocol: streamed text, usage and the server's
prompt-cache figures, our tool-call history (assistant `tool_calls` + `tool` messages)
accepted and rendered by the server's template, and cancel. Random weights never decide to
call a tool: a model choosing a call runs in a slow test on Qwen2.5-Coder-0.5B from the store
(exported to an MLX folder), and the embedded SmolLM2, exported the same way, streams answers
in another.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from scripted import SAMPLE, full_auto, make_repo
from test_tool_format import QWEN25_TEMPLATE

from agent.backends.openai import ApiOptions, OpenAIBackend
from agent.cancel import CancelToken
from agent.events import GenerationStats, TextDelta, ToolCallFinished, TurnStats
from agent.runtime import Runtime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env() -> dict[str, str]:
    """The server's environment: OpenBLAS preloaded as the CLI does (FACTS: the reference
    BLAS is several times slower), nothing inherited that could reach the Hub."""
    from agent import store
    from agent.engine import blas

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LD_PRELOAD": ""}
    lib = blas.openblas_library() if sys.platform == "linux" else None
    if lib:
        env["LD_PRELOAD"] = lib
        coretype = blas.verified_coretype(lib, store.home() / "blas-coretype.json")
        if coretype:
            env["OPENBLAS_CORETYPE"] = coretype
    return env


class MlxServer:
    """`python -m mlx_lm server --model FOLDER` on a free loopback port."""

    def __init__(self, folder: Path, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = folder.parent / f"server-{self.port}.log"
        cmd = [sys.executable, "-m", "mlx_lm", "server", "--model", str(folder), "--host",
               "127.0.0.1", "--port", str(self.port), "--prefill-step-size", "128", *extra]
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
                                     env=server_env())

    def wait(self, timeout: float = 120.0) -> "MlxServer":
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlx_lm server exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"mlx_lm server did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory, qwen2_dir):
    from transformers import AutoTokenizer
    import shutil

    d = tmp_path_factory.mktemp("served") / "tiny-qwen"
    shutil.copytree(qwen2_dir, d)
    (d / "chat_template.jinja").unlink(missing_ok=True)
    tok = AutoTokenizer.from_pretrained(str(d))
    tok.chat_template = QWEN25_TEMPLATE
    tok.save_pretrained(str(d))
    server = MlxServer(d, "--max-tokens", "24").wait()
    yield server
    server.stop()


def backend(url: str, tools=None, **over) -> OpenAIBackend:
    opts = dict(max_tokens=16, read_timeout_s=300.0, max_retries=1, backoff_s=0.1)
    opts.update(over)
    return OpenAIBackend(ApiOptions(url, **opts), tools)


def one_turn(b: OpenAIBackend, messages: list[dict]) -> tuple[list, GenerationStats]:
    events = list(b.generate(messages, CancelToken()))
    (stats,) = [e for e in events if isinstance(e, GenerationStats)]
    return events, stats


def test_real_server_streams_and_reports_usage_and_cache(tiny_server):
    b = backend(tiny_server.url)
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hello"}]
    events, first = one_turn(b, msgs)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) >= 2  # streamed token by token
    assert first.prompt_tokens > 50 and first.generated_tokens == 16 and first.finish_reason == "length"
    assert first.cache_reported and first.decode_tps > 0 and first.backend.startswith("openai 127.0.0.1")
    assert "tools" in b.requests[-1] and "model" not in b.requests[-1]  # the server's own model
    reply = "".join(e.text for e in deltas)
    msgs += [{"role": "assistant", "content": reply}, {"role": "user", "content": "and again"}]
    _, second = one_turn(b, msgs)
    # The request extended the previous one, so the server's prompt cache served the prefix.
    assert second.cached_tokens >= first.prompt_tokens - 1, (second, first)


def test_real_server_takes_our_tool_call_history(tiny_server, tmp_path):
    """A call and its result go to the server as `tool_calls` + a `tool` message; its Qwen
    template renders them and it answers."""
    from agent.core.callformat import format_result
    from tools import ToolContext, call_tool

    repo = make_repo(tmp_path / "repo", SAMPLE)
    result = call_tool("read_file", {"path": "calc.py"}, ToolContext(repo))
    assert result.ok
    call = '<tool_call>{"name": "read_file", "arguments": {"path": "calc.py"}}</tool_call>'
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "read calc.py"},
            {"role": "assistant", "content": "Reading. " + call},
            {"role": "user", "content": format_result("read_file", result)}]
    b = backend(tiny_server.url)
    _, stats = one_turn(b, msgs)
    sent = b.requests[-1]["messages"]
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "read_file"
    assert sent[-1]["role"] == "tool" and "def add" in sent[-1]["content"]
    # The template rendered the call and the result: the prompt holds the file's tokens too.
    assert stats.prompt_tokens > one_turn(b, msgs[:2])[1].prompt_tokens + 20
    assert stats.generated_tokens > 0


def test_real_server_cancel_is_prompt(tiny_server):
    b = backend(tiny_server.url, max_tokens=2000)
    cancel = CancelToken()
    t0, seen = time.monotonic(), 0
    for ev in b.generate([{"role": "user", "content": "write a lot"}], cancel):
        if isinstance(ev, TextDelta):
            seen += 1
            if seen == 3:
                cancel.cancel()
                t_cancel = time.monotonic()
        if isinstance(ev, GenerationStats):
            assert ev.finish_reason == "cancelled"
    assert time.monotonic() - t_cancel < 0.5 and time.monotonic() - t0 < 60


def export_mlx(lm, folder: Path) -> Path:
    """Write a loaded model as an MLX folder `mlx_lm` can load (weights as the engine runs them)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import save_config

    folder.mkdir(parents=True)
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(lm.model.parameters())))
    save_config(dataclasses.asdict(lm.model.args), folder / "config.json")
    lm.tokenizer._tokenizer.save_pretrained(str(folder))
    return folder


@pytest.mark.slow
@pytest.mark.embedded
def test_embedded_model_through_mlx_server(embedded, tmp_path):
    """SmolLM2 exported as an MLX folder and served: `-p` streams an answer (its template has
    no tool format, so the tools travel as text), figures per turn, the server's cache hit on
    the second message."""
    server = MlxServer(export_mlx(embedded, tmp_path / "smol")).wait()
    try:
        repo = make_repo(tmp_path / "repo", SAMPLE)
        cfg = full_auto(engine="openai", model="default", base_url=server.url, tool_format="text",
                        max_tokens=24, max_turns=1)
        rt = Runtime(cfg, repo)
        rt.load()
        conv = rt.new_conversation()
        first = list(conv.send("Say hello."))
        second = list(conv.send("Say it again."))
    finally:
        server.stop()
    stats = [e.stats for e in first + second if isinstance(e, TurnStats)]
    assert len(stats) == 2 and all(s.generated_tokens > 0 and s.decode_tps > 0 for s in stats)
    assert "Tools:" in conv.messages[0]["content"]
    assert stats[1].cached_tokens >= stats[0].prompt_tokens - 1  # append-only: prefix reused
    # 24 tokens: an answer, or a reply cut at max_tokens (a run that did not finish, as -p reports it)
    assert first[-1].result and first[-1].stop_reason in ("answered", "max_tokens")
    assert first[-1].is_error == (first[-1].stop_reason == "max_tokens")


@pytest.mark.slow
def test_qwen_coder_chooses_a_tool_through_mlx_server(tmp_path):
    """Qwen2.5-Coder-0.5B (the store's GGUF, exported to MLX) behind mlx_lm.server, tools in
    the `tools` parameter: the model itself calls read_file, the tool runs, the result goes
    back, and the second request reuses the server's cache."""
    from agent import store
    from agent import models

    if not store.is_present(store.lookup("qwen2.5-coder-0.5b")):
        pytest.skip("qwen2.5-coder-0.5b not pulled (spec-agent models pull qwen2.5-coder-0.5b)")
    folder = export_mlx(models.load("qwen2.5-coder-0.5b", device="cpu"), tmp_path / "qwen05")
    server = MlxServer(folder).wait()
    try:
        from tools import TOOLS

        repo = make_repo(tmp_path / "repo", SAMPLE)
        # Two tools keep the prompt short (the CPU prefill dominates this test's time).
        b = backend(server.url, max_tokens=40,
                    tools={n: TOOLS[n] for n in ("read_file", "list_files")})
        rt = Runtime(full_auto(max_turns=2, edit_format="tool"), repo, model=b)
        events = list(rt.new_conversation().send(
            "Read the file calc.py with the read_file tool, then tell me what it contains."))
    finally:
        server.stop()
    done = [e for e in events if isinstance(e, ToolCallFinished)]
    assert done and done[0].name == "read_file" and done[0].ok and "def add" in done[0].output
    stats = [e.stats for e in events if isinstance(e, TurnStats)]
    assert len(stats) == 2 and stats[1].cached_tokens >= stats[0].prompt_tokens - 1

"""The OpenAI-compatible backend against a scripted server on loopback (real HTTP + SSE):
streaming, tool calls in both formats, validation, retries, faults, cancel, append-only
prompts, and the whole agent (`-p`, the TUI) on it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fake_openai import FakeServer, Reply, _chunk, text_reply, tool_reply, usage_chunk
from scripted import SAMPLE, full_auto, git, make_repo

from agent.backends.base import ModelError, split_results, wire_messages
from agent.backends.openai import ApiOptions, OpenAIBackend, ServerError, api_key_from_env
from agent.cancel import CancelToken
from agent.cli import main as cli_main
from agent.config import Config
from agent.events import (AgentResult, DecodeProgress, GenerationStats, TextDelta, ToolCallFinished,
                          ToolCallStarted, TurnStats)
from agent.runtime import Runtime

ROOT = Path(__file__).resolve().parent.parent


def backend(url: str, **over) -> OpenAIBackend:
    opts = dict(model="default", max_retries=3, backoff_s=0.05, read_timeout_s=5.0,
                connect_timeout_s=2.0)
    opts.update(over)
    return OpenAIBackend(ApiOptions(url, **opts))


def turn(b: OpenAIBackend, messages: list[dict] | None = None, cancel=None) -> tuple[str, GenerationStats, list]:
    events = list(b.generate(messages or [{"role": "user", "content": "hi"}], cancel or CancelToken()))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    stats = [e for e in events if isinstance(e, GenerationStats)]
    assert len(stats) == 1
    return text, stats[0], events


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo", SAMPLE)


def run_conversation(repo: Path, b: OpenAIBackend, *texts: str) -> list:
    conv = Runtime(full_auto(), repo, model=b).new_conversation()
    events = []
    for t in texts:
        events += list(conv.send(t))
    return events


# ---- streaming and figures -------------------------------------------------------------------


def test_streams_text_and_reports_server_figures():
    with FakeServer([text_reply("Hello from the server.", pieces=5, cached=30, delay_each=0.08)]) as srv:
        b = backend(srv.url)
        text, stats, events = turn(b)
    assert text == "Hello from the server."
    assert sum(isinstance(e, TextDelta) for e in events) >= 5  # streamed, not one blob
    live = [e for e in events if isinstance(e, DecodeProgress)]
    assert live and live[-1].generated >= 2 and live[-1].tps > 0  # meters move while it streams
    req = srv.requests[0]
    assert req["model"] == "fake-model"  # "default" → the first model /models lists
    assert req["stream"] is True and req["stream_options"] == {"include_usage": True}
    assert {t["function"]["name"] for t in req["tools"]} >= {"read_file", "edit_file"}
    assert stats.prompt_tokens == 50 and stats.cached_tokens == 30 and stats.cache_reported
    assert stats.generated_tokens == 6 and stats.finish_reason == "stop"
    assert stats.decode_s >= 0.15 and 0 < stats.decode_tps < 6 / 0.15 + 1  # measured on the stream
    assert stats.backend.startswith("openai 127.0.0.1:") and "fake-model" in stats.backend
    assert stats.peak_memory_gb == 0.0 and not stats.speculative


def test_figures_the_server_does_not_report_are_marked():
    chunks = [_chunk({"content": "ok"}), _chunk({}, "stop"), usage_chunk(20, 1, cached=None)]
    timed = [_chunk({"content": "ok"}), _chunk({}, "stop"),
             {"choices": [], "timings": {"prompt_n": 9, "prompt_ms": 30.0, "cache_n": 11,
                                          "draft_n": 10, "draft_n_accepted": 7}}]
    with FakeServer([Reply(chunks=chunks), Reply(chunks=timed)]) as srv:
        b = backend(srv.url, model="m")
        _, plain, _ = turn(b)
        _, llama, _ = turn(b)
    assert not plain.cache_reported and plain.cached_tokens == 0
    assert llama.cache_reported and llama.cached_tokens == 11 and llama.prefill_s == pytest.approx(0.03)
    assert llama.drafted == 10 and llama.accepted == 7 and llama.speculative  # llama-server's counts


def test_api_key_from_env_only():
    assert api_key_from_env({"OPENAI_API_KEY": "b"}) == "b"
    assert api_key_from_env({"SPEC_AGENT_API_KEY": "a", "OPENAI_API_KEY": "b"}) == "a"
    with FakeServer() as srv:
        turn(backend(srv.url, api_key="sekrit"))
    assert srv.headers[0].get("Authorization") == "Bearer sekrit"


def test_repo_specrc_cannot_redirect_the_server(tmp_path):
    from agent.config import ConfigError, load_config

    (tmp_path / ".specrc").write_text('base_url = "http://evil.example/v1"\n')
    with pytest.raises(ConfigError, match="base_url"):
        load_config(tmp_path)


# ---- tool calls ------------------------------------------------------------------------------


def test_tool_call_in_tools_format_runs_and_goes_back_as_tool_message(repo):
    with FakeServer([tool_reply("read_file", {"path": "calc.py"}, text="Reading."),
                     text_reply("It adds and subtracts.")]) as srv:
        events = run_conversation(repo, backend(srv.url), "What is in calc.py?")
    done = [e for e in events if isinstance(e, ToolCallFinished)]
    assert len(done) == 1 and done[0].ok and "def add" in done[0].output
    assert events[-1].result == "It adds and subtracts." and not events[-1].is_error
    msgs = srv.requests[1]["messages"]
    assert msgs[-2]["role"] == "assistant" and msgs[-2]["content"] == "Reading."
    call = msgs[-2]["tool_calls"][0]
    assert call["function"]["name"] == "read_file"
    assert json.loads(call["function"]["arguments"]) == {"path": "calc.py"}
    assert msgs[-1] == {"role": "tool", "tool_call_id": call["id"], "content": done[0].output}
    system = srv.requests[0]["messages"][0]["content"]
    assert "Tools:" not in system  # the schemas travel in `tools`, not in the prompt


def test_calls_as_text_are_parsed_like_the_local_engine(repo):
    call = '<tool_call>{"name": "read_file", "arguments": {"path": "README.md"}}</tool_call>'
    with FakeServer([text_reply("Let me look. " + call, pieces=6), text_reply("A sample.")]) as srv:
        b = backend(srv.url, native_tools=False)
        events = run_conversation(repo, b, "What is README.md?")
    done = [e for e in events if isinstance(e, ToolCallFinished)]
    assert done and done[0].ok and "# sample" in done[0].output
    first = srv.requests[0]
    assert "tools" not in first and "Tools:" in first["messages"][0]["content"]
    assert srv.requests[1]["messages"][-1]["content"].startswith('<tool_result name="read_file" status="ok">')


def test_native_server_returning_calls_as_text_still_works(repo):
    call = '<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>'
    with FakeServer([text_reply(call), text_reply("Listed.")]) as srv:
        events = run_conversation(repo, backend(srv.url), "list")
    assert [e.name for e in events if isinstance(e, ToolCallStarted)] == ["list_files"]
    assert srv.requests[1]["messages"][-1]["role"] == "tool"


@pytest.mark.parametrize("arguments, problem", [
    ({"path": 5}, "invalid arguments for read_file at path"),
    ('{"path": "calc.py"', "arguments for read_file must be a JSON object"),
    ({"nope": 1}, "invalid arguments for read_file"),
])
def test_invalid_call_goes_back_to_the_model_as_a_tool_error(repo, arguments, problem):
    with FakeServer([tool_reply("read_file", arguments), text_reply("Sorry.")]) as srv:
        events = run_conversation(repo, backend(srv.url), "read it")
    done = [e for e in events if isinstance(e, ToolCallFinished)]
    assert len(done) == 1 and not done[0].ok and problem in done[0].output
    back = srv.requests[1]["messages"][-1]
    assert back["role"] == "tool" and problem in back["content"]
    assert events[-1].result == "Sorry."


def test_required_call_uses_the_servers_structured_output(repo):
    with FakeServer([tool_reply("list_files", {}), text_reply("ok")]) as srv:
        run_conversation(repo, backend(srv.url, tool_choice="first"), "go")
    assert srv.requests[0]["tool_choice"] == "required" and srv.requests[1]["tool_choice"] == "auto"
    body = json.dumps({"name": "git_status", "arguments": {}})
    with FakeServer([text_reply(body), text_reply("clean")]) as srv:
        events = run_conversation(repo, backend(srv.url, tool_choice="first", native_tools=False), "go")
    fmt = srv.requests[0]["response_format"]
    assert fmt["type"] == "json_schema" and "anyOf" in fmt["json_schema"]["schema"]
    assert "response_format" not in srv.requests[1]
    assert [e.name for e in events if isinstance(e, ToolCallFinished) and e.ok] == ["git_status"]


# ---- faults ----------------------------------------------------------------------------------


def test_429_with_retry_after_then_success():
    busy = Reply(status=429, headers={"Retry-After": "1"}, body={"error": {"message": "slow down"}})
    with FakeServer([busy, text_reply("ok")]) as srv:
        t0 = time.monotonic()
        text, _, _ = turn(backend(srv.url, model="m"))
        waited = time.monotonic() - t0
    assert text == "ok" and len(srv.requests) == 2
    assert waited >= 0.95  # honoured Retry-After: 1 (backoff alone would be ~0.05 s)


def test_503_is_retried_with_backoff_then_gives_up_in_one_line():
    down = Reply(status=503, body={"error": {"message": "loading model"}})
    with FakeServer([down, down, text_reply("ok")]) as srv:
        assert turn(backend(srv.url, model="m"))[0] == "ok"
    assert len(srv.requests) == 3
    with FakeServer([down] * 5) as srv:
        with pytest.raises(ServerError) as e:
            turn(backend(srv.url, model="m", max_retries=2))
    assert len(srv.requests) == 3
    assert str(e.value) == f"{srv.url[7:-3]}: HTTP 503: loading model (after 2 retries)"


def test_4xx_is_not_retried_and_says_what_the_server_said():
    denied = Reply(status=401, body={"error": {"message": "Invalid API key", "type": "auth"}})
    with FakeServer([denied]) as srv:
        with pytest.raises(ModelError, match=r"HTTP 401: Invalid API key$"):
            turn(backend(srv.url, model="m"))
    assert len(srv.requests) == 1


def test_stream_cut_midway_is_an_error_and_not_retried():
    reply = text_reply("one two three four", pieces=4)
    reply.cut_after = 3
    with FakeServer([reply]) as srv:
        with pytest.raises(ModelError, match="stream broke mid-answer"):
            turn(backend(srv.url, model="m"))
    assert len(srv.requests) == 1


def test_malformed_chunk_is_an_error():
    with FakeServer([Reply(chunks=[_chunk({"content": "a"}), "{not json"])]) as srv:
        with pytest.raises(ModelError, match="malformed stream chunk"):
            turn(backend(srv.url, model="m"))


def test_slow_first_byte_within_and_past_the_read_timeout():
    with FakeServer([text_reply("late", delay_first=0.4)]) as srv:
        text, stats, _ = turn(backend(srv.url, model="m", read_timeout_s=3.0))
    assert text == "late" and stats.ttft_s >= 0.4
    with FakeServer([text_reply("late", delay_first=1.5)]) as srv:
        with pytest.raises(ServerError, match=r"no response within 0.3 s"):
            turn(backend(srv.url, model="m", read_timeout_s=0.3))
    assert len(srv.requests) == 1  # a slow server is not asked twice


def test_cancel_mid_stream_returns_promptly_and_hangs_up():
    reply = text_reply("a b c d e f g h", pieces=8, delay_each=1.0)
    with FakeServer([reply]) as srv:
        cancel = CancelToken()
        events, t_cancel = [], [0.0]
        for ev in backend(srv.url, model="m").generate([{"role": "user", "content": "x"}], cancel):
            events.append(ev)
            if isinstance(ev, TextDelta) and ev.text and not cancel.cancelled:
                threading.Timer(0.1, cancel.cancel).start()
                t_cancel[0] = time.monotonic() + 0.1
        took = time.monotonic() - t_cancel[0]
        assert srv.disconnected.wait(3.0)  # the server saw the connection go
    assert took < 0.5
    assert events[-1].finish_reason == "cancelled"


def test_server_down_is_one_line_and_exit_1(repo):
    gone = FakeServer()
    port = gone.httpd.server_address[1]
    gone.httpd.server_close()  # bound then closed: nothing listens there
    env = {**os.environ, "LD_PRELOAD": "", "SPEC_AGENT_MAX_RETRIES": "1"}
    for fmt in ("text", "events"):
        r = subprocess.run([sys.executable, "-m", "agent.cli", "-p", "hi", "--engine", "openai",
                            "--base-url", f"http://127.0.0.1:{port}/v1", "-m", "m", "-C", str(repo),
                            "--output-format", fmt],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
        assert r.returncode == 1, r.stderr
        assert "Traceback" not in r.stderr
        if fmt == "text":  # what the message got (the file listing), then the one error line
            assert r.stderr.startswith("context: added to the message: file listing ("), r.stderr
            assert re.fullmatch(rf"context: [^\n]*\nspec-agent: error: cannot reach the server at http://127\.0\.0\.1:{port}"
                                r"/v1 \([^\n]*refused\) \(after 1 retries\)\n", r.stderr), r.stderr
    final = json.loads(r.stdout.splitlines()[-1])
    assert final["is_error"] and "cannot reach the server" in final["error"]


def test_wire_messages_split_results_exactly():
    out = "line\n</tool_result> inside a file\n"
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": 'x<tool_call>{"name":"read_file","arguments":{"path":"a"}}</tool_call>'
                                             '<tool_call>{"name":"git_status","arguments":{}}</tool_call>'},
            {"role": "user", "content": f'<tool_result name="read_file" status="ok">\n{out}\n</tool_result>\n'
                                        '<tool_result name="git_status" status="error">\nError: no\n</tool_result>'}]
    assert split_results(msgs[-1]["content"]) == [out, "Error: no"]
    wire = wire_messages(msgs)
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "tool", "tool"]
    assert wire[2]["content"] == "x" and wire[3]["content"] == out
    assert wire_messages(msgs + [{"role": "user", "content": "next"}])[:5] == wire


# ---- the prompt stays append-only -----------------------------------------------------------------


def test_each_request_extends_the_previous_one(repo):
    script = [tool_reply("read_file", {"path": "calc.py"}), text_reply("Read it."),
              tool_reply("edit_file", {"path": "calc.py", "edits": [{"old": "return a - b",
                                                                       "new": "return b - a"}]}),
              Reply(status=503), text_reply("Edited.")]
    with FakeServer(script) as srv:
        events = run_conversation(repo, backend(srv.url), "read calc.py", "now swap sub")
    assert not events[-1].is_error and "return b - a" in (repo / "calc.py").read_text()
    reqs = [r["messages"] for r in srv.requests]
    assert len(reqs) == 5
    for before, after in zip(reqs, reqs[1:]):
        assert after[:len(before)] == before and len(after) >= len(before)


# ---- the whole agent on the server -----------------------------------------------------------------


def test_print_mode_agent_loop_with_real_tools(repo, capsys):
    edit = {"path": "calc.py", "edits": [{"old": "return a + b", "new": "return a + b  # sum"}]}
    script = [tool_reply("read_file", {"path": "calc.py"}), tool_reply("edit_file", edit),
              tool_reply("run_shell", {"command": "grep -c sum calc.py"}), text_reply("Commented.")]
    with FakeServer(script) as srv:
        code = cli_main(["-p", "comment the sum", "--engine", "openai", "--base-url", srv.url,
                         "-C", str(repo), "--yes", "--sandbox", "off", "--output-format", "events"])
    lines = [json.loads(l) for l in capsys.readouterr().out.splitlines()]
    assert code == 0, lines[-1]
    kinds = {l["type"] for l in lines}
    assert {"tool_call_started", "tool_call_finished", "git_action", "turn_stats", "result"} <= kinds
    assert "return a + b  # sum" in (repo / "calc.py").read_text()
    assert "comment the sum" in git(repo, "log", "-1", "--format=%B")
    shell = [l for l in lines if l["type"] == "tool_call_finished" and l["name"] == "run_shell"]
    assert shell[0]["ok"] and "1" in shell[0]["output"]
    stats = [l for l in lines if l["type"] == "turn_stats"]
    assert stats[0]["backend"].startswith("openai 127.0.0.1") and stats[0]["cached_tokens"] == 40


def test_tui_runs_on_the_server_backend(repo):
    from agent.ui.tui import AgentApp

    with FakeServer([tool_reply("read_file", {"path": "README.md"}), text_reply("It is a sample.")]) as srv:
        rt = Runtime(full_auto(engine="openai", base_url=srv.url), repo)
        app = AgentApp(rt)

        async def main() -> None:
            async with app.run_test(size=(100, 30)) as pilot:
                end = time.monotonic() + 20
                while app.busy and time.monotonic() < end:
                    await pilot.pause(0.02)
                app.prompt.load_text("what is README.md?")
                await pilot.press("enter")

                def answered() -> bool:
                    msgs = rt.conversation.messages if rt.conversation else []
                    return not app.busy and msgs[-1]["content"] == "It is a sample."

                while not answered() and time.monotonic() < end:
                    await pilot.pause(0.05)
                assert answered()
                assert "openai 127.0.0.1" in app.status.model

        asyncio.run(main())
    assert len(srv.requests) == 2 and srv.requests[1]["messages"][-1]["role"] == "tool"


def test_stats_line_names_the_backend_and_invents_nothing():
    from agent.ui.render import format_stats
    from agent.ui.tui_status import Figures

    s = GenerationStats(prompt_tokens=50, cached_tokens=0, generated_tokens=9, prefill_s=0.2,
                        prefill_tps=250.0, decode_s=0.4, decode_tps=20.0, ttft_s=0.2,
                        peak_memory_gb=0.0, finish_reason="stop", backend="openai h:1 · m",
                        cache_reported=False)
    line = format_stats(s)
    assert line == "[openai h:1 · m, 9 tokens, decode 20.0 tok/s, ttft 0.20s]"
    figures = Figures().with_stats(s)
    assert figures.cache is None and figures.spec == "?"


def test_without_a_listed_model_the_server_picks_its_own():
    with FakeServer(models=()) as srv:
        b = backend(srv.url)
        turn(b)
    assert "model" not in srv.requests[0] and b.label == f"openai {srv.url[7:-3]}"
    with FakeServer([Reply(status=401, body={"error": {"message": "no key"}})]) as srv:
        b = backend(srv.url, model="m")
        with pytest.raises(ServerError, match="HTTP 401: no key"):
            turn(b)


def test_stream_json_carries_the_same_event_kinds_as_the_local_engine(repo, capsys):
    from argparse import Namespace

    from agent.commands import run_task
    from scripted import ScriptedModel, call

    edit = {"path": "calc.py", "edits": [{"old": "return a - b", "new": "return a - b  # diff"}]}
    with FakeServer([tool_reply("edit_file", edit), text_reply("Done it.")]) as srv:
        assert cli_main(["-p", "note sub", "--engine", "openai", "--base-url", srv.url, "-C",
                         str(repo), "--yes", "--output-format", "events"]) == 0
    served = [json.loads(l)["type"] for l in capsys.readouterr().out.splitlines()]
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    args = Namespace(output_format="events", repo=repo, stats=False)
    local = ScriptedModel([call("edit_file", **edit), "Done it."])
    cfg = full_auto(attach_mentioned=Config().attach_mentioned)  # as the CLI's defaults
    assert run_task("note sub", args, cfg, model=local) == 0
    scripted = [json.loads(l)["type"] for l in capsys.readouterr().out.splitlines()]
    assert served == scripted
    assert {"tool_call_started", "tool_call_finished", "git_action", "turn_stats"} <= set(served)


def test_the_server_backend_needs_no_mlx():
    """A machine that only talks to a server needs neither mlx nor a UI toolkit for the
    backend and the conversation; the tool-call grammar text is engine-neutral too."""
    from test_layering import _import_blocked

    r = _import_blocked(("mlx", "mlx_lm", "textual", "prompt_toolkit"), ("agent.engine",),
                        "agent.backends.openai, agent.backends.base, agent.core.conversation, "
                        "agent.backends.grammar")
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr


def test_cancel_while_the_server_has_not_answered_yet():
    with FakeServer([text_reply("late", delay_first=3.0)]) as srv:
        cancel = CancelToken()
        threading.Timer(0.2, cancel.cancel).start()
        t0 = time.monotonic()
        _, stats, _ = turn(backend(srv.url, model="m"), cancel=cancel)
        took = time.monotonic() - t0
    assert stats.finish_reason == "cancelled" and took < 0.6


def test_engine_openai_without_a_server_is_a_usage_error(repo, capsys):
    assert cli_main(["-p", "hi", "--engine", "openai", "-C", str(repo)]) == 2
    err = capsys.readouterr().err
    assert err == ("spec-agent: error: engine 'openai' needs a server: --base-url URL "
                   "(e.g. http://127.0.0.1:8080/v1)\n")


def test_repl_runs_on_the_server_backend(repo):
    from test_repl import make

    with FakeServer([tool_reply("read_file", {"path": "README.md"}),
                     text_reply("It is a sample.", delay_each=0.05)]) as srv:
        repl = make(repo, [], model=backend(srv.url))
        try:
            assert repl.handle_line("what is README.md?") is True
            out = repl.out.getvalue()
            meter = repl.meter.text()
        finally:
            repl.close()
    assert "It is a sample." in out and "read_file" in out
    assert "openai 127.0.0.1" in meter and "fake-model" in meter  # the backend in the toolbar
    assert "cache 7/50" in meter  # what the server reported, nothing else


def test_label_keeps_the_host_and_shortens_the_model():
    b = backend("http://gpu-box:8000/v1", model="Qwen/Qwen2.5-Coder-32B-Instruct")
    assert b.label == "openai gpu-box:8000 · Qwen2.5-Coder-32B-Instruct"

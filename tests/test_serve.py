"""`spec-agent serve` through the `openai` SDK and raw HTTP.

The tiny target/draft pair (random weights, a real BPE tokenizer with a ChatML template) is
served in-process with speculation on: greedy replies equal plain in-process decoding, seeded
sampling repeats, stop strings, JSON output under a schema, errors, cancel on disconnect,
cache reuse across requests, /metrics, the request log and --record. The embedded SmolLM2 is
served by the command line in a subprocess (OpenBLAS as the CLI loads it) for tool calls
decoded under their schemas, the API key and a tool-result round trip.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest

from agent import store
from agent.config import Config

ROOT = Path(__file__).resolve().parents[1]
SYSTEM = "You are a terse assistant. " * 12  # a shared prefix worth caching
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Write a line about cats."}]
PERSON = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "ok": {"type": "boolean"}, "tag": {"enum": ["a", "b"]}},
          "required": ["n", "ok", "tag"], "additionalProperties": False}


@pytest.fixture(scope="module")
def served(pair_dirs, tmp_path_factory):
    """The pair served in-process: (Running, log file, record file, stderr lines)."""
    from agent.serve.app import ServeOptions
    from agent.serve.server import start

    target_dir, draft_dir = pair_dirs
    d = tmp_path_factory.mktemp("serve")
    cfg = replace(Config(), model=str(target_dir), draft_model=str(draft_dir), device="cpu",
                  speculation="on", disk_cache_mb=0, prefix_cache_mb=64, max_tokens=32)
    lines: list[str] = []
    running = start(cfg, ServeOptions(port=0, log=d / "log.jsonl", record=d / "record.jsonl"), lines.append)
    yield running, d / "log.jsonl", d / "record.jsonl", lines
    running.stop()


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[0].url, api_key="unused", max_retries=0)


def model_id(client) -> str:
    return client.models.list().data[0].id


def plain_text(target, messages, max_tokens: int) -> str:
    """Plain greedy decoding in-process (no speculator), the reference."""
    from agent.engine import Session, render_chat

    return Session(target).complete(render_chat(target.tokenizer, messages), max_tokens=max_tokens).text


def test_greedy_served_text_equals_plain_decoding(client, pair):
    want = plain_text(pair[0], MESSAGES, 24)
    got = client.chat.completions.create(model=model_id(client), messages=MESSAGES, max_tokens=24,
                                         temperature=0)
    assert got.choices[0].message.content == want
    extra = got.usage.model_extra["spec_agent"]
    assert extra["rounds"] > 0 and extra["draft_tokens"] >= extra["accepted_tokens"]  # it speculated
    stream = client.chat.completions.create(model=model_id(client), messages=MESSAGES, max_tokens=24,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    assert chunks[-1].usage.completion_tokens == got.usage.completion_tokens


def test_text_completions_equal_plain_decoding(client, pair):
    from agent.engine import Session

    target = pair[0]
    prompt = "the cat sat on"
    want = Session(target).complete(list(target.tokenizer.encode(prompt)), max_tokens=16).text
    got = client.completions.create(model=model_id(client), prompt=prompt, max_tokens=16)
    assert got.choices[0].text == want
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=model_id(client), prompt=prompt, max_tokens=16, stream=True) if c.choices)
    assert streamed == want


def test_concurrent_requests_queue_and_each_equals_its_plain_reply(client, pair):
    prompts = [[{"role": "user", "content": f"Tell me about {w}."}] for w in ("dogs", "rain", "tea")]
    want = [plain_text(pair[0], m, 16) for m in prompts]
    got: dict[int, str] = {}

    def ask(i: int) -> None:
        r = client.chat.completions.create(model=model_id(client), messages=prompts[i], max_tokens=16)
        got[i] = r.choices[0].message.content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [got.get(i) for i in range(3)] == want


def test_seeded_sampling_repeats(client):
    def sample(seed: int) -> str:
        r = client.chat.completions.create(model=model_id(client), messages=MESSAGES, max_tokens=20,
                                           temperature=1.0, top_p=0.95, seed=seed)
        return r.choices[0].message.content

    first = sample(7)
    assert sample(7) == first
    assert any(sample(s) != first for s in (8, 9, 10))  # the seed decides the draws


def test_stop_strings_end_the_reply_before_them(client, pair):
    full = plain_text(pair[0], MESSAGES, 24)
    # two ASCII letters from the reply's second half (random weights also write partial UTF-8)
    stop = next(full[i:i + 2] for i in range(len(full) // 2, len(full) - 1)
                if full[i:i + 2].isascii() and full[i:i + 2].isalpha())
    want = full[: full.index(stop)]
    r = client.chat.completions.create(model=model_id(client), messages=MESSAGES, max_tokens=24, stop=[stop])
    assert r.choices[0].message.content == want and r.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=model_id(client), messages=MESSAGES, max_tokens=24, stop=stop, stream=True) if c.choices)
    assert streamed == want


def test_response_format_json_schema_is_valid_by_construction(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    for temperature in (0.0, 1.0):
        r = client.chat.completions.create(model=model_id(client), messages=MESSAGES, max_tokens=64,
                                           response_format=fmt, temperature=temperature, seed=3)
        jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)
        assert r.choices[0].finish_reason == "stop"


def test_second_request_reuses_the_first_ones_cache(client):
    first = client.chat.completions.create(model=model_id(client), messages=MESSAGES, max_tokens=8)
    follow = [*MESSAGES, {"role": "assistant", "content": first.choices[0].message.content},
              {"role": "user", "content": "And dogs?"}]
    second = client.chat.completions.create(model=model_id(client), messages=follow, max_tokens=8)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens
    assert second.usage.model_extra["spec_agent"]["cache_hit_tokens"] == cached


def _post(url: str, body, **kw) -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(url + "/chat/completions", content=content, timeout=60, **kw)


@pytest.mark.parametrize("body, status, code", [
    (b'{"messages": [', 400, None),
    ({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}, 404, "model_not_found"),
    ({"messages": [{"role": "user", "content": "hi"}], "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "objectx"}}}]}, 400, "invalid_schema"),
    ({"messages": [{"role": "user", "content": "hi"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"minimum": "zero"}}}}, 400, "invalid_schema"),
    ({"messages": [{"role": "user", "content": "cat " * 5000}]}, 400, "context_length_exceeded"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, 400, None),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, 400, None),
    ({"messages": [{"role": "user", "content": "hi"}], "temperature": -1}, 400, None),
    ({"messages": [{"role": "user", "content": "hi"}], "stream": True, "stream_options": 0}, 400, None),
    ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": "f"}}, 400, None),
])
def test_bad_requests_get_one_openai_error_and_the_server_keeps_serving(served, body, status, code):
    url = served[0].url
    r = _post(url, body)
    assert r.status_code == status
    err = r.json()["error"]
    assert err["message"] and err["code"] == code
    ok = _post(url, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] is not None


def test_client_disconnect_cancels_the_generation(served, client):
    running, log, _, _ = served
    long = client.chat.completions.create(model=model_id(client), messages=MESSAGES, max_tokens=64)
    assert long.choices[0].finish_reason == "length"  # this prompt does not end by itself early
    body = {"messages": MESSAGES, "max_tokens": 3000, "stream": True}
    with httpx.stream("POST", running.url + "/chat/completions", json=body, timeout=60) as r:
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("data:")
            if seen >= 4:
                break
    deadline = time.monotonic() + 30
    rec = None
    while time.monotonic() < deadline and rec is None:
        recs = [json.loads(x) for x in log.read_text().splitlines()]
        rec = next((x for x in reversed(recs) if x.get("finish") == "cancelled"), None)
        time.sleep(0.1)
    assert rec is not None, "no cancelled generation in the request log"
    assert 3 <= rec["completion_tokens"] < 3000
    assert rec["status"] == 499
    assert metric(running, "spec_agent_cancelled_generations") >= 1


def metric(running, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(running.url.removesuffix("/v1") + "/metrics").text
    return next(f.samples[0].value for f in text_string_to_metric_families(text) if f.name == name)


def test_metrics_are_prometheus_text(served, client):
    from prometheus_client.parser import text_string_to_metric_families

    client.chat.completions.create(model=model_id(client), messages=MESSAGES, max_tokens=8)
    text = httpx.get(served[0].url.removesuffix("/v1") + "/metrics").text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    value = {f.name: f.samples[0].value for f in fams.values() if f.samples}
    for name in ("spec_agent_generated_tokens", "spec_agent_prompt_tokens", "spec_agent_cache_hit_tokens",
                 "spec_agent_queue_depth", "spec_agent_acceptance_rate", "spec_agent_tokens_per_round",
                 "spec_agent_decode_tokens_per_second", "spec_agent_requests"):
        assert name in fams, name
    assert value["spec_agent_generated_tokens"] > 0 and value["spec_agent_decode_tokens_per_second"] > 0
    assert 0 < value["spec_agent_acceptance_rate"] <= 1 and value["spec_agent_tokens_per_round"] >= 1
    assert value["spec_agent_queue_depth"] == 0


def test_request_log_and_record_file(served, client):
    _, log, record, lines = served
    msgs = [{"role": "user", "content": "recorded prompt"}]
    client.chat.completions.create(model=model_id(client), messages=msgs, max_tokens=4)
    assert json.loads(record.read_text().splitlines()[-1]) == {"messages": msgs}
    last = json.loads(log.read_text().splitlines()[-1])
    assert last["path"] == "/v1/chat/completions" and last["status"] == 200 and last["completion_tokens"] >= 1
    assert any(line.startswith("POST /v1/chat/completions 200") for line in lines)


def test_a_port_in_use_is_one_error():
    from agent.serve.server import ServeError, _bind

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(ServeError, match="cannot listen on 127.0.0.1"):
            _bind("127.0.0.1", s.getsockname()[1])


def test_cli_refuses_options_serve_ignores(capsys):
    from agent.cli import main

    assert main(["--yes", "serve"]) == 2
    assert "--yes" in capsys.readouterr().err
    assert main(["serve", "--port", "70000"]) == 2


# ---- the embedded model, served by the command line ---------------------------------------

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 16}},
        "required": ["zone"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
                                           "parameters": TIME}}]
KEY = "test-key-123"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def embedded_url(tmp_path_factory):
    if not store.is_present():
        pytest.skip(f"embedded model not pulled (run: {store.PULL_HINT})")
    port = _free_port()
    out = tmp_path_factory.mktemp("serve-cli") / "stderr.txt"
    env = {**os.environ, "SPEC_AGENT_DISK_CACHE_MB": "0", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "serve", "-m", "embedded", "--port",
                             str(port), "--api-key", KEY, "--max-tokens", "48"],
                            stdout=subprocess.DEVNULL, stderr=out.open("w"), env=env, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, out.read_text()
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        yield base + "/v1"
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.embedded
def test_api_key_is_required(embedded_url):
    assert httpx.get(embedded_url + "/models").status_code == 401
    wrong = openai.OpenAI(base_url=embedded_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    assert openai.OpenAI(base_url=embedded_url, api_key=KEY).models.list().data[0].id == "embedded"


@pytest.mark.embedded
def test_tool_calls_are_valid_against_their_schemas(embedded_url):
    client = openai.OpenAI(base_url=embedded_url, api_key=KEY, max_retries=0)
    ask = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
    r = client.chat.completions.create(model="embedded", messages=ask, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1
    schemas = {"get_weather": WEATHER, "get_time": TIME}
    jsonschema.validate(json.loads(calls[0].function.arguments), schemas[calls[0].function.name])
    named = client.chat.completions.create(
        model="embedded", messages=ask, tools=TOOLS, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    deltas = [tc for c in named if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas and all(d.function.name == "get_time" for d in deltas)
    for d in deltas:
        jsonschema.validate(json.loads(d.function.arguments), TIME)
    # the call and its result sent back (what a client does next) render and decode
    follow = [*ask, {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in calls]},
              {"role": "tool", "tool_call_id": calls[0].id, "content": "18 degrees, sunny"}]
    again = client.chat.completions.create(model="embedded", messages=follow, tools=TOOLS, max_tokens=16)
    assert again.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert again.usage.prompt_tokens_details.cached_tokens > 0


@pytest.mark.embedded
def test_a_call_cut_by_max_tokens_comes_back_as_text_with_finish_length(embedded_url):
    client = openai.OpenAI(base_url=embedded_url, api_key=KEY, max_retries=0)
    ask = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
    r = client.chat.completions.create(model="embedded", messages=ask, tools=TOOLS, tool_choice="required",
                                       max_tokens=4)
    choice = r.choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    assert choice.message.content.startswith("<tool_call>") and len(choice.message.content) > 11


@pytest.mark.embedded
def test_the_ai_sdk_request_shape_gets_a_call_and_usage(embedded_url):
    """As @ai-sdk/openai-compatible (opencode) sends it: `$schema` and `strict` in the tool,
    text parts, `user`, penalties, usage asked of the stream."""
    params = {"$schema": "http://json-schema.org/draft-07/schema#", **TIME}
    body = {"model": "embedded", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Time in UTC?"}]}],
            "tools": [{"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
                                                        "parameters": params, "strict": False}}],
            "tool_choice": "required", "max_tokens": 64, "temperature": 0, "top_p": 1, "user": "u1",
            "frequency_penalty": 0, "presence_penalty": 0}
    with httpx.stream("POST", embedded_url + "/chat/completions", json=body, timeout=120,
                      headers={"Authorization": f"Bearer {KEY}"}) as r:
        assert r.status_code == 200
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    calls = [tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert calls and all(c["function"]["name"] == "get_time" for c in calls)
    for c in calls:
        jsonschema.validate(json.loads(c["function"]["arguments"]), TIME)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0

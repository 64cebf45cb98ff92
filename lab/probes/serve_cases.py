"""Requests for the serve-goal probes: malformed ones (each must get a 4xx and OpenAI's error
object), small valid chats, and tool-call requests over varied JSON Schemas.

Only lab/probes/serve_goals.py imports this.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
USER = [{"role": "user", "content": "hi"}]


@dataclass(frozen=True)
class Case:
    name: str
    body: bytes
    path: str = CHAT
    method: str = "POST"


def _chat(**over: Any) -> dict[str, Any]:
    return {"messages": USER, "max_tokens": 4, **over}


def _j(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _deep(depth: int) -> bytes:
    return b'{"messages": ' + b"[" * depth + b"]" * depth + b"}"


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
# (name, body maker given a variant number); every body is refused with a 4xx
MALFORMED: list[tuple[str, Callable[[int], bytes]]] = [
    ("not-json", lambda i: b"{nope " + str(i).encode()),
    ("empty-body", lambda i: b""),
    ("truncated-json", lambda i: _j(_chat(seed=i))[:-3]),
    ("invalid-utf8", lambda i: b'{"messages": [{"role": "user", "content": "\xff\xfe' + str(i).encode() + b'"}]}'),
    ("array-body", lambda i: _j([_chat()])),
    ("string-body", lambda i: _j(f"hello {i}")),
    ("null-body", lambda i: b"null"),
    ("no-messages", lambda i: _j({"max_tokens": i + 1})),
    ("empty-messages", lambda i: _j(_chat(messages=[]))),
    ("messages-not-list", lambda i: _j(_chat(messages=f"hi {i}"))),
    ("message-not-object", lambda i: _j(_chat(messages=["hi", i]))),
    ("bad-role", lambda i: _j(_chat(messages=[{"role": f"wizard{i}", "content": "x"}]))),
    ("content-int", lambda i: _j(_chat(messages=[{"role": "user", "content": i}]))),
    ("content-image", lambda i: _j(_chat(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"http://x/{i}.png"}}]}]))),
    ("content-part-text-int", lambda i: _j(_chat(messages=[{"role": "user", "content": [
        {"type": "text", "text": i}]}]))),
    ("temperature-string", lambda i: _j(_chat(temperature=f"hot{i}"))),
    ("temperature-negative", lambda i: _j(_chat(temperature=-1 - i))),
    ("temperature-nan", lambda i: b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}'),
    ("temperature-bool", lambda i: _j(_chat(temperature=True))),
    ("top-p-range", lambda i: _j(_chat(top_p=2 + i))),
    ("top-k-string", lambda i: _j(_chat(top_k="k"))),
    ("max-tokens-zero", lambda i: _j(_chat(max_tokens=0))),
    ("max-tokens-negative", lambda i: _j(_chat(max_tokens=-i - 1))),
    ("max-tokens-float", lambda i: _j(_chat(max_tokens=1.5 + i))),
    ("max-tokens-string", lambda i: _j(_chat(max_tokens=f"{i}"))),
    ("stream-string", lambda i: _j(_chat(stream="yes"))),
    ("stream-options-int", lambda i: _j(_chat(stream=True, stream_options=i))),
    ("stop-int", lambda i: _j(_chat(stop=i))),
    ("stop-too-many", lambda i: _j(_chat(stop=[str(j) for j in range(5 + i % 5)]))),
    ("seed-string", lambda i: _j(_chat(seed=f"s{i}"))),
    ("n-two", lambda i: _j(_chat(n=2 + i % 3))),
    ("logprobs", lambda i: _j(_chat(logprobs=True))),
    ("unknown-model", lambda i: _j(_chat(model=f"gpt-{i}"))),
    ("model-int", lambda i: _j(_chat(model=i))),
    ("model-list", lambda i: _j(_chat(model=["a", i]))),
    ("deep-json", lambda i: _deep(5000 + i)),
    ("tools-not-list", lambda i: _j(_chat(tools={"f": i}))),
    ("tool-not-object", lambda i: _j(_chat(tools=[f"f{i}"]))),
    ("tool-no-name", lambda i: _j(_chat(tools=[{"type": "function", "function": {"parameters": {}}}]))),
    ("tool-bad-name", lambda i: _j(_chat(tools=[{"type": "function", "function": {"name": f"a b {i}"}}]))),
    ("tool-duplicate", lambda i: _j(_chat(tools=[TOOL, TOOL]))),
    ("tool-schema-type-int", lambda i: _j(_chat(tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": i}}}]))),
    ("tool-schema-string", lambda i: _j(_chat(tools=[{"type": "function", "function": {
        "name": "f", "parameters": f"object {i}"}}]))),
    ("tool-schema-bad-ref", lambda i: _j(_chat(tool_choice="required", tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {
            "a": {"$ref": f"#/$defs/missing{i}"}}, "required": ["a"]}}}]))),
    ("tool-schema-lookbehind", lambda i: _j(_chat(tool_choice="required", tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {
            "a": {"type": "string", "pattern": f"(?<=x)y{i}"}}, "required": ["a"]}}}]))),
    ("response-format-type", lambda i: _j(_chat(response_format={"type": f"xml{i}"}))),
    ("response-format-string", lambda i: _j(_chat(response_format="json"))),
    ("response-format-no-schema", lambda i: _j(_chat(response_format={"type": "json_schema",
                                                                       "json_schema": {"name": "x"}}))),
    ("response-format-bad-schema", lambda i: _j(_chat(response_format={"type": "json_schema", "json_schema": {
        "schema": {"type": "object", "minProperties": -1 - i}}}))),
    ("tool-choice-word", lambda i: _j(_chat(tools=[TOOL], tool_choice=f"sometimes{i}"))),
    ("tool-choice-int", lambda i: _j(_chat(tools=[TOOL], tool_choice=i))),
    ("tool-choice-unknown-fn", lambda i: _j(_chat(tools=[TOOL], tool_choice={
        "type": "function", "function": {"name": f"g{i}"}}))),
    ("tool-choice-function-string", lambda i: _j(_chat(tools=[TOOL], tool_choice={
        "type": "function", "function": "f"}))),
    ("tool-choice-required-no-tools", lambda i: _j(_chat(tool_choice="required"))),
    ("assistant-tool-calls-string", lambda i: _j(_chat(messages=[
        {"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": f"f{i}"}]))),
    ("assistant-tool-call-no-fn", lambda i: _j(_chat(messages=[
        {"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": i, "function": 5}]}]))),
    ("assistant-tool-call-args-int", lambda i: _j(_chat(messages=[
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": i}}]}]))),
    ("context-overflow", lambda i: _j(_chat(messages=[{"role": "user", "content": (f"word{i} ") * 12000}]))),
    ("completion-no-prompt", lambda i: _j({"max_tokens": i + 1})),
    ("completion-empty-ids", lambda i: _j({"prompt": []})),
    ("completion-negative-id", lambda i: _j({"prompt": [1, -1 - i]})),
    ("completion-huge-id", lambda i: _j({"prompt": [10 ** 12 + i]})),
    ("completion-bool-ids", lambda i: _j({"prompt": [True, False]})),
    ("completion-prompt-int", lambda i: _j({"prompt": i})),
    ("completion-overflow", lambda i: _j({"prompt": list(range(1, 9000 + i))})),
    ("unknown-path", lambda i: b"{}"),
    ("wrong-method", lambda i: b""),
    ("body-too-large", lambda i: b'{"messages": "' + b"x" * (33 << 20) + b'"}'),
]
PATHS = {"unknown-path": "/v1/engines/x", "wrong-method": CHAT}
METHODS = {"wrong-method": "GET"}
RARE = {"body-too-large": 5}  # one request in N (a 33 MB body each)


def malformed(n: int) -> Iterator[Case]:
    """`n` malformed requests, cycling through MALFORMED with varied bodies."""
    sent, i = 0, 0
    while sent < n:
        name, make = MALFORMED[i % len(MALFORMED)]
        variant = i // len(MALFORMED)
        i += 1
        if name in RARE and variant % RARE[name]:
            continue
        path = PATHS.get(name, COMPLETIONS if name.startswith("completion-") else CHAT)
        yield Case(name, make(variant), path, METHODS.get(name, "POST"))
        sent += 1


TOPICS = ["a haiku about tests", "what 2+2 is", "a Python tip", "the colour of the sky", "a name for a cat"]


def valid(i: int) -> dict[str, Any]:
    """A small valid chat request (some streamed, some with stop strings or a seed)."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": f"Tell me {TOPICS[i % 5]} ({i})."}],
                            "max_tokens": 8 + i % 8, "temperature": 0.0 if i % 3 else 0.7, "seed": i}
    if i % 4 == 1:
        body["stream"] = True
    if i % 7 == 2:
        body["stop"] = ["\n\n"]
    return body


def _fn(name: str, description: str, parameters: dict) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": parameters}}


TOOLS = [
    _fn("get_weather", "Current weather for a city", {
        "type": "object", "properties": {
            "city": {"type": "string", "minLength": 1},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"], "additionalProperties": False}),
    _fn("read_file", "Read lines of a file", {
        "type": "object", "properties": {
            "path": {"type": "string", "pattern": "^[A-Za-z0-9_./-]+$"},
            "start": {"type": "integer", "minimum": 1}, "end": {"type": "integer", "minimum": 1}},
        "required": ["path"], "additionalProperties": False}),
    _fn("create_issue", "Open an issue in the tracker", {
        "type": "object", "properties": {
            "title": {"type": "string", "maxLength": 80},
            "labels": {"type": "array", "items": {"type": "string", "enum": ["bug", "feature", "docs"]},
                       "maxItems": 3},
            "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            "assignee": {"type": ["string", "null"]}},
        "required": ["title", "labels"], "additionalProperties": False}),
    _fn("run_tests", "Run the test suite", {
        "type": "object", "properties": {
            "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "verbose": {"type": "boolean"},
            "options": {"type": "object", "properties": {"timeout_s": {"type": "number", "exclusiveMinimum": 0},
                                                         "workers": {"type": "integer", "enum": [1, 2, 4]}},
                        "additionalProperties": False}},
        "required": ["paths"], "additionalProperties": False}),
    _fn("search_code", "Search the repository", {
        "type": "object", "properties": {
            "query": {"type": "string"},
            "kind": {"anyOf": [{"const": "regex"}, {"const": "literal"}]},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 50}},
        "required": ["query", "kind"], "additionalProperties": False}),
]
ASKS = [
    "What is the weather in Paris in celsius?",
    "Show me lines 10 to 20 of src/main.py.",
    "File a bug titled 'crash on empty input' with priority 2.",
    "Run the tests in tests/test_api.py verbosely with 2 workers.",
    "Find where the function parse_args is defined.",
    "Is it raining in Tokyo?",
    "Open README.md.",
    "Create a docs issue about the missing install section.",
    "Run all tests under tests/ with a 30 second timeout.",
    "Search for TODO comments, literally.",
]


def tool_request(i: int) -> dict[str, Any]:
    """Request `i`: 3 to 5 tools, tool_choice auto, required or one named tool in turn."""
    k = 3 + i % 3
    tools = [TOOLS[(i + j) % len(TOOLS)] for j in range(k)]
    choice: Any = ["auto", "required", "named"][i % 3]
    if choice == "named":
        choice = {"type": "function", "function": {"name": tools[i % k]["function"]["name"]}}
    return {"messages": [{"role": "user", "content": ASKS[i % len(ASKS)]}], "tools": tools,
            "tool_choice": choice, "max_tokens": 96, "temperature": 0.0 if i % 2 else 0.8, "seed": i,
            "stream": False}

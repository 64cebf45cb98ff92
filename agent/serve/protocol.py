"""The OpenAI API's shapes: requests read and checked into frozen objects, responses built.

`parse_chat` and `parse_completion` turn a request body (already JSON-decoded) into a
`ChatRequest` / `CompletionRequest` or raise `ApiError` with the HTTP status and the one
message the client gets (OpenAI's error object: `{"error": {"message", "type", "param",
"code"}}`). Response helpers build the `chat.completion`, `chat.completion.chunk`,
`text_completion` objects and `usage` with our figures in `usage.spec_agent`.
Nothing here renders prompts, touches a tokenizer or runs the model.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..choices import RANGES
from ..events import GenerationStats

ROLES = ("system", "developer", "user", "assistant", "tool")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names
MAX_STOPS = 4  # OpenAI's limit on `stop` strings
MAX_TOOLS = 128


class ApiError(Exception):
    """A request the server refuses: `status` and OpenAI's error object."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


@dataclass(frozen=True)
class Sampling:
    """What a request asks of the sampler and the stop rules (server defaults filled in)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    max_tokens: int = 512


@dataclass(frozen=True)
class Tool:
    """One function the model may call; `schema` is its `parameters` JSON Schema."""

    name: str
    description: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    sampling: Sampling
    stream: bool = False
    include_usage: bool = False
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"  # auto | none | required | the name of the one tool to call
    parallel_tool_calls: bool = True
    response_schema: dict[str, Any] | None = None  # response_format json_schema / json_object
    raw: dict[str, Any] = field(default_factory=dict, compare=False)  # the body, for --record


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompt: str | list[int]
    sampling: Sampling
    stream: bool = False
    include_usage: bool = False


def _bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param, code)


def _number(body: dict, key: str, default: float, kind: type = float) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise _bad(f"'{key}' must be {'an integer' if kind is int else 'a number'}, got {value!r}", key)
    if key in RANGES:
        ok, must = RANGES[key]
        if not ok(value):
            raise _bad(f"'{key}' must be {must}, got {value!r}", key)
    return kind(value)


def _sampling(body: dict, defaults: Sampling) -> Sampling:
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOPS:
        stops = tuple(s for s in stop if s)
    else:
        raise _bad(f"'stop' must be a string or a list of at most {MAX_STOPS} strings", "stop")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _bad(f"'seed' must be an integer, got {seed!r}", "seed")
    limit_key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _number(body, limit_key, defaults.max_tokens, int)
    if max_tokens < 1:
        raise _bad(f"'{limit_key}' must be >= 1, got {max_tokens}", limit_key)
    n = body.get("n", 1)
    if n != 1:
        raise _bad("only n = 1 is supported", "n")
    if body.get("logprobs") or body.get("top_logprobs") or body.get("echo") or body.get("best_of", 1) != 1:
        raise _bad("logprobs, top_logprobs, echo and best_of are not supported", "logprobs")
    return Sampling(
        temperature=_number(body, "temperature", defaults.temperature),
        top_p=_number(body, "top_p", defaults.top_p),
        top_k=_number(body, "top_k", defaults.top_k, int),
        min_p=_number(body, "min_p", defaults.min_p),
        seed=seed, stop=stops, max_tokens=max_tokens,
    )


def _model(body: dict, served: tuple[str, ...]) -> str:
    model = body.get("model")
    if model is None:
        return served[0]
    if not isinstance(model, str) or model not in served:
        raise ApiError(404, f"The model '{model}' does not exist; this server serves '{served[0]}'",
                       "model", "model_not_found")
    return model


def _stream_flags(body: dict) -> tuple[bool, bool]:
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean", "stream")
    opts = body.get("stream_options")
    opts = {} if opts is None else opts
    if not isinstance(opts, dict):
        raise _bad("'stream_options' must be an object", "stream_options")
    return stream, bool(opts.get("include_usage", False))


def _text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _bad(f"{where}: only text content parts are supported", "messages")
            out.append(part["text"])
        return "".join(out)
    raise _bad(f"{where}: 'content' must be a string or a list of text parts", "messages")


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise _bad(f"{where}: 'tool_calls' must be a list", "messages")
    out = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _bad(f"{where}: each tool call needs a function with a name", "messages")
        args = fn.get("arguments", "{}")
        if not isinstance(args, (str, dict)):
            raise _bad(f"{where}: a tool call's arguments must be a JSON string", "messages")
        out.append({"id": str(call.get("id", "")), "name": fn["name"], "arguments": args})
    return out


def _messages(value: Any) -> list[dict[str, Any]]:
    """The messages as {role, content[, tool_calls][, tool_call_id]} with text content."""
    if not isinstance(value, list) or not value:
        raise _bad("'messages' must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise _bad(f"{where}: 'role' must be one of {', '.join(ROLES)}", "messages")
        role = "system" if m["role"] == "developer" else m["role"]
        msg: dict[str, Any] = {"role": role, "content": _text_of(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = _tool_calls(m["tool_calls"], where)
        if role == "tool":
            msg["tool_call_id"] = str(m.get("tool_call_id", ""))
        out.append(msg)
    return out


def _check_schema(schema: Any, param: str) -> dict[str, Any]:
    """`schema` if it is a valid JSON Schema object (400 otherwise)."""
    import jsonschema

    if not isinstance(schema, dict):
        raise _bad(f"'{param}' must be a JSON Schema object", param, "invalid_schema")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        raise _bad(f"'{param}' is not a valid JSON Schema: {e.message}", param, "invalid_schema") from None
    return schema


def _tools(body: dict) -> tuple[Tool, ...]:
    tools = body.get("tools")
    if tools is None:
        return ()
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise _bad(f"'tools' must be a list of at most {MAX_TOOLS} tools", "tools")
    out, seen = [], set()
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) and t.get("type", "function") == "function" else None
        if not isinstance(fn, dict):
            raise _bad(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}", "tools")
        name = fn.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name) or name in seen:
            raise _bad(f"tools[{i}]: the function name must be 1-64 letters, digits, _ or - and "
                       "unique", "tools")
        seen.add(name)
        params = fn.get("parameters", {"type": "object", "properties": {}})
        out.append(Tool(name, str(fn.get("description", "")),
                        _check_schema(params, f"tools[{i}].function.parameters")))
    return tuple(out)


def _tool_choice(body: dict, tools: tuple[Tool, ...]) -> str:
    choice = body.get("tool_choice", "auto" if tools else "none")
    if isinstance(choice, dict):
        fn = choice.get("function") if choice.get("type") == "function" else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if name not in {t.name for t in tools}:
            raise _bad("'tool_choice' names a function that is not in 'tools'", "tool_choice")
        return name
    if choice not in ("auto", "none", "required"):
        raise _bad("'tool_choice' must be auto, none, required or {'type': 'function', ...}",
                   "tool_choice")
    if choice == "required" and not tools:
        raise _bad("'tool_choice' required needs 'tools'", "tool_choice")
    return choice if tools else "none"


def _response_schema(body: dict) -> dict[str, Any] | None:
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise _bad("'response_format.json_schema' needs a 'schema'", "response_format")
        return _check_schema(spec["schema"], "response_format.json_schema.schema")
    raise _bad("'response_format.type' must be text, json_object or json_schema", "response_format")


def parse_chat(body: Any, served: tuple[str, ...], defaults: Sampling) -> ChatRequest:
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = _model(body, served)
    tools = _tools(body)
    stream, include_usage = _stream_flags(body)
    parallel = body.get("parallel_tool_calls", True)
    return ChatRequest(model=model, messages=_messages(body.get("messages")),
                       sampling=_sampling(body, defaults), stream=stream,
                       include_usage=include_usage, tools=tools,
                       tool_choice=_tool_choice(body, tools),
                       parallel_tool_calls=parallel is not False,
                       response_schema=_response_schema(body), raw=body)


def parse_completion(body: Any, served: tuple[str, ...], defaults: Sampling) -> CompletionRequest:
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = _model(body, served)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    ok_ids = isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool)
                                                         for t in prompt)
    if not (isinstance(prompt, str) and prompt) and not ok_ids:
        raise _bad("'prompt' must be a non-empty string (or a list of token ids)", "prompt")
    stream, include_usage = _stream_flags(body)
    return CompletionRequest(model=model, prompt=prompt, sampling=_sampling(body, defaults),
                             stream=stream, include_usage=include_usage)


# ---- responses ---------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(stats: GenerationStats | None) -> dict[str, Any]:
    """OpenAI's `usage`, `prompt_tokens_details.cached_tokens`, and ours in `spec_agent`."""
    if stats is None:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.generated_tokens,
        "total_tokens": stats.prompt_tokens + stats.generated_tokens,
        "prompt_tokens_details": {"cached_tokens": stats.cached_tokens},
        "spec_agent": {
            "speculative": stats.speculative,
            "drafter": stats.drafter,
            "rounds": stats.rounds,
            "draft_tokens": stats.drafted,
            "accepted_tokens": stats.accepted,
            "accepted_per_round": round(stats.mean_accepted, 4),
            "acceptance": round(stats.acceptance_rate, 4),
            "cache_hit_tokens": stats.cached_tokens,
            "tok_per_s": round(stats.decode_tps, 3),
            "prefill_tok_per_s": round(stats.prefill_tps, 3),
            "ttft_s": round(stats.ttft_s, 4),
        },
    }


def finish_reason(engine_reason: str, calls: int) -> str | None:
    """OpenAI's finish_reason for the engine's (None for a generation the client left)."""
    if engine_reason == "cancelled":
        return None
    if calls:
        return "tool_calls"
    return "length" if engine_reason == "length" else "stop"


def tool_call_json(index: int, call_id: str, name: str, arguments: str, delta: bool) -> dict[str, Any]:
    out = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"index": index, **out} if delta else out


def chat_response(rid: str, model: str, content: str, calls: list[dict[str, Any]], finish: str | None,
                  stats: GenerationStats | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": usage(stats)}


def chat_chunk(rid: str, model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}


def usage_chunk(rid: str, model: str, obj: str, stats: GenerationStats | None) -> dict[str, Any]:
    return {"id": rid, "object": obj, "created": int(time.time()), "model": model, "choices": [],
            "usage": usage(stats)}


def completion_response(rid: str, model: str, text: str, finish: str | None,
                        stats: GenerationStats | None, stream: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]}
    if not stream:
        out["usage"] = usage(stats)
    return out

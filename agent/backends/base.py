"""The seam between the conversation and whoever produces tokens: the `Backend` protocol, and
the conversation's messages in the chat-completions shape both backends send to a template.

A backend streams one assistant turn for the conversation's messages. The conversation keeps
its history as plain text: an assistant message holds its calls as `<tool_call>` blocks and
the results go back as one user message of `<tool_result>` blocks (agent/core/callformat.py).
A backend whose model has its own tool format (a chat template that takes `tools`, or a
server's `tools` parameter) gets the same history as `wire_messages`: assistant messages
with `tool_calls` (or their raw text) and one `tool` message per result. The conversion is a
pure function of the history, so each request's messages extend the previous request's and
prefix caches keep hitting. Nothing here imports the engine, a UI or an HTTP client.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator, Mapping, Protocol

from ..cancel import CancelToken
from ..core.callformat import RESULT_OPEN, call_bodies, decode_call_json, strip_calls
from ..events import Event


class ModelError(Exception):
    """The backend could not produce a turn (context full, server down, HTTP error); ends
    the message with this text as its error. The text never holds a credential of our
    environment (a server that echoes the Authorization header would otherwise get the API
    key printed): every such value is redacted here, where each backend error is made."""

    def __init__(self, message: object = "", *args: object):
        from tools.environ import redact

        super().__init__(redact(str(message)), *args)


class Backend(Protocol):
    """Produces assistant turns. `native_tools`: the tool schemas reach the model through
    its own tool format (the system prompt then does not list them). `label`: what status
    bars show, e.g. "local" or "openai 127.0.0.1:8080"."""

    native_tools: bool
    label: str

    def generate(self, messages: list[dict[str, str]], cancel: CancelToken) -> Iterator[Event]:
        """Stream one assistant turn: `TextDelta`s (calls as `<tool_call>` text), progress
        events, then exactly one `GenerationStats` (finish_reason "cancelled" when `cancel`
        stopped it). Raises ModelError when no turn can be produced."""
        ...


def tool_specs(tools: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chat-completions `tools` list for `tools` (name → tools.Tool)."""
    return [{"type": "function",
             "function": {"name": t.name, "description": t.description, "parameters": t.schema}}
            for t in tools.values()]


_RESULT_HEAD = re.compile(r'^<tool_result name="[^"\n]*" status="(?:ok|error)">\n', re.MULTILINE)


def split_results(content: str) -> list[str]:
    """The outputs of a `<tool_result>` message, in call order."""
    starts = [m for m in _RESULT_HEAD.finditer(content)]
    out = []
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(content)
        body = content[m.end():end]
        if i + 1 < len(starts):
            body = body.removesuffix("\n")  # the newline joining two results
        out.append(body.removesuffix("\n</tool_result>"))
    return out


def _wire_call(call_id: str, body: str) -> dict[str, Any]:
    obj = decode_call_json(body)
    name = obj.get("name") if isinstance(obj, dict) and isinstance(obj.get("name"), str) else "invalid"
    args = obj.get("arguments", obj.get("parameters", {})) if isinstance(obj, dict) else body
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def wire_messages(messages: list[dict[str, str]], raw_calls: bool = False) -> list[dict[str, Any]]:
    """`messages` with tool calls and results in the chat-completions shape.

    An assistant message's calls become `tool_calls` with ids derived from its position
    (`raw_calls=True` keeps the assistant text as the model wrote it instead: a local
    template then renders exactly the tokens the model produced). Its results message
    becomes one `tool` message per call; calls that got no result (a run stopped for an
    approval) get a "not run" result so that the history stays well-formed."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # ids of the last assistant message's calls awaiting results
    for i, m in enumerate(messages):
        role, content = m["role"], m["content"]
        if role == "user" and pending and content.startswith(RESULT_OPEN):
            results = split_results(content)
            for k, call_id in enumerate(pending):
                out.append({"role": "tool", "tool_call_id": call_id,
                            "content": results[k] if k < len(results) else "Error: no result"})
            pending = []
            continue
        for call_id in pending:
            out.append({"role": "tool", "tool_call_id": call_id,
                        "content": "Error: not run (the run stopped before this call)"})
        pending = []
        if role != "assistant":
            out.append({"role": role, "content": content})
            continue
        bodies = call_bodies(content)
        ids = [f"call_{i}_{k}" for k in range(len(bodies))]
        if raw_calls or not bodies:
            out.append({"role": "assistant", "content": content})
        else:
            out.append({"role": "assistant", "content": strip_calls(content),
                        "tool_calls": [_wire_call(c, b) for c, b in zip(ids, bodies)]})
        pending = ids
    return out

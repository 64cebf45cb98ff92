"""The tool-call format, in one place: markers, parsing, stripping, and result formatting.

A call is written as `<tool_call>{"name": "...", "arguments": {...}}</tool_call>` (the format
Qwen2.5's chat template uses; the embedded SmolLM2 has none of its own, so it learns this one
from the system prompt). A reply that is nothing but one call object, without the markers
(`{"name": "read_file", "arguments": {...}}`, or `"parameters"` as Llama 3.x writes it), naming
one of the tools, counts as that call: small models often drop the markers. Results go back to the model as `<tool_result ...>` blocks in a user
message. The grammar that constrains calls (agent/backends/grammar.py) uses the same markers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tools import ToolResult, validate

from ..safe_input import check_depth, clean_value, loads

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|\Z)", re.DOTALL)
_FENCE = re.compile(r"\A```(?:json)?\s*\n(.*?)\n?```\Z", re.DOTALL)


def _bare_call(text: str) -> str | None:
    """`text` as a call body when it is only a call object naming a tool (fenced or not)."""
    from tools import TOOLS

    body = text.strip()
    fenced = _FENCE.match(body)
    body = fenced.group(1).strip() if fenced else body
    if not (body.startswith("{") and body.endswith("}") and '"name"' in body):
        return None
    try:
        obj = loads(body)
    except json.JSONDecodeError:
        return None
    args = obj.get("arguments", obj.get("parameters")) if isinstance(obj, dict) else None
    return body if obj.get("name") in TOOLS and isinstance(args, (dict, str)) else None


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: dict[str, Any]
    error: str = ""  # why the call could not be parsed or validated


def decode_call_json(body: str) -> Any:
    """The JSON value a call's body starts with (text before the first `{` is skipped).
    Raises json.JSONDecodeError; a body without `{` decodes to None."""
    start = body.find("{")
    if start < 0:
        return None
    check_depth(body[start:])
    obj, _ = json.JSONDecoder().raw_decode(body[start:])
    return clean_value(obj)


def _decode_call(body: str) -> ParsedCall:
    if body.find("{") < 0:
        return ParsedCall("?", {}, "a tool call must be a JSON object")
    try:
        obj = decode_call_json(body)
    except json.JSONDecodeError as e:
        return ParsedCall("?", {}, f"the tool call is not valid JSON ({e.msg} at char {e.pos})")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ParsedCall("?", {}, 'a tool call needs {"name": ..., "arguments": {...}}')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = loads(args)
        except json.JSONDecodeError:
            pass
    problem = validate(obj["name"], args)
    return ParsedCall(obj["name"], args if isinstance(args, dict) else {}, problem)


def call_bodies(text: str) -> list[str]:
    """The text inside every `<tool_call>…</tool_call>` in `text` (an unclosed last one too),
    or the whole reply when it is a bare call object."""
    bodies = [m.group(1) for m in _CALL.finditer(text)]
    if bodies:
        return bodies
    bare = _bare_call(text)
    return [bare] if bare is not None else []


def parse_calls(text: str) -> list[ParsedCall]:
    """Every `<tool_call>…</tool_call>` in `text` (an unclosed last one counts too)."""
    return [_decode_call(body) for body in call_bodies(text)]


def strip_calls(text: str) -> str:
    """`text` without its tool calls (an unclosed last one included)."""
    if _CALL.search(text) is None and _bare_call(text) is not None:
        return ""
    return _CALL.sub("", text).strip()


RESULT_OPEN = "<tool_result"


def format_result(name: str, result: ToolResult) -> str:
    status = "ok" if result.ok else "error"
    return f'{RESULT_OPEN} name="{name}" status="{status}">\n{result.output}\n</tool_result>'


def is_first_turn(messages: list[dict[str, str]]) -> bool:
    """True when the model has not replied yet to the user's latest message (tool results,
    user messages too, do not count as the user's)."""
    for m in reversed(messages):
        if m["role"] == "assistant":
            return False
        if m["role"] == "user" and not m["content"].startswith(RESULT_OPEN):
            return True
    return True


def read_paths(messages: list[dict[str, str]]) -> list[str]:
    """Paths the model asked to read in earlier turns, most recent first."""
    paths: list[str] = []
    for m in reversed(messages):
        if m["role"] == "assistant":
            paths += [c.arguments["path"] for c in parse_calls(m["content"])
                      if c.name == "read_file" and not c.error]
    return list(dict.fromkeys(paths))

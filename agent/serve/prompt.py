"""A request's prompt tokens and its grammar: chat messages through the model's template, the
tools in the template's own format or listed in the system prompt, and the llguidance
grammars that make tool calls and `response_format` JSON valid by construction.

Calls are written as the local engine writes them (agent/core/callformat.py):
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, compact JSON under
agent/backends/grammar.py's `tool_call_grammar`. An assistant message's `tool_calls` from the
client are rendered back as that text, so the next request's prompt starts with what the model
wrote and the session's cache keeps serving it. A template without a tool format (SmolLM2's)
gets the tools as Hermes-style text in the system prompt and tool results as user messages.
Nothing here runs the model.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from ..backends.grammar import tool_call_grammar
from ..core.callformat import CLOSE, OPEN
from .protocol import Tool

MAX_PARALLEL_CALLS = 8  # calls one reply may make

TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n")
TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def tool_specs(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.schema}} for t in tools]


def call_text(name: str, arguments: str | dict) -> str:
    """One call as the grammar has the model write it."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        args = arguments  # kept as the client sent it: the model sees what it was told it wrote
    body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False, separators=(",", ":"))
    return f"{OPEN}\n{body}\n{CLOSE}"


def template_messages(messages: list[dict[str, Any]], tools: Sequence[Tool], native: bool) -> list[dict[str, str]]:
    """`messages` for the chat template: calls as text; without `native` tool support, tool
    results as one user message per run of results and the tools in the system prompt."""
    out: list[dict[str, str]] = []
    for m in messages:
        role, content = m["role"], m["content"]
        if role == "assistant" and m.get("tool_calls"):
            calls = "\n".join(call_text(c["name"], c["arguments"]) for c in m["tool_calls"])
            out.append({"role": "assistant", "content": f"{content}\n{calls}" if content else calls})
        elif role == "tool" and not native:
            block = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + block}
            else:
                out.append({"role": "user", "content": block})
        else:
            out.append({"role": role, "content": content})
    if tools and not native:
        listing = TOOLS_HEADER + "\n".join(json.dumps(s, ensure_ascii=False) for s in tool_specs(tools)) \
            + TOOLS_FOOTER
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{listing}"}
        else:
            out.insert(0, {"role": "system", "content": listing})
    return out


def _json_rule(schema: dict[str, Any]) -> str:
    """A `%json` rule body: compact (a small model given free whitespace can spend its whole
    budget on blank lines)."""
    return "%json " + json.dumps({**schema, "x-guidance": {"whitespace_flexible": False}})


def json_grammar(schema: dict[str, Any]) -> str:
    """The grammar of a reply that is one JSON value under `schema`."""
    return f"start: {_json_rule(schema)}\n"


def calls_grammar(tools: Sequence[Tool], parallel: bool) -> str:
    """The grammar of what follows `<tool_call>`: one call (or, `parallel`, up to
    MAX_PARALLEL_CALLS, each opened on a new line), each closed by `</tool_call>`; valid
    arguments under each tool's schema. The model's end-of-text token ends the reply."""
    one = tool_call_grammar({t.name: t for t in tools})
    head, _, rest = one.partition("\n")
    if not head.startswith("start:"):
        raise RuntimeError("tool_call_grammar's first rule is not `start`")
    more = f'("\\n" {json.dumps(OPEN)} one_call){{0,{MAX_PARALLEL_CALLS - 1}}}' if parallel else ""
    return f"start: one_call {more}\none_call:{head[len('start:'):]}\n{rest}"


"""MCP servers' tools as the agent's own: `McpManager` starts the configured servers once per
session, registers each listed tool in the tool registry (tools.TOOLS) as `mcp__SERVER__TOOL`
and stops the servers (and unregisters their tools) on `close()`.

A registered tool is an ordinary `tools.Tool`: its schema is the server's `inputSchema` (objects
that list their properties closed to others, see `_closed`), so the call grammar (agent/constraints.py) admits only schema-valid arguments and `tools.validate`
checks them again; its kind is "mcp" (asks for approval in every mode) unless the user's config
allows the server or the tool ("read": runs without asking). Descriptions and schemas shown to
the model are cut to the `[mcp] prompt_chars` budget; tools past it are not offered, and a
schema the grammar engine cannot compile, or that `tools.schema_problem` cannot check within
its bounds (size, nesting, regexes, a trial validation), is not offered either (each with one
warning).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Callable

from tools import TOOLS, Tool, ToolResult, register, schema_problem, unregister
from tools._base import cap

from ..extensions import Extensions, ServerSpec
from .host import McpHost, ServerConn, ToolInfo

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_DESCRIPTION = 400  # characters of one tool's description shown to the model
PREFIX = "mcp__"


def tool_name(server: str, tool: str) -> str:
    return f"{PREFIX}{server}__{tool}"


def _closed(node: Any) -> Any:
    """`node` with every object schema that lists its properties and says nothing about others
    closed to them (`additionalProperties: false`). JSON Schema admits unlisted keys by default,
    and under a grammar that admits them a small model fills calls with invented keys; schemas
    made from typed signatures (pydantic, zod) list every key the server reads."""
    if isinstance(node, list):
        return [_closed(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _closed(v) for k, v in node.items()}
    if ("properties" in out and "additionalProperties" not in out
            and "patternProperties" not in out and "unevaluatedProperties" not in out):
        out["additionalProperties"] = False
    return out


def _schema(raw: dict[str, Any]) -> dict[str, Any]:
    """The server's inputSchema as a closed object schema (servers may leave out `type`)."""
    schema = dict(raw) if isinstance(raw, dict) else {}
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    schema.pop("$schema", None)
    return _closed(schema)


def _description(info: ToolInfo, server: str) -> str:
    text = " ".join(info.description.split()) or f"a tool of the MCP server {server}"
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1] + "…"


def _prompt_size(tool: Tool) -> int:
    """Characters the tool adds to the system prompt's tool list (agent/core/prompt.py)."""
    return len(tool.name) + len(tool.description) + len(json.dumps(tool.schema["properties"],
                                                                   separators=(",", ":"))) + 16


def grammar_problem(tool: Tool) -> str:
    """'' when the call grammar for `tool` compiles, else llguidance's complaint."""
    from llguidance import LLMatcher

    from ..backends.grammar import tool_call_grammar

    failed, messages = LLMatcher.validate_grammar_with_warnings(tool_call_grammar({tool.name: tool}), None)
    if not failed:
        return ""
    first = str(messages[0]) if messages else "the grammar does not compile"
    return "its inputSchema cannot be compiled to a grammar: " + first.splitlines()[0][:160]


def result_text(result: Any) -> tuple[bool, str]:
    """A CallToolResult as (ok, text for the model)."""
    parts = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(block.text))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {getattr(block, 'mime_type', '')}, {len(block.data or '')} base64 chars]")
        elif kind == "resource":
            res = block.resource
            parts.append(getattr(res, "text", None) or f"[resource {getattr(res, 'uri', '')}]")
        elif kind == "resource_link":
            parts.append(f"[resource link {getattr(block, 'uri', '')}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    text = "\n".join(parts) if parts else "(no content)"
    return not bool(getattr(result, "is_error", False)), text


class McpManager:
    """The session's MCP servers and the tools they added to the registry."""

    def __init__(self, ext: Extensions, log_dir: Path | None = None,
                 warn: Callable[[str], None] | None = None):
        self.ext, self.log_dir = ext, log_dir
        self.warn = warn or (lambda m: None)
        self.host: McpHost | None = None
        self.registered: list[str] = []
        self.skipped: dict[str, list[str]] = {}  # server -> "tool: why" for tools not offered
        self.started = False

    @property
    def servers(self) -> dict[str, ServerConn]:
        return self.host.servers if self.host is not None else {}

    def start(self, extra: tuple[ServerSpec, ...] = ()) -> None:
        """Start every enabled server (once; later calls only start `extra` ones) and register
        their tools. Failures become warnings and a "failed" state, never exceptions."""
        specs = [s for s in (*(() if self.started else self.ext.servers), *extra)
                 if s.name not in self.servers]
        self.started = True
        if not specs:
            return
        if self.host is None:
            self.host = McpHost(self.log_dir)
        t0 = time.monotonic()
        conns = [self.host.launch(spec) for spec in specs]
        for conn in conns:
            self.host.wait_started(conn, t0 + conn.spec.startup_timeout_s)
        budget = self.ext.prompt_chars - sum(_prompt_size(TOOLS[n]) for n in self.registered)
        for conn in conns:
            if conn.state != "running":
                self.warn(f"MCP server '{conn.spec.name}' {conn.state}: {conn.error}")
                continue
            budget = self._register(conn, budget)
        self.elapsed_s = time.monotonic() - t0

    def _register(self, conn: ServerConn, budget: int) -> int:
        spec, skipped = conn.spec, self.skipped.setdefault(conn.spec.name, [])
        for info in conn.tools:
            if spec.tools and info.name not in spec.tools:
                continue
            name = tool_name(spec.name, info.name)
            if name in TOOLS:  # another Runtime in this process (ACP: one per folder) offers it
                continue
            why = "" if TOOL_NAME.match(info.name) else "its name has characters other than A-Z a-z 0-9 _ -"
            why = why or schema_problem(info.input_schema)  # size, depth, regexes: before any walk
            tool = None if why else self._tool(conn, info, name)
            if tool is not None:
                why = schema_problem(tool.schema) or grammar_problem(tool)  # as closed: register() agrees
                if not why and _prompt_size(tool) > budget:
                    why = "past the [mcp] prompt_chars budget"
            if why:
                skipped.append(f"{info.name}: {why}")
                continue
            register(tool)
            self.registered.append(name)
            budget -= _prompt_size(tool)
        if skipped:
            self.warn(f"MCP server '{spec.name}': {len(skipped)} tool(s) not offered "
                      f"({'; '.join(skipped)[:300]})")
        return budget

    def _tool(self, conn: ServerConn, info: ToolInfo, name: str) -> Tool:
        host, server, remote = self.host, conn.spec.name, info.name

        def call(ctx, **arguments) -> ToolResult:
            ok, value = host.call(server, remote, arguments)
            if not ok:
                return ToolResult.error(value)
            good, text = result_text(value)
            text = cap(text, ctx.max_output_chars)
            return ToolResult(True, text) if good else ToolResult.error(f"{name}: {text}")

        kind = "read" if conn.spec.allowed(remote) else "mcp"
        return Tool(name, _description(info, server), _schema(info.input_schema), call, kind,
                    time_limit_s=conn.spec.call_timeout_s + 5.0)

    def close(self) -> None:
        """Unregister the tools and stop the servers."""
        for name in self.registered:
            unregister(name)
        self.registered = []
        if self.host is not None:
            self.host.stop_all()
            self.host = None

    def listing(self) -> str:
        """What `/mcp` shows: each server, its state and its tools."""
        if not self.ext.declared and not self.servers:
            return ("no MCP servers: declare them in your config file as [mcp.servers.NAME] "
                    "with command = \"...\" or url = \"...\"")
        lines = []
        for name in self.ext.declared:
            if name not in self.servers:
                lines.append(f"{name}: not enabled (enabled = false; a repo's .specrc may enable it)")
        for name, conn in self.servers.items():
            where = conn.spec.url or " ".join((conn.spec.command, *conn.spec.args))
            lines.append(f"{name}: {conn.state}{' (' + conn.error + ')' if conn.error else ''} · {where}")
            for t in conn.tools:
                full = tool_name(name, t.name)
                if full in self.registered:
                    ask = "runs without asking" if conn.spec.allowed(t.name) else "asks first"
                    lines.append(f"  {full} ({ask}): {_description(t, name)[:80]}")
            for s in self.skipped.get(name, []):
                lines.append(f"  not offered: {s}")
        return "\n".join(lines)

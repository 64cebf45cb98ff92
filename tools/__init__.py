"""The agent's tools, registered in one place: name → `Tool` (schema, function, kind).

`call_tool(name, arguments, ctx)` validates the arguments against the tool's JSON Schema
(bounded in time and size: tools/_schema.py) and runs it under a wall-clock limit; every
expected failure comes back as a `ToolResult` with `ok=False`, never raised. Past the limit
the call is reported as failed and left to finish in a daemon thread (Python cannot kill a
thread; the tools that can hang, shell and grep, kill their own child processes well within it).
Approvals and git bookkeeping are the agent loop's business, not this package's.
"""

from __future__ import annotations

import threading
from typing import Any

from ._base import MAX_OUTPUT_CHARS, Tool, ToolContext, ToolResult
from . import edit_file, git_diff, git_status, grep, list_files, read_file, run_shell, write_file

__all__ = ["TOOLS", "Tool", "ToolContext", "ToolResult", "call_tool", "validate", "MAX_OUTPUT_CHARS",
           "register", "unregister", "schema_problem"]


def schema_problem(schema: Any) -> str:
    """'' when arguments can be checked against `schema` within the bounds, else why not."""
    from ._schema import schema_problem as problem  # jsonschema loads on first use

    return problem(schema)


def _tool(module, kind: str = "read", paths: tuple[str, ...] = ()) -> Tool:
    name = module.__name__.rsplit(".", 1)[-1]
    return Tool(name, module.DESCRIPTION, module.SCHEMA, getattr(module, name), kind, paths)


TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        _tool(read_file, paths=("path",)),
        _tool(list_files),
        _tool(grep),
        _tool(edit_file, "edit", ("path",)),
        _tool(write_file, "edit", ("path",)),
        _tool(run_shell, "shell"),
        _tool(git_status),
        _tool(git_diff),
    )
}


BUILTIN = frozenset(TOOLS)


def register(tool: Tool) -> None:
    """Add a tool from outside this package (an MCP server's) for the rest of the process;
    ValueError for a built-in name or a schema that cannot be checked within the bounds."""
    if tool.name in BUILTIN:
        raise ValueError(f"'{tool.name}' is a built-in tool")
    problem = schema_problem(tool.schema)
    if problem:
        raise ValueError(f"'{tool.name}': {problem}")
    TOOLS[tool.name] = tool


def unregister(name: str) -> None:
    if name not in BUILTIN:
        TOOLS.pop(name, None)


def validate(name: str, arguments: Any) -> str:
    """'' when `arguments` fit tool `name`'s schema, else an error text for the model. Bounded
    in time and size (tools/_schema.py): a hostile schema or argument is an error, not a hang."""
    tool = TOOLS.get(name)
    if tool is None:
        return f"unknown tool '{name}'; available: {', '.join(TOOLS)}"
    if not isinstance(arguments, dict):
        return f"arguments for {name} must be a JSON object"
    problem = schema_problem(tool.schema)
    if problem:
        return f"{name} cannot be called: {problem}"
    from ._schema import check

    message, where = check(arguments, tool.schema)
    if message:
        return f"invalid arguments for {name} at {where}: {message}"
    return ""


TOOL_TIME_LIMIT_S = 30.0  # wall clock for one call of a tool other than run_shell
SHELL_GRACE_S = 15.0  # run_shell: its own timeout plus this (killing a sandbox takes a moment)


def time_limit(name: str, ctx: ToolContext) -> float:
    tool = TOOLS.get(name)
    if tool is not None and tool.time_limit_s > 0:
        return tool.time_limit_s
    return ctx.shell_timeout_s + SHELL_GRACE_S if name == "run_shell" else TOOL_TIME_LIMIT_S


def call_tool(name: str, arguments: Any, ctx: ToolContext) -> ToolResult:
    """Validate and run one tool call; a call past its time limit returns an error."""
    problem = validate(name, arguments)
    if problem:
        return ToolResult.error(problem)
    box: list[ToolResult] = []

    def run() -> None:
        try:
            box.append(TOOLS[name].fn(ctx, **arguments))
        except (OSError, RuntimeError, ValueError) as e:  # a tool's unforeseen failure
            box.append(ToolResult.error(f"{name} failed: {type(e).__name__}: {e}"))

    worker = threading.Thread(target=run, name=f"tool-{name}", daemon=True)
    worker.start()
    limit = time_limit(name, ctx)
    worker.join(limit)
    if not box:
        return ToolResult.error(f"{name} did not finish within {limit:g}s and was abandoned; "
                                "it may still complete in the background")
    return box[0]

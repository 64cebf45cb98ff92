"""What every tool shares: the result object, the per-run context, and the `Tool` record.

A tool is a plain function `fn(ctx, **arguments) -> ToolResult` with a JSON Schema for its
arguments. Tools never print and never raise for expected failures (bad paths, missing files,
timeouts): they return `ToolResult(ok=False, output=...)` with text the model can act on.
This module knows nothing about approvals or git; the agent loop applies those around a call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

MAX_OUTPUT_CHARS = 8000  # what a tool may hand back to the model in one result


@dataclass(frozen=True)
class ToolResult:
    ok: bool
    output: str
    changed: tuple[str, ...] = ()  # repo-relative paths the call wrote

    @classmethod
    def error(cls, message: str) -> "ToolResult":
        return cls(False, f"Error: {message}")


@dataclass(frozen=True)
class ToolContext:
    """Where tools run: the workspace root (every path is confined to it) and limits.

    `sandbox`: "auto" runs shell commands in the OS sandbox (tools/sandbox.py) and refuses to
    run them when none works; "off" runs them unsandboxed: the user's explicit choice, or the
    runtime's when no sandbox is available (the approval policy then asks for each command)."""

    root: Path
    shell_timeout_s: float = 60.0
    max_output_chars: int = MAX_OUTPUT_CHARS
    in_git: bool = False
    sandbox: str = "auto"  # auto | off
    allow_network: bool = False  # inside the sandbox
    env_passthrough: tuple[str, ...] = ()  # names (globs) commands get beyond tools/environ.py's allowlist
    # untracked files over this many bytes (the snapshot size cap: no undo could bring them
    # back) stay read-only to sandboxed commands; 0 = none
    keep_unsaved_over: int = 0
    # tokens of repository map a conversation's first message may carry (agent/core/repomap.py,
    # the `repo_map_tokens` config key); 0 = none
    repo_map_tokens: int = 0


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict[str, Any]
    fn: Callable[..., ToolResult]
    kind: str = "read"  # read | edit | shell: what the approval policy looks at
    paths: tuple[str, ...] = field(default=())  # argument names holding repo paths
    time_limit_s: float = 0.0  # wall clock for one call; 0 = tools.TOOL_TIME_LIMIT_S


def cap(text: str, limit: int) -> str:
    """Cut `text` to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"

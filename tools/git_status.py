"""`git_status`: the repo's short status (branch, changed and untracked files)."""

from __future__ import annotations

from . import git
from ._base import ToolContext, ToolResult, cap

SCHEMA = {"type": "object", "properties": {}, "additionalProperties": False}
DESCRIPTION = "Show git status (branch, modified and untracked files)."


def git_status(ctx: ToolContext) -> ToolResult:
    if not ctx.in_git:
        return ToolResult.error("not a git repository")
    try:
        out = git.run(ctx.root, "status", "--short", "--branch").stdout.rstrip("\n")
    except git.GitCommandError as e:
        return ToolResult.error(f"git status failed: {e.stderr.strip() or e}")
    return ToolResult(True, cap(out or "clean", ctx.max_output_chars))

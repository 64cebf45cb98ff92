"""`git_status`: the repo's short status (branch, changed and untracked files)."""

from __future__ import annotations

from ._base import ToolContext, ToolResult, cap

SCHEMA = {"type": "object", "properties": {}, "additionalProperties": False}
DESCRIPTION = "Show git status (branch, modified and untracked files)."


def git_status(ctx: ToolContext) -> ToolResult:
    if not ctx.in_git:
        return ToolResult.error("not a git repository")
    import git

    try:
        out = git.Git(str(ctx.root)).status("--short", "--branch")
    except git.exc.GitCommandError as e:
        return ToolResult.error(f"git status failed: {e.stderr.strip() or e}")
    return ToolResult(True, cap(out or "clean", ctx.max_output_chars))

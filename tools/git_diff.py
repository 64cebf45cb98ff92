"""`git_diff`: uncommitted changes (or staged ones), optionally for one path."""

from __future__ import annotations

from ._base import ToolContext, ToolResult, cap
from ._paths import PathError, confine, relative

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "maxLength": 200, "description": "limit the diff to this path"},
        "staged": {"type": "boolean", "description": "show staged changes instead"},
    },
    "additionalProperties": False,
}
DESCRIPTION = "Show the diff of uncommitted changes (optionally for one path or staged only)."


def git_diff(ctx: ToolContext, path: str | None = None, staged: bool = False) -> ToolResult:
    if not ctx.in_git:
        return ToolResult.error("not a git repository")
    import git

    args = ["--cached"] if staged else []
    try:
        if path:
            args += ["--", relative(ctx.root, confine(ctx.root, path))]
        out = git.Git(str(ctx.root)).diff(*args)
    except PathError as e:
        return ToolResult.error(str(e))
    except git.exc.GitCommandError as e:
        return ToolResult.error(f"git diff failed: {e.stderr.strip() or e}")
    return ToolResult(True, cap(out or "no changes", ctx.max_output_chars))

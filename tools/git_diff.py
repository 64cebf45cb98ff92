"""`git_diff`: uncommitted changes (or staged ones), optionally for one path."""

from __future__ import annotations

from . import git
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
    args = ["--cached"] if staged else []
    try:
        if path:
            args += ["--", relative(ctx.root, confine(ctx.root, path))]
        out = git.run(ctx.root, "diff", *args).stdout.rstrip("\n")
    except PathError as e:
        return ToolResult.error(str(e))
    except git.GitCommandError as e:
        return ToolResult.error(f"git diff failed: {e.stderr.strip() or e}")
    return ToolResult(True, cap(out or "no changes", ctx.max_output_chars))

"""`list_files`: the repo's files matching a glob, honouring .gitignore.

In a git repo the list comes from `git ls-files --cached --others --exclude-standard` (tracked
and untracked-but-not-ignored files); elsewhere from a walk that skips hidden folders.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

from ._base import ToolContext, ToolResult, cap
from ._paths import PathError, confine, relative

MAX_LISTED = 500

SCHEMA = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "maxLength": 200,
                    "description": "glob such as '*.py' or 'src/**/*.ts' (default: every file)"},
        "path": {"type": "string", "maxLength": 200, "description": "folder to list (default: repo root)"},
    },
    "additionalProperties": False,
}
DESCRIPTION = "List the repo's files (respects .gitignore), optionally filtered by a glob."


@lru_cache(maxsize=64)
def _glob_regex(pattern: str) -> re.Pattern:
    """Glob → regex: `**` spans folders, `*` and `?` stay within one path segment."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def glob_match(path: str, pattern: str) -> bool:
    """A pattern without '/' matches the file name anywhere (like .gitignore)."""
    target = path if "/" in pattern else path.rsplit("/", 1)[-1]
    return bool(_glob_regex(pattern).match(target))


def repo_files(ctx: ToolContext) -> list[str]:
    """Every non-ignored file under the root, repo-relative, sorted."""
    root = ctx.root.resolve()
    if ctx.in_git:
        import git

        try:
            out = git.Git(str(root)).ls_files("--cached", "--others", "--exclude-standard", "-z")
            names = {n for n in out.split("\0") if n}
            return sorted(n for n in names if (root / n).is_file() and not (root / n).is_symlink())
        except git.exc.GitCommandError:
            pass  # fall back to walking
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("node_modules", "__pycache__"))
        for f in files:
            found.append(relative(root, Path(folder) / f))
    return sorted(found)


def select(ctx: ToolContext, pattern: str | None, path: str | None) -> list[str]:
    """Files under `path` (repo-relative folder or file) that match `pattern`."""
    files = repo_files(ctx)
    if path and path not in (".", "./"):
        full = confine(ctx.root, path)
        prefix = relative(ctx.root, full)
        files = [f for f in files if f == prefix or f.startswith(prefix.rstrip("/") + "/")]
    if pattern:
        files = [f for f in files if glob_match(f, pattern)]
    return files


def list_files(ctx: ToolContext, pattern: str | None = None, path: str | None = None) -> ToolResult:
    try:
        files = select(ctx, pattern, path)
    except PathError as e:
        return ToolResult.error(str(e))
    if not files:
        return ToolResult(True, "no files match")
    more = f"\n[... {len(files) - MAX_LISTED} more files]" if len(files) > MAX_LISTED else ""
    return ToolResult(True, cap("\n".join(files[:MAX_LISTED]) + more, ctx.max_output_chars))

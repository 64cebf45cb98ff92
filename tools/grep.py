"""`grep`: a regex search over the repo's (non-ignored, text) files, output capped.

Python's `re` backtracks, so a pattern like `(a+)+$` can run for hours on one long line.
The search therefore runs in a child Python process that is killed after TIME_LIMIT_S; the
model gets an error it can act on (simplify the pattern, narrow path or glob). The parent
picks the files (tools/list_files.py: regular files only); the child opens each as
read_file does (never a FIFO or device), skips binaries and files over MAX_FILE_BYTES.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from . import procs
from ._base import ToolContext, ToolResult, cap
from .environ import scrubbed
from ._paths import PathError
from .list_files import select
from .read_file import MAX_FILE_BYTES, open_regular, read_text

MAX_MATCHES = 100
MAX_LINE = 240
TIME_LIMIT_S = 10.0  # wall clock for one whole search

SCHEMA = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "minLength": 1, "maxLength": 300, "description": "Python regular expression"},
        "path": {"type": "string", "maxLength": 200, "description": "file or folder to search (default: repo)"},
        "glob": {"type": "string", "maxLength": 200, "description": "only files matching this glob, e.g. '*.py'"},
        "ignore_case": {"type": "boolean"},
    },
    "required": ["pattern"],
    "additionalProperties": False,
}
DESCRIPTION = "Search file contents with a regex; prints path:line: text for each match."

# The child: `tools` importable from where this package lives; no site, no environment.
_CHILD = "import sys; sys.path.insert(0, {where!r}); from tools.grep import search_stdin; search_stdin()"


def search(root: str, files: list[str], pattern: str, flags: int) -> dict:
    """Matches of `pattern` in `files` (repo-relative to `root`): {"hits": [...], "total": n}."""
    rx = re.compile(pattern, flags)
    hits: list[str] = []
    total = 0
    for name in files:
        try:
            with open_regular(Path(root, name), name) as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except (PathError, OSError):
            continue  # vanished, unreadable or replaced since it was listed
        text = read_text(data) if len(data) <= MAX_FILE_BYTES else None
        if text is None:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if rx.search(line):
                total += 1
                if len(hits) < MAX_MATCHES:
                    hits.append(f"{name}:{n}: {line[:MAX_LINE]}")
    return {"hits": hits, "total": total}


def search_stdin() -> None:
    """The child's entry point: a JSON job on stdin, the JSON result on stdout."""
    job = json.load(sys.stdin)
    json.dump(search(job["root"], job["files"], job["pattern"], job["flags"]), sys.stdout)


def _run_child(job: dict) -> tuple[dict | None, str]:
    """(result, '') or (None, error text)."""
    where = str(Path(__file__).resolve().parents[1])
    try:
        r = procs.run(  # on timeout its group is killed; it dies with us too (tools/procs.py)
            [sys.executable, "-I", "-S", "-c", _CHILD.format(where=where)], input=json.dumps(job),
            text=True, timeout=TIME_LIMIT_S, env=scrubbed(),
        )
    except subprocess.TimeoutExpired:
        return None, (f"the search took over {TIME_LIMIT_S:g}s and was stopped; the pattern probably "
                      "backtracks (nested quantifiers like (a+)+ or (.*)*): simplify it, or narrow "
                      "path or glob")
    except OSError as e:
        return None, f"could not start the search: {e}"
    try:
        return json.loads(r.stdout), ""
    except json.JSONDecodeError:
        tail = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
        return None, f"the search failed: {tail}"


def grep(
    ctx: ToolContext, pattern: str, path: str | None = None, glob: str | None = None,
    ignore_case: bool = False,
) -> ToolResult:
    flags = re.IGNORECASE if ignore_case else 0
    try:
        re.compile(pattern, flags)
    except re.error as e:
        return ToolResult.error(f"bad regex {pattern!r}: {e}")
    try:
        files, note = select(ctx, glob, path)
    except PathError as e:
        return ToolResult.error(str(e))
    if not files:
        return ToolResult(True, "no matches" + note)
    job = {"root": str(ctx.root.resolve()), "files": files, "pattern": pattern, "flags": flags}
    result, problem = _run_child(job)
    if result is None:
        return ToolResult.error(problem)
    hits, total = result["hits"], result["total"]
    if not hits:
        return ToolResult(True, "no matches" + note)
    more = f"\n[... {total - len(hits)} more matches]" if total > len(hits) else ""
    return ToolResult(True, cap("\n".join(hits) + more + note, ctx.max_output_chars))

"""`grep`: a regex search over the repo's (non-ignored, text) files, output capped.

Python's `re` backtracks, so a pattern like `(a+)+$` can run for hours on one long line.
The search therefore runs in a child Python process that is killed after TIME_LIMIT_S (a
model calls grep in a loop, so the limit is short); the child sends each match as it finds
it, so a search cut short still gives the matches found until then, and the result says it
was cut and what to do (simplify the pattern, narrow path or glob). The limit counts from
the call: picking the files takes from it, and the child gets what is left (MIN_SEARCH_S at
least). The parent picks the files (tools/list_files.py: regular files only); the child,
its address space capped at CHILD_MEMORY_BYTES, opens each as read_file does (never a FIFO
or device), skips binaries and files over MAX_FILE_BYTES (the result says how many).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from . import procs
from ._base import ToolContext, ToolResult, cap
from ._paths import PathError
from .environ import scrubbed
from .list_files import select
from .read_file import MAX_FILE_BYTES, open_regular, read_text

MAX_MATCHES = 100
MAX_LINE = 240
TIME_LIMIT_S = 3.0  # wall clock for one whole grep call
MIN_SEARCH_S = 0.5  # the child's time when picking the files took (nearly) all of it
CHILD_MEMORY_BYTES = 2 << 30

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


def search(root: str, files: list[str], pattern: str, flags: int, sent=None) -> dict:
    """Matches of `pattern` in `files` (repo-relative to `root`): {"hits": [...], "total": n};
    `sent` is called with each hit kept, as it is found."""
    rx = re.compile(pattern, flags)
    hits: list[str] = []
    total = skipped = 0
    for name in files:
        try:
            with open_regular(Path(root, name), name) as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except (PathError, OSError):
            continue  # vanished, unreadable or replaced since it was listed
        if len(data) > MAX_FILE_BYTES:
            skipped += 1
            continue
        text = read_text(data)
        if text is None:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if rx.search(line):
                total += 1
                if len(hits) < MAX_MATCHES:
                    hits.append(f"{name}:{n}: {line[:MAX_LINE]}")
                    if sent is not None:
                        sent(hits[-1])
    return {"hits": hits, "total": total, "skipped": skipped}


def search_stdin() -> None:
    """The child's entry point: a JSON job on stdin; on stdout one JSON line per hit as it is
    found, then the JSON result."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):
        pass  # (no such limit here: the time limit still holds)
    job = json.load(sys.stdin)

    def sent(hit: str) -> None:
        sys.stdout.write(json.dumps({"hit": hit}) + "\n")
        sys.stdout.flush()

    result = search(job["root"], job["files"], job["pattern"], job["flags"], sent)
    sys.stdout.write(json.dumps(result) + "\n")


def _run_child(job: dict, limit: float) -> tuple[dict | None, str, list[str]]:
    """(result, '', hits) or (None, error text, the hits found before it was cut), the child
    killed after `limit` seconds."""
    where = str(Path(__file__).resolve().parents[1])
    try:
        proc = procs.popen(  # its own group, killed on timeout; it dies with us (tools/procs.py)
            [sys.executable, "-I", "-S", "-c", _CHILD.format(where=where)], text=True,
            env=scrubbed(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        return None, f"could not start the search: {e}", []
    cut = False
    try:
        out, err = proc.communicate(json.dumps(job), timeout=limit)
    except subprocess.TimeoutExpired:
        cut = True
        procs.kill_group(proc)
        out, err = proc.communicate()  # what it wrote before it was killed
    finally:
        procs.reaped(proc)
    lines = _records(out)
    hits = [x["hit"] for x in lines if "hit" in x]
    if cut:
        return None, (f"the search was cut after {TIME_LIMIT_S:g}s (the time limit); the pattern "
                      "probably backtracks (nested quantifiers like (a+)+ or (.*)*): simplify it, "
                      "or narrow path or glob"), hits
    if lines and "total" in lines[-1]:
        return lines[-1], "", hits
    tail = (err.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    return None, f"the search failed: {tail}", hits


def _records(out: str) -> list[dict]:
    """The child's JSON lines (a line cut off by the kill is left out)."""
    records = []
    for line in out.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def grep(
    ctx: ToolContext, pattern: str, path: str | None = None, glob: str | None = None,
    ignore_case: bool = False,
) -> ToolResult:
    start = time.monotonic()
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
    result, problem, found = _run_child(job, max(MIN_SEARCH_S, TIME_LIMIT_S - (time.monotonic() - start)))
    if result is None:
        shown = ("\nmatches found before it was cut:\n" + "\n".join(found)) if found else ""
        return ToolResult.error(cap(problem + shown, ctx.max_output_chars))
    hits, total, skipped = result["hits"], result["total"], result.get("skipped", 0)
    if skipped:
        files_ = "files" if skipped > 1 else "file"
        note += f"\n[{skipped} {files_} over {MAX_FILE_BYTES // 1024} KB not searched; read_file reads them by lines]"
    if not hits:
        return ToolResult(True, "no matches" + note)
    more = f"\n[... {total - len(hits)} more matches]" if total > len(hits) else ""
    return ToolResult(True, cap("\n".join(hits) + more + note, ctx.max_output_chars))

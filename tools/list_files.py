"""`list_files`: the repo's files matching a glob, honouring .gitignore.

In a git repo the list comes from `git ls-files --cached --others --exclude-standard` (tracked
and untracked-but-not-ignored files); elsewhere from a bounded walk that skips hidden folders.
Only regular files are listed (no symlinks, FIFOs or devices), so every name listed is safe
for the other tools to open. Glob matching is an automaton, linear in the path's length.
Does not read file contents.
"""

from __future__ import annotations

import os
import stat
import time
from functools import lru_cache
from pathlib import Path

from . import git
from ._base import ToolContext, ToolResult, cap
from ._paths import PathError, confine, relative

MAX_LISTED = 500
MAX_WALKED = 200_000  # folder entries a walk outside git looks at before it gives up
WALK_TIME_LIMIT_S = 10.0
_SKIPPED_DIRS = ("node_modules", "__pycache__")

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


_SPECIAL = ("**/", "**", "*", "?")  # every other token is one literal character


def _tokens(pattern: str) -> list[str]:
    out, i = [], 0
    while i < len(pattern):
        tok = next((t for t in _SPECIAL if pattern.startswith(t, i)), pattern[i])
        out.append(tok)
        i += len(tok)
    return out


class _Glob:
    """A glob as an automaton: the set of pattern positions alive after each character, so
    matching is linear in the path however many stars the pattern has (a backtracking regex
    takes exponential time on `*a*a*a*a*b`). Transitions are memoised per (states, character
    class). `**/` spans zero or more folders, `**` anything, `*` and `?` stay in one segment."""

    def __init__(self, pattern: str):
        self.tokens = _tokens(pattern)
        self.n = len(self.tokens)
        self.literals = {t for t in self.tokens if t not in _SPECIAL} | {"/"}
        self.start = self._close({0})
        self.moves: dict[tuple[frozenset, str], frozenset] = {}

    def _close(self, states: set[int]) -> frozenset:
        todo, seen = list(states), set(states)
        while todo:  # stars may match nothing; a `**/` already entered (id > n) may not
            i = todo.pop()
            if i < self.n and self.tokens[i] in ("**/", "**", "*") and i + 1 not in seen:
                seen.add(i + 1)
                todo.append(i + 1)
        return frozenset(seen)

    def _step(self, states: frozenset, c: str) -> frozenset:
        """`c` is "/" , a literal of the pattern, or "" for any other character."""
        out: set[int] = set()
        for s in states:
            i = s - self.n - 1 if s > self.n else s  # inside a `**/`: same moves as its entry
            tok = self.tokens[i] if i < self.n else None
            if tok == "**/":
                out.add(i + self.n + 1)
                if c == "/":
                    out.add(i + 1)
            elif tok == "**" or (tok == "*" and c != "/"):
                out.add(i)
            elif (tok == "?" and c != "/") or (tok is not None and tok == c):
                out.add(i + 1)
        return self._close(out)

    def match(self, text: str) -> bool:
        states = self.start
        for ch in text:
            key = (states, ch if ch in self.literals else "")
            nxt = self.moves.get(key)
            if nxt is None:
                if len(self.moves) > 100_000:
                    self.moves.clear()
                nxt = self.moves[key] = self._step(*key)
            if not nxt:
                return False
            states = nxt
        return self.n in states


@lru_cache(maxsize=64)
def _glob(pattern: str) -> _Glob:
    return _Glob(pattern)


def glob_match(path: str, pattern: str) -> bool:
    """A pattern without '/' matches the file name anywhere (like .gitignore)."""
    target = path if "/" in pattern else path.rsplit("/", 1)[-1]
    return _glob(pattern).match(target)


def repo_files(ctx: ToolContext) -> list[str]:
    """Every non-ignored regular file under the root, repo-relative, sorted."""
    return _listing(ctx, "")[0]


def _listing(ctx: ToolContext, under: str) -> tuple[list[str], bool]:
    """(regular files under repo-relative folder `under` ('' = all), sorted; whether complete)."""
    root = ctx.root.resolve()
    if ctx.in_git:
        try:
            out = git.run(root, "ls-files", "--cached", "--others", "--exclude-standard", "-z").stdout
            names = {n for n in out.split("\0") if n and _inside(n, under)}
            return sorted(n for n in names if (root / n).is_file() and not (root / n).is_symlink()), True
        except git.GitCommandError:
            pass  # fall back to walking
    return _walk(root, under)


def _inside(name: str, under: str) -> bool:
    return not under or name == under or name.startswith(under + "/")


def _walk(root: Path, under: str) -> tuple[list[str], bool]:
    """Regular files below `root/under`, skipping hidden and bulky folders; symlinks are not
    followed (no loops), unreadable folders are skipped, and the walk stops at MAX_WALKED
    entries or WALK_TIME_LIMIT_S (then incomplete)."""
    start = root / under if under else root
    if not start.is_symlink() and start.is_file():
        return [under], True
    found: list[str] = []
    todo, seen = [start], 0
    deadline = time.monotonic() + WALK_TIME_LIMIT_S
    while todo:
        if seen >= MAX_WALKED or time.monotonic() > deadline:
            return sorted(found), False
        try:
            with os.scandir(todo.pop()) as it:
                entries = list(it)
        except OSError:  # unreadable, vanished, or not a folder
            continue
        seen += len(entries)
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    if not e.name.startswith(".") and e.name not in _SKIPPED_DIRS:
                        todo.append(Path(e.path))
                elif e.is_file(follow_symlinks=False):
                    found.append(Path(e.path).relative_to(root).as_posix())
            except OSError:
                continue
    return sorted(found), True


def select(ctx: ToolContext, pattern: str | None, path: str | None) -> tuple[list[str], str]:
    """(files under `path` (repo-relative folder or file) that match `pattern`, a note for
    the model when the list is incomplete). PathError when `path` is not a folder or file."""
    under = ""
    if path and path not in (".", "./"):
        full = confine(ctx.root, path)
        try:
            mode = os.stat(full).st_mode
        except OSError as e:
            raise PathError(f"{path}: {e.strerror or e}") from None
        if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
            raise PathError(f"{path} is neither a folder nor a regular file")
        under = relative(ctx.root, full)
    files, complete = _listing(ctx, under)
    if pattern:
        files = [f for f in files if glob_match(f, pattern)]
    note = "" if complete else f"\n[... listing stopped early (over {MAX_WALKED} entries or " \
                               f"{WALK_TIME_LIMIT_S:g}s); narrow it with path]"
    return files, note


def list_files(ctx: ToolContext, pattern: str | None = None, path: str | None = None) -> ToolResult:
    try:
        files, note = select(ctx, pattern, path)
    except PathError as e:
        return ToolResult.error(str(e))
    if not files:
        return ToolResult(True, "no files match" + note)
    more = f"\n[... {len(files) - MAX_LISTED} more files]" if len(files) > MAX_LISTED else ""
    return ToolResult(True, cap("\n".join(files[:MAX_LISTED]) + more + note, ctx.max_output_chars))

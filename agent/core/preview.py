"""What an approval asks about, shown exactly: the diff an edit would make, or the command.

`approval_request` builds the `ApprovalRequest` an interactive approver shows: for
`edit_file` and `write_file` the unified diff computed from the file as it is now (nothing is
written), for `run_shell` the command and the directory it runs in. Also decides what
"always" covers: all edits, or shell commands with the same program name; destructive
commands are never covered by "always".
"""

from __future__ import annotations

import difflib
import os
import shlex
from pathlib import Path
from typing import Any

from ..events import ApprovalRequest


def _diff(old: str, new: str, path: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                        new.splitlines(keepends=True), f"a/{path}", f"b/{path}"))


def edit_preview(root: Path, name: str, arguments: dict[str, Any]) -> str:
    """The unified diff `edit_file`/`write_file` would make now, or why it would fail."""
    from tools._paths import PathError, confine
    from tools.edit_file import apply_edits
    from tools.read_file import read_text

    path = str(arguments.get("path", ""))
    try:
        full = confine(root, path)
        old = read_text(full.read_bytes()) if full.is_file() else ""
    except PathError as e:
        return f"(this edit will fail: {e})"
    except OSError as e:
        return f"(this edit will fail: {path}: {e.strerror or e})"
    if old is None:
        return f"(this edit will fail: {path} is a binary file)"
    if name == "write_file":
        new = str(arguments.get("content", ""))
        return _diff(old, new, path) or f"(no change to {path})"
    new, problem = apply_edits(old, list(arguments.get("edits", [])), path)
    if new is None:
        return f"(this edit will fail: {problem})"
    return _diff(old, new, path) or f"(no change to {path})"


def program(command: str) -> str:
    """The first program a command runs (`pytest` for `FOO=1 pytest -q`), '' if unknown."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for w in words:
        if "=" in w and not w.startswith("=") and w.split("=", 1)[0].isidentifier():
            continue
        return os.path.basename(w)
    return ""


def scope_of(kind: str, name: str, arguments: dict[str, Any]) -> str:
    """The key "always" stores: every edit, or shell commands of one program."""
    if kind == "edit":
        return "edits"
    return f"shell:{program(str(arguments.get('command', '')))}"


def describe_scope(scope: str) -> str:
    if scope == "edits":
        return "all file edits"
    return f"`{scope.split(':', 1)[1]}` commands"


def approval_request(call_id: str, name: str, kind: str, arguments: dict[str, Any], reason: str,
                     root: Path) -> ApprovalRequest:
    if kind == "edit":
        preview = edit_preview(root, name, arguments)
    else:
        preview = f"$ {arguments.get('command', '')}\n(in {root})"
    destructive = reason.startswith("destructive")
    return ApprovalRequest(call_id, name, dict(arguments), reason, kind, preview,
                           scope_of(kind, name, arguments), can_always=not destructive)

"""What an approval asks about, shown exactly: the diff an edit would make, or the command.

`approval_request` builds the `ApprovalRequest` an interactive approver shows: for
`edit_file` and `write_file` the unified diff computed from the file as it is now (nothing is
written), for `run_shell` the command and the directory it runs in. Also decides what
"always" covers: all edits, or the programs a command runs (a later command is covered only
when every program it runs was approved so); destructive commands are never covered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tools.denylist import programs
from tools.edits import plan
from ..events import ApprovalRequest
from .shown import shown


def edit_preview(root: Path, name: str, arguments: dict[str, Any]) -> str:
    """The unified diff `edit_file`/`write_file` would make now, or why it would fail."""
    try:
        planned = plan(root, name, arguments)
    except OSError as e:
        return f"(this edit will fail: {arguments.get('path', '')}: {e.strerror or e})"
    if planned.problem:
        return f"(this edit will fail: {planned.problem})"
    return planned.diff() or f"(no change to {planned.path})"


def scope_of(kind: str, arguments: dict[str, Any]) -> str:
    """What "always" would approve: every edit, or the programs this command runs (all of
    them: "always" for `ls` must not cover `ls && rm x`); '' when that cannot be known."""
    if kind == "edit":
        return "edits"
    progs = programs(str(arguments.get("command", "")))
    return "shell:" + ",".join(progs) if progs else ""


def scope_keys(scope: str) -> list[str]:
    """The approvals a scope is made of: ["edits"], or one "shell:<program>" per program."""
    if not scope.startswith("shell:"):
        return [scope] if scope else []
    return [f"shell:{p}" for p in scope[len("shell:"):].split(",")]


def describe_scope(scope: str) -> str:
    """What "always" covers, in words, for an approval to show (control characters escaped)."""
    if scope == "edits":
        return "all file edits"
    if scope.startswith("tool:"):
        return shown(f"every call of {scope[len('tool:'):]}", keep_newlines=False)
    return shown(", ".join(f"`{k.split(':', 1)[1]}`" for k in scope_keys(scope)) + " commands",
                 keep_newlines=False)


def approval_request(call_id: str, name: str, kind: str, arguments: dict[str, Any], reason: str,
                     root: Path) -> ApprovalRequest:
    if kind == "edit":
        preview = edit_preview(root, name, arguments)
    elif kind == "mcp":
        preview = f"{name} " + json.dumps(arguments, ensure_ascii=False, indent=1)[:2000]
    else:
        preview = f"$ {arguments.get('command', '')}\n(in {root})"
    scope = f"tool:{name}" if kind == "mcp" else scope_of(kind, arguments)
    destructive = reason.startswith("destructive")
    # what every UI shows comes from here: control characters escaped (agent/core/shown.py)
    return ApprovalRequest(call_id, name, dict(arguments), shown(reason, keep_newlines=False), kind,
                           shown(preview), scope,
                           can_always=bool(scope) and not destructive)

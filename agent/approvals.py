"""Which tool calls need the user's approval.

Modes (`Config.approval_mode`): `suggest` asks before every edit and shell command,
`auto-edit` lets edits through and asks for shell commands, `full-auto` asks for nothing,
except that destructive shell commands (the denylist below) always ask, whatever the mode.
This module only decides; asking (a prompt, a dialog) or stopping a non-interactive run is
the caller's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODES = ("suggest", "auto-edit", "full-auto")

# (pattern, why). Matched against the whole command line, case-sensitive like the shell.
DENYLIST: tuple[tuple[str, str], ...] = (
    (r"\brm\s+(-[a-zA-Z]*\s+)*-[a-zA-Z]*[rR][a-zA-Z]*\s+(-\S+\s+)*(/|~|\$HOME|\*|\.)(\s|/?$|/\*)",
     "recursive delete of /, ~, * or the whole repo"),
    (r"\brm\s+(-\S+\s+)*--no-preserve-root\b", "rm --no-preserve-root"),
    (r"\brm\s+([^;&|]*\s)?(/|~|\.\./|\$HOME)", "deletes outside the repo"),
    (r"\bgit\s+push\b.*(\s--force\b|\s-f\b|\s--force-with-lease\b|\s\+\S)", "force push"),
    (r"\bgit\s+(reset\s+--hard|clean\s+-[a-zA-Z]*f|checkout\s+--?\s+\.|stash\s+(drop|clear))",
     "discards uncommitted work"),
    (r"\bmkfs(\.\w+)?\b", "formats a filesystem"),
    (r"\bdd\b.*\bof=/dev/", "dd onto a device"),
    (r">\s*/dev/(sd|nvme|hd|disk|mmcblk)", "writes to a raw device"),
    (r":\(\)\s*\{\s*:\|:&\s*\};:", "fork bomb"),
    (r"\b(shutdown|reboot|halt|poweroff)\b", "powers the machine off"),
    (r"\bchmod\s+(-\S+\s+)*-R\s+\S*\s+/(\s|$)", "recursive chmod of /"),
    (r"\b(sudo|su)\s", "runs as another user"),
    (r"\b(curl|wget)\b[^|]*\|\s*(sudo\s+)?(ba|z)?sh\b", "pipes a download into a shell"),
)
_OUTSIDE_WRITE = re.compile(r"(?:>>?|\btee\s+(?:-a\s+)?)\s*(~|/|\.\./)(\S*)")


@dataclass(frozen=True)
class Decision:
    ask: bool
    reason: str = ""


def denylisted(command: str, root: Path | None = None) -> str:
    """Why `command` is destructive ('' when it is not on the denylist)."""
    for pattern, why in DENYLIST:
        if re.search(pattern, command):
            return why
    for m in _OUTSIDE_WRITE.finditer(command):
        target = m.group(1) + m.group(2)
        if target.startswith("/dev/null") or target.startswith("/dev/std"):
            continue
        if root is not None and target.startswith("/"):
            try:
                Path(target).resolve().relative_to(root.resolve())
                continue
            except ValueError:
                pass
        return f"writes outside the repo ({target})"
    return ""


def decide(mode: str, kind: str, name: str, arguments: dict[str, Any], root: Path | None = None) -> Decision:
    """Whether tool `name` (of `kind` read|edit|shell) needs approval in `mode`."""
    if kind == "shell":
        why = denylisted(str(arguments.get("command", "")), root)
        if why:
            return Decision(True, f"destructive command ({why}): {arguments.get('command')}")
        if mode in ("suggest", "auto-edit"):
            return Decision(True, f"shell command needs approval in {mode} mode: {arguments.get('command')}")
        return Decision(False)
    if kind == "edit" and mode == "suggest":
        return Decision(True, f"{name} of {arguments.get('path')} needs approval in suggest mode")
    return Decision(False)

"""Which tool calls need the user's approval: the policy, nothing else.

Modes (`Config.approval_mode`): `suggest` asks before every edit and shell command,
`auto-edit` lets edits through and asks for shell commands, `full-auto` asks for nothing,
except that destructive shell commands (tools/denylist.py) always ask, whatever the mode, and
that full-auto's shell commands ask when no OS sandbox is available. It only decides; asking
(a prompt, a dialog) or stopping a non-interactive run is the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.denylist import denylisted
from tools import sandbox

from ..choices import APPROVAL_MODES as MODES


@dataclass(frozen=True)
class Decision:
    ask: bool
    reason: str = ""


def decide(mode: str, kind: str, name: str, arguments: dict[str, Any], root: Path | None = None) -> Decision:
    """Whether tool `name` (of `kind` read|edit|shell|mcp) needs approval in `mode`."""
    if kind == "mcp":  # another program, outside the sandbox: asks in every mode unless allowed
        server = name.split("__")[1] if name.count("__") >= 2 else name
        return Decision(True, f"{name} is a tool of the MCP server '{server}' (allow it with "
                        f"allow = true or allow_tools in [mcp.servers.{server}])")
    if kind == "shell":
        why = denylisted(str(arguments.get("command", "")), root)
        if why:
            return Decision(True, f"destructive command ({why}): {arguments.get('command')}")
        if mode in ("suggest", "auto-edit"):
            return Decision(True, f"shell command needs approval in {mode} mode: {arguments.get('command')}")
        sandboxed, why = sandbox.available()
        if not sandboxed:
            return Decision(True, f"no sandbox available ({why}): shell commands need approval")
        return Decision(False)
    if kind == "edit" and mode == "suggest":
        return Decision(True, f"{name} of {arguments.get('path')} needs approval in suggest mode")
    return Decision(False)

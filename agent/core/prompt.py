"""The system prompt: instructions, the tool list with schemas, and the project's AGENTS.md.

AGENTS.md is read only when it is a regular file inside the repository (a symlink pointing
elsewhere is not followed), and only its first `MAX_AGENTS_MD` characters.
"""

from __future__ import annotations

import json
from pathlib import Path

from tools import TOOLS

from .callformat import CLOSE, OPEN

MAX_AGENTS_MD = 4000


def system_prompt(root: Path) -> str:
    lines = [
        "You are spec-agent, a coding agent working inside a code repository. Use the tools "
        "to look at files, change them and run commands. Paths are relative to the repository root.",
        "",
        "To call a tool, write exactly one call and then stop:",
        OPEN + '{"name":"read_file","arguments":{"path":"src/main.py"}}' + CLOSE,
        "The result comes back in the next message. To change a file, read it first, then use "
        "edit_file with `old` copied exactly from the file. When the task is done, reply with a "
        "short summary and no tool call.",
        "",
        "Tools:",
    ]
    for tool in TOOLS.values():
        schema = json.dumps(tool.schema["properties"], separators=(",", ":"))
        lines.append(f"- {tool.name}: {tool.description} Arguments: {schema}")
    agents_md = root / "AGENTS.md"
    if agents_md.is_file() and not agents_md.is_symlink():
        try:
            text = agents_md.read_text(encoding="utf-8", errors="replace")[:MAX_AGENTS_MD]
            lines += ["", "Project instructions (AGENTS.md):", text.strip()]
        except OSError:
            pass
    return "\n".join(lines)

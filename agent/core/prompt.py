"""The system prompt: instructions, the tool list with schemas, and the project's AGENTS.md.

AGENTS.md is read under the same confinement as the tools' paths (tools/_paths.py), only when
it is a regular file and not a symlink (a FIFO or device is never opened), and only its first
`MAX_AGENTS_MD` characters.
"""

from __future__ import annotations

import json
from pathlib import Path

from tools import TOOLS

from .callformat import CLOSE, OPEN

MAX_AGENTS_MD = 4000


def system_prompt(root: Path, native_tools: bool = False) -> str:
    """`native_tools`: the backend gives the model the tool schemas in the model's own tool
    format (its chat template or a server's `tools` parameter), so they are not listed here."""
    lines = [
        "You are spec-agent, a coding agent working inside a code repository. You act through "
        "tools: a file changes only when you call edit_file or write_file, never by showing code "
        "in your reply. Paths are relative to the repository root.",
        "",
    ]
    if not native_tools:
        lines += ["To call a tool, write exactly one call and then stop:",
                  OPEN + '{"name":"read_file","arguments":{"path":"src/main.py"}}' + CLOSE,
                  "To change text in a file:",
                  OPEN + '{"name":"edit_file","arguments":{"path":"src/main.py","edits":[{"old":'
                  '"port = 80","new":"port = 8080"}]}}' + CLOSE]
    lines += [
        "The result comes back in the next message. Work in steps: read the file the task names; "
        "change it with edit_file (`old` copied exactly from the file), or write_file to create a "
        "file; when the task is done, reply with a one-line summary and no tool call. For a "
        "question, find the answer with grep or read_file, then answer in one sentence that "
        "names the file.",
    ]
    if not native_tools:
        lines += ["", "Tools:"]
        for tool in TOOLS.values():
            schema = json.dumps(tool.schema["properties"], separators=(",", ":"))
            lines.append(f"- {tool.name}: {tool.description} Arguments: {schema}")
    text = agents_md(root)
    if text:
        lines += ["", "Project instructions (AGENTS.md):", text]
    return "\n".join(lines)


def agents_md(root: Path) -> str:
    """The project's AGENTS.md, stripped and cut to MAX_AGENTS_MD characters; '' when there is
    none or it may not be read (outside the repo, a symlink, not a regular file)."""
    from tools._paths import PathError, confine
    from tools.read_file import open_regular

    try:
        full = confine(root, "AGENTS.md")
        if (root / "AGENTS.md").is_symlink():
            return ""
        with open_regular(full, "AGENTS.md") as f:
            data = f.read(MAX_AGENTS_MD * 4)
    except (PathError, OSError):
        return ""
    return data.decode("utf-8", errors="replace")[:MAX_AGENTS_MD].strip()

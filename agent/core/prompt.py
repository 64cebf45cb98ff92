"""The system prompt: instructions, the tool list with schemas, and the project's AGENTS.md.

AGENTS.md is read under the same confinement as the tools' paths (tools/_paths.py), only when
it is a regular file and not a symlink (a FIFO or device is never opened), and only its first
`MAX_AGENTS_MD` characters.
"""

from __future__ import annotations

import json
from pathlib import Path

from tools import TOOLS

from ..choices import BLOCK_EDIT_FORMATS
from .callformat import CLOSE, OPEN
from .searchreplace import AUTO_LINES

MAX_AGENTS_MD = 4000


WHOLE_FILE_TOOLS = ("edit_file", "write_file")  # not offered when files change by code block


def tools_for(edit_format: str) -> dict:
    """The tools the model is offered: in the "whole", "diff" and "auto" edit formats files
    change through code blocks in the reply, so edit_file and write_file are left out."""
    if edit_format not in BLOCK_EDIT_FORMATS:
        return dict(TOOLS)
    return {name: tool for name, tool in TOOLS.items() if name not in WHOLE_FILE_TOOLS}


def system_prompt(root: Path, native_tools: bool = False, edit_format: str = "tool") -> str:
    """`native_tools`: the backend gives the model the tool schemas in the model's own tool
    format (its chat template or a server's `tools` parameter), so they are not listed here.
    `edit_format`: "tool" (edit_file / write_file calls), "whole" (see core/wholefile.py),
    "diff" or "auto" (core/searchreplace.py)."""
    if edit_format in BLOCK_EDIT_FORMATS:
        lines = _whole_file_rules(native_tools, edit_format)
    else:
        lines = _tool_edit_rules(native_tools)
    if not native_tools:
        lines += ["", "Tools:"]
        for tool in tools_for(edit_format).values():
            schema = json.dumps(tool.schema["properties"], separators=(",", ":"))
            lines.append(f"- {tool.name}: {tool.description} Arguments: {schema}")
    text = agents_md(root)
    if text:
        lines += ["", "Project instructions (AGENTS.md):", text]
    return "\n".join(lines)


def _tool_edit_rules(native_tools: bool) -> list[str]:
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
    return lines


WHOLE_EXAMPLE = ["util.py", "```python", "def f(x):", '    """Return x doubled."""',
                 "    return 2 * x", "```"]
DIFF_EXAMPLE = ["util.py", "```python", "<<<<<<< SEARCH", "def f(x):", "    return 2 * x",
                "=======", "def f(x):", '    """Return x doubled."""', "    return 2 * x",
                ">>>>>>> REPLACE", "```"]


def _whole_file_rules(native_tools: bool, edit_format: str = "whole") -> list[str]:
    """How the model changes files in the code-block formats: "whole", "diff" (search/replace
    blocks) and "auto" (whole files under AUTO_LINES lines, search/replace from there on)."""
    lines = [
        "You are spec-agent, a coding agent working inside a code repository. Paths are "
        "relative to the repository root. Files the user names are attached to the message "
        'between <file path="..."> and </file>.',
        "",
    ]
    whole = ("reply with its path on one line and then the complete new file in one code "
             "block: every line of it, the unchanged ones too.")
    diff = ("reply with its path on one line and then a code block of SEARCH/REPLACE blocks: "
            "SEARCH copies the lines to change exactly as they are in the file (a few lines, "
            "enough to match one place), REPLACE is what they become.")
    if edit_format == "whole":
        lines += ["To change or create a file, " + whole + " For example, to add a docstring "
                  "to f in util.py:", *WHOLE_EXAMPLE]
    elif edit_format == "diff":
        lines += ["To change a file, " + diff + " For example, to add a docstring to f in "
                  "util.py:", *DIFF_EXAMPLE,
                  "To create a file, leave SEARCH empty."]
    else:
        lines += [f"To change a file of under {AUTO_LINES} lines, or to create a file, " + whole
                  + f" To change a file of {AUTO_LINES} lines or more, " + diff + " For "
                  "example, to add a docstring to f in util.py, a file of 400 lines:",
                  *DIFF_EXAMPLE]
    lines += ["Then add one line saying what you changed. The file is saved as you write it."]
    if not native_tools:
        lines += ["", "To read a file that is not attached, or to search, call a tool; write "
                  "exactly one call and then stop:",
                  OPEN + '{"name":"read_file","arguments":{"path":"src/main.py"}}' + CLOSE]
    lines += [
        "A tool's result comes back in the next message. For a question, find the answer "
        "(in the attached files, or with grep or read_file), then answer in one sentence that "
        "names the file, without a code block.",
    ]
    return lines


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

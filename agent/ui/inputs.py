"""What users type besides plain text, shared by the interactive UIs.

- `@path` attaches a repository file: `attach_mentions` appends the named files' contents to
  the message (files the repository ignores, binary files and files outside it are not
  attached); `fuzzy_files` ranks the repository's files for completion.
- `!command` runs a shell command as the user (not the agent: no approval, the user typed
  it) in the repository with a timeout; `shell_note` formats its output for the conversation.
Nothing here draws or talks to the model.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

MENTION = re.compile(r"(?<![\w@])@([\w./\-]+)")
MAX_ATTACH_CHARS = 20_000  # per file
MAX_NOTE_CHARS = 8_000


def repo_files(ctx) -> list[str]:
    """The repository's files (git's view: ignored files excluded), repo-relative."""
    from tools.list_files import repo_files as listing

    return listing(ctx)


def fuzzy_files(query: str, files: list[str], limit: int = 20) -> list[str]:
    """Files whose path contains `query`'s characters in order, best first: a match in the
    file name beats one spread over folders, a shorter and earlier match beats a longer one."""
    q = query.lower()
    scored = []
    for f in files:
        low = f.lower()
        pos, start, ok = -1, -1, True
        for ch in q:
            pos = low.find(ch, pos + 1)
            if pos < 0:
                ok = False
                break
            start = pos if start < 0 else start
        if not ok:
            continue
        name_at = low.rfind("/") + 1
        span = (pos - start) if q else 0
        score = (0 if q in low[name_at:] else 1 if q in low else 2, span, len(f), f)
        scored.append(score)
    return [s[-1] for s in sorted(scored)[:limit]]


def attach_mentions(text: str, ctx) -> tuple[str, list[str]]:
    """`text` with the contents of every `@path` that names a repository file appended;
    returns (message, attached paths)."""
    from tools._paths import PathError, confine
    from tools.read_file import read_text

    known = set(repo_files(ctx))
    attached, blocks = [], []
    for path in dict.fromkeys(m.group(1).rstrip(".,;:") for m in MENTION.finditer(text)):
        if path not in known:
            continue
        try:
            content = read_text(confine(ctx.root, path).read_bytes())
        except (PathError, OSError):
            continue
        if content is None:
            continue
        if len(content) > MAX_ATTACH_CHARS:
            content = content[:MAX_ATTACH_CHARS] + f"\n[... {len(content) - MAX_ATTACH_CHARS} more characters]"
        attached.append(path)
        blocks.append(f'<file path="{path}">\n{content}\n</file>')
    if not blocks:
        return text, []
    return text + "\n\nAttached files:\n" + "\n".join(blocks), attached


def run_user_command(command: str, root: Path, timeout_s: float = 60.0) -> tuple[int, str]:
    """Run the user's own `!command` in `root`; (exit code, stdout+stderr). 124 on timeout."""
    try:
        proc = subprocess.run(command, shell=True, cwd=root, capture_output=True, text=True,
                              errors="replace", timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or "") if isinstance(e.stdout, str) else ""
        return 124, out + f"\n[killed after {timeout_s:g} s]"
    return proc.returncode, proc.stdout + proc.stderr


def shell_note(command: str, code: int, output: str) -> str:
    """The conversation message that carries a `!command`'s output to the model."""
    if len(output) > MAX_NOTE_CHARS:
        output = output[:MAX_NOTE_CHARS] + f"\n[... {len(output) - MAX_NOTE_CHARS} more characters]"
    return f"I ran `{command}` myself (exit code {code}). Its output:\n```\n{output.rstrip()}\n```"

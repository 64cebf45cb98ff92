"""What users type besides plain text, shared by the interactive UIs.

- `@path` attaches a repository file: `attach_mentions` appends the named files' contents to
  the message (files the repository ignores, binary files, files outside it and anything
  but a regular file are not attached; a big file is read only as far as is attached, under
  the same path confinement and special-file rules as the read_file tool);
  `fuzzy_files` ranks the repository's files for completion.
- `!command` runs a shell command as the user (not the agent: no approval, no sandbox, the
  user typed it) in the repository with a timeout that also ends what it left running, and
  a cap on the output kept; `shell_note` formats its output for the conversation.
Nothing here draws or talks to the model.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from ..core.attach import (  # noqa: F401
    MAX_ATTACH_CHARS,
    MENTION,
    attach_mentions,
    attachment,
    repo_files,
)

MAX_NOTE_CHARS = 8_000
MAX_USER_OUTPUT = 1 << 20  # bytes of a `!command`'s output kept (the note shows less)


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


def run_user_command(command: str, root: Path, timeout_s: float = 60.0) -> tuple[int, str]:
    """Run the user's own `!command` in `root`; (exit code, stdout+stderr, the first
    MAX_USER_OUTPUT bytes kept). 124 on timeout: then everything it started in its process
    group is killed too (a background child would otherwise hold the output open)."""
    from tools import procs
    from tools.run_shell import CappedReader

    try:  # its own process group, dying with us (tools/procs.py)
        proc = procs.popen(command, shell=True, cwd=root, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the command
        return 127, f"could not start the command: {e}"
    reader = CappedReader(proc.stdout, MAX_USER_OUTPUT)
    reader.start()
    deadline = time.monotonic() + timeout_s
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    reader.join(timeout=max(0.0, deadline - time.monotonic()))
    if timed_out or reader.is_alive():  # its time is up, or a child it left holds the output
        procs.kill_group(proc)
        proc.wait()
        reader.join(timeout=2)
    procs.reaped(proc)
    out = reader.kept.decode("utf-8", errors="replace")
    if reader.total > len(reader.kept):
        out += f"\n[... output cut: {reader.total - len(reader.kept)} more bytes]"
    if timed_out:
        return 124, out + f"\n[killed after {timeout_s:g} s]"
    return proc.returncode, out


def shell_note(command: str, code: int, output: str) -> str:
    """The conversation message that carries a `!command`'s output to the model."""
    if len(output) > MAX_NOTE_CHARS:
        output = output[:MAX_NOTE_CHARS] + f"\n[... {len(output) - MAX_NOTE_CHARS} more characters]"
    return f"I ran `{command}` myself (exit code {code}). Its output:\n```\n{output.rstrip()}\n```"

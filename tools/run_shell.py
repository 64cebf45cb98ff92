"""`run_shell`: run a shell command in the repo root with a timeout and a capped output.

The approval policy (agent/approvals.py) decides whether the command may run; this module
only runs it. Output (stdout and stderr together) is read as it comes, so a command that
prints without end cannot exhaust memory; on timeout the whole process group is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading

from ._base import ToolContext, ToolResult

SCHEMA = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "shell command"},
        "timeout_s": {"type": "number", "minimum": 1, "maximum": 600, "description": "seconds before it is killed"},
    },
    "required": ["command"],
    "additionalProperties": False,
}
DESCRIPTION = "Run a shell command in the repo root; returns exit code and output."


class _Reader(threading.Thread):
    """Drains a pipe, keeping the first `limit` bytes and counting the rest."""

    def __init__(self, pipe, limit: int):
        super().__init__(daemon=True)
        self.pipe, self.limit = pipe, limit
        self.kept = bytearray()
        self.total = 0

    def run(self) -> None:
        while chunk := self.pipe.read1(65536) if hasattr(self.pipe, "read1") else self.pipe.read(65536):
            self.total += len(chunk)
            room = self.limit - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def run_shell(ctx: ToolContext, command: str, timeout_s: float | None = None) -> ToolResult:
    timeout = min(timeout_s or ctx.shell_timeout_s, ctx.shell_timeout_s)
    try:
        proc = subprocess.Popen(
            command, shell=True, cwd=ctx.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
    except OSError as e:
        return ToolResult.error(f"could not start the command: {e}")
    reader = _Reader(proc.stdout, ctx.max_output_chars)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill(proc)
        proc.wait()
    reader.join(timeout=5)
    text = reader.kept.decode("utf-8", errors="replace")
    if reader.total > len(reader.kept):
        text += f"\n[... output cut: {reader.total - len(reader.kept)} more bytes]"
    if timed_out:
        return ToolResult(False, f"Error: timed out after {timeout:g}s and was killed\n{text}")
    return ToolResult(proc.returncode == 0, f"exit code {proc.returncode}\n{text}")

"""`run_shell`: run a shell command in the repo root with a timeout and a capped output.

Every command runs inside the OS sandbox (tools/sandbox.py: the repo is the only writable
place, its .git stays read-only, no network unless allowed, and nothing it starts outlives
the call) unless the context says `sandbox="off"`; with "auto" and no working sandbox the
command is refused, never silently run bare. The approval policy (agent/approvals.py)
decides whether a command may run; this module only runs it. Output (stdout and stderr
together) is read as it comes, so a command that prints without end cannot exhaust memory;
on timeout the process group is killed (and with it the whole sandbox).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading

from . import sandbox
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
DESCRIPTION = ("Run a shell command in the repo root (sandboxed: only the repo is writable, .git is "
               "read-only, no network unless allowed); returns exit code and output.")


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
    argv = ["/bin/sh", "-c", command]
    if ctx.sandbox != "off":
        ok, why = sandbox.available()
        if not ok:
            return ToolResult.error(f"no sandbox available ({why}); the command was not run. "
                                    'The user may install one or set sandbox = "off".')
        argv = sandbox.wrap(argv, ctx.root, ctx.allow_network)
    try:
        proc = subprocess.Popen(
            argv, cwd=ctx.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, env=sandbox.child_env(),
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

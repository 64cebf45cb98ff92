"""`run_shell`: run a shell command in the repo root with a timeout and a capped output.

Every command runs inside the OS sandbox (tools/sandbox.py: the repo is the only writable
place, its .git stays read-only unless the command is plain git recording work, no network
unless allowed, and nothing it starts outlives the call) unless the context says
`sandbox="off"`; with "auto" and no working sandbox the command is refused, never silently
run bare. The approval policy (agent/core/approvals.py) decides whether a command may run; this
module only runs it. Output (stdout and stderr together) is read as it comes, so a command
that prints without end cannot exhaust memory; on timeout, or when the sandbox holds
sandbox.MAX_PROCESSES processes (counted every _TICK_S), the process group is killed (and
with it the whole sandbox); when the command ends, what it left in its group is killed too.
Commands get a scrubbed environment (tools/environ.py: no credentials unless the user passes
them). The output loses its terminal escape sequences before the model sees it
(tools/termtext.py). Every command dies with the agent (tools/procs.py; unsandboxed ones on
Linux run under tools/reaper.py, so their own children do too).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import git, procs, sandbox
from ._base import ToolContext, ToolResult
from .termtext import plain_output

SCHEMA = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "shell command"},
        "timeout_s": {"type": "number", "minimum": 1, "maximum": 600, "description": "seconds before it is killed"},
    },
    "required": ["command"],
    "additionalProperties": False,
}
REAPER = Path(__file__).with_name("reaper.py")
_TICK_S = 0.05  # how often a running sandbox's processes are counted
DESCRIPTION = ("Run a shell command in the repo root (sandboxed: only the repo is writable, .git is "
               "read-only, no network unless allowed); returns exit code and output.")


class CappedReader(threading.Thread):
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


class _Census:
    """Counts the processes of a bwrap sandbox, once bwrap has said (on `fd`, as JSON) which
    process is the sandbox's first."""

    def __init__(self, fd: int | None):
        self.fd, self.buf, self.child = fd, b"", None
        if fd is not None:
            os.set_blocking(fd, False)

    def count(self) -> int | None:
        if self.child is None and self.fd is not None:
            try:
                self.buf += os.read(self.fd, 4096)
            except (BlockingIOError, OSError):
                return None
            if b"}" in self.buf:
                try:
                    self.child = int(json.loads(self.buf.decode())["child-pid"])
                except (ValueError, KeyError, TypeError):
                    self.fd = None  # unreadable: count nothing
        return sandbox.process_count(self.child) if self.child else None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _wait(proc: subprocess.Popen, timeout: float, census: _Census) -> str:
    """'' when the command ended by itself, else why it was killed: 'timeout' or
    'processes' (more than sandbox.MAX_PROCESSES at once)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            proc.wait(timeout=max(0.0, min(_TICK_S, deadline - time.monotonic())))
            return ""
        except subprocess.TimeoutExpired:
            pass
        n = census.count()
        why = ("timeout" if time.monotonic() >= deadline else
               "processes" if n is not None and n >= sandbox.MAX_PROCESSES else "")
        if why:
            _stop(proc)
            return why


def _stop(proc: subprocess.Popen) -> None:
    """Kill the command: under tools/reaper.py, SIGTERM first (the reaper then kills every
    process below it, those that left its group too), then the whole group."""
    if isinstance(proc.args, list) and str(REAPER) in proc.args:
        proc.terminate()
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
    procs.kill_group(proc)
    proc.wait()


_Started = tuple[list[str], dict[str, str], "tuple[int, int] | None", "list[Path] | None"]


def _start(ctx: ToolContext, command: str) -> _Started | str:
    """(argv, environment, bwrap's info pipe (read end, write end) or None, and when the git
    folder is writable the paths in it to watch (sandbox.missing_git_code), else None), or
    why the command cannot run."""
    argv, env = ["/bin/sh", "-c", command], sandbox.child_env(ctx.env_passthrough)
    if ctx.sandbox == "off":
        if sys.platform.startswith("linux"):  # what it leaves behind dies with it, and with us
            argv = [sys.executable, "-I", "-S", str(REAPER), str(os.getpid()), *argv]
        return argv, env, None, None
    ok, why = sandbox.available()
    if not ok:
        return (f"no sandbox available ({why}); the command was not run. "
                'The user may install one or set sandbox = "off".')
    git_writable = sandbox.git_may_write(command, ctx.root, env)
    watch = sandbox.missing_git_code(ctx.root) if git_writable else None
    if git_writable:
        env = sandbox.without_hooks(env)
    info = os.pipe() if sys.platform.startswith("linux") else None
    if info is not None:
        os.set_inheritable(info[1], True)
    argv = sandbox.wrap(argv, ctx.root, ctx.allow_network, git_writable=git_writable,
                        info_fd=info[1] if info else None, read_only=unsaved_files(ctx))
    return argv, env, info, watch


MAX_KEPT = 256  # unsaved files kept read-only per command (a bind mount each)


def unsaved_files(ctx: ToolContext) -> tuple[Path, ...]:
    """The untracked files over `ctx.keep_unsaved_over` bytes: no snapshot holds them, so a
    sandboxed command may not change or delete them (the first MAX_KEPT)."""
    if not ctx.keep_unsaved_over or not ctx.in_git:
        return ()
    out = git.run(ctx.root, "ls-files", "-z", "--others", "--exclude-standard", check=False).stdout
    kept = []
    for rel in (p for p in out.split("\0") if p):
        try:
            st = os.lstat(ctx.root / rel)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size > ctx.keep_unsaved_over:
            kept.append(ctx.root / rel)
            if len(kept) >= MAX_KEPT:
                break
    return tuple(kept)


def run_shell(ctx: ToolContext, command: str, timeout_s: float | None = None) -> ToolResult:
    timeout = min(timeout_s or ctx.shell_timeout_s, ctx.shell_timeout_s)
    if "\x00" in command:
        return ToolResult.error("the command contains a NUL byte, which no shell can be given; not run")
    started = _start(ctx, command)
    if isinstance(started, str):
        return ToolResult.error(started)
    argv, env, info, watch = started
    try:
        proc = procs.popen(  # its own process group, dying with us (tools/procs.py)
            argv, cwd=ctx.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, env=env, pass_fds=(info[1],) if info else (),
        )
    except OSError as e:
        if info:
            os.close(info[0])
        return ToolResult.error(f"could not start the command: {e}")
    finally:
        if info:
            os.close(info[1])
    census = _Census(info[0] if info else None)
    reader = CappedReader(proc.stdout, ctx.max_output_chars)
    reader.start()
    try:
        killed = _wait(proc, timeout, census)
    finally:
        census.close()
        procs.reaped(proc)  # what it left running in its group dies with the call
    reader.join(timeout=5)
    text = plain_output(reader.kept.decode("utf-8", errors="replace"))  # no colours, no redraws
    if reader.total > len(reader.kept):
        text += f"\n[... output cut: {reader.total - len(reader.kept)} more bytes]"
    planted = sandbox.remove_planted(watch) if watch else []
    if planted:
        text += (f"\n[the command created {', '.join(planted)}, where git looks for code to run "
                 "or for another git folder; removed]")
    if killed == "timeout":
        return ToolResult(False, f"Error: timed out after {timeout:g}s and was killed\n{text}")
    if killed == "processes":
        return ToolResult(False, f"Error: had {sandbox.MAX_PROCESSES} processes at once (the "
                                 f"sandbox's limit) and was killed\n{text}")
    if planted:
        return ToolResult(False, f"exit code {proc.returncode}\n{text}")
    if proc.returncode != 0 and ctx.sandbox != "off" and watch is None and _git_read_only(command, text):
        text += "\n" + _GIT_READ_ONLY_NOTE
    return ToolResult(proc.returncode == 0, f"exit code {proc.returncode}\n{text}")


_GIT_READ_ONLY_NOTE = (
    "[note: the sandbox kept .git read-only for this command; only a command made of plain git "
    "invocations that record work (git add, commit, switch, stash pop, ...; no other program, "
    "variable, substitution, glob or option that writes elsewhere; nothing destructive) may "
    "write it]")


def _git_read_only(command: str, text: str) -> bool:
    """The failure may come from the read-only git folder (git fails silently for some, such
    as `git stash`)."""
    return ("Read-only file system" in text and ".git" in text) or bool(re.search(r"\bgit\b", command))

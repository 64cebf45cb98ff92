"""Starting child processes that do not outlive their call or us.

Every child the tools start (shell commands, the grep worker) goes through `popen`: it runs
in a process group of its own (so killing the group kills what it started too), and on
Linux it gets PR_SET_PDEATHSIG=SIGKILL, so the kernel kills it when the thread that started
it ends, however that happens (SIGKILL of the agent included). The groups still running are
killed when the interpreter exits normally (`atexit`), and `kill_group` is what a timeout
calls. PDEATHSIG reaches only the child itself: a sandboxed command's whole tree dies with
bwrap (--die-with-parent, its own PID namespace), an unsandboxed one's with tools/reaper.py
(a subreaper that kills what is left under it), which `run_shell` puts around it on Linux.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
from typing import Any

_PR_SET_PDEATHSIG = 1
_live: set[int] = set()  # process groups started and not yet reaped
_lock = threading.Lock()


def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()  # looked up now: the child, between fork and exec, must not load libraries


def _preexec(parent: int):
    """The function the child runs before exec: die with the parent (and if the parent is
    already gone, which PDEATHSIG would not catch, exit)."""
    prctl = _PRCTL

    def die_with_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return die_with_parent


def popen(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(argv, **kwargs)` in a new session (its own process group), dying with
    the thread that starts it on Linux; tracked until `reaped`."""
    kwargs["start_new_session"] = True
    if _PRCTL is not None:
        kwargs["preexec_fn"] = _preexec(os.getpid())
    proc = subprocess.Popen(argv, **kwargs)
    with _lock:
        _live.add(proc.pid)
    return proc


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL `proc`'s process group (everything it started that stayed in it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except OSError:
            pass


def reaped(proc: subprocess.Popen) -> None:
    """`proc` has been waited for: kill what is left of its group and stop tracking it."""
    kill_group(proc)
    with _lock:
        _live.discard(proc.pid)


def run(argv: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess:
    """`subprocess.run` through `popen`: output captured; on timeout the whole group is
    killed and `subprocess.TimeoutExpired` raised."""
    input_ = kwargs.pop("input", None)
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    if input_ is not None:
        kwargs["stdin"] = subprocess.PIPE
    proc = popen(argv, **kwargs)
    try:
        out, err = proc.communicate(input_, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.communicate()
        raise
    finally:
        reaped(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@atexit.register
def _kill_all() -> None:
    with _lock:
        groups = list(_live)
        _live.clear()
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

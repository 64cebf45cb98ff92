"""Starting child processes that do not outlive their call or us.

Every child the agent starts (shell commands, the grep worker, hooks, MCP servers) goes
through `popen`: it runs in a process group of its own (so killing the group kills what it
started too), and on Linux it gets PR_SET_PDEATHSIG=SIGKILL, so the kernel kills it when the
thread that started it ends, however that happens (SIGKILL of the agent included). The groups
still running are killed when the interpreter exits normally (`atexit`), and `kill_group` is
what a timeout calls.

PDEATHSIG reaches only the child itself. A program that starts programs of its own (a hook,
an MCP server, an unsandboxed shell command) is started `contain=True`: on Linux it then runs
under tools/reaper.py, a child subreaper that dies with the agent (PDEATHSIG=SIGTERM) and
kills every process below it when the program ends, when the agent dies or when it is sent
SIGTERM, also those that left the group with setsid or double-forked (they are re-parented
to the reaper, not to init). `contained(argv)` is that argv, for a process someone else
spawns (the MCP SDK starts its servers itself). `kill_group` sends a reaper SIGTERM first.
Not covered: a process handed to another supervisor (systemd-run, at, a D-Bus activated
service), and the descendants of a reaper that is itself SIGKILLed by someone else. A
sandboxed command's whole tree dies with bwrap (--die-with-parent, its own PID namespace).
Elsewhere than Linux only the process group is killed.
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
import time
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1
REAPER = Path(__file__).with_name("reaper.py")
REAPER_STOP_S = 1.0  # for a reaper to kill what is below it after SIGTERM
_live: set[int] = set()  # process groups started and not yet reaped
_reapers: set[int] = set()  # those of them led by tools/reaper.py
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


def contained(argv: list[str]) -> list[str]:
    """`argv` run under tools/reaper.py on Linux (nothing it starts outlives it or us);
    elsewhere `argv` itself. The reaper runs with `python -I -S`: no site, no environment."""
    if _PRCTL is None:
        return list(argv)
    return [sys.executable, "-I", "-S", str(REAPER), str(os.getpid()), *argv]


def is_reaper(argv: Any) -> bool:
    return isinstance(argv, list) and len(argv) > 3 and argv[3] == str(REAPER)


def popen(argv: list[str] | str, contain: bool = False, **kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(argv, **kwargs)` in a new session (its own process group), dying with
    the thread that starts it on Linux; tracked until `reaped`. `contain`: under
    tools/reaper.py (see the module's docstring); a `shell=True` string runs as `/bin/sh -c`."""
    if contain:
        if kwargs.pop("shell", False):
            argv = ["/bin/sh", "-c", argv] if isinstance(argv, str) else ["/bin/sh", "-c", *argv]
        argv = contained(list(argv))
    kwargs["start_new_session"] = True
    if _PRCTL is not None:
        kwargs["preexec_fn"] = _preexec(os.getpid())
    proc = subprocess.Popen(argv, **kwargs)
    with _lock:
        _live.add(proc.pid)
        if is_reaper(argv):
            _reapers.add(proc.pid)
    return proc


def kill_group(proc: subprocess.Popen) -> None:
    """Kill `proc` and its process group (everything it started that stayed in it); a reaper
    is sent SIGTERM first, so that it kills what left the group too."""
    if proc.pid in _reapers and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=REAPER_STOP_S)
        except subprocess.TimeoutExpired:
            pass
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
        _reapers.discard(proc.pid)


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
    """At a normal exit: reapers first get SIGTERM (and up to REAPER_STOP_S to kill what is
    below them), then every group still tracked is SIGKILLed."""
    with _lock:
        groups, reapers = list(_live), list(_reapers)
        _live.clear()
        _reapers.clear()
    for pid in reapers:
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + REAPER_STOP_S
    while reapers and time.monotonic() < deadline:
        reapers = [p for p in reapers if _running(p)]
        time.sleep(0.01)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _running(pid: int) -> bool:
    """Whether our child `pid` has not ended (reaping it if it has)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == 0

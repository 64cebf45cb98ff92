"""`python -I -S reaper.py PARENT_PID ARGV...`: run ARGV so that nothing it starts outlives it.

The launcher tools/procs.py puts around unsandboxed shell commands, hooks and MCP servers
on Linux (a sandboxed command gets the same from bwrap's PID namespace). This process becomes
a child subreaper (PR_SET_CHILD_SUBREAPER: whatever ARGV starts and leaves behind is
re-parented here, not to init), asks for SIGTERM when the agent dies (PR_SET_PDEATHSIG),
then runs ARGV. When ARGV ends, or the agent dies, or it is sent
SIGTERM, every process left under it is SIGKILLed and reaped. It exits with ARGV's exit code
(128 + the signal when a signal ended it). Standard library only, nothing imported from the
project: it starts in a few milliseconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


def _descendants() -> list[int]:
    out, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
                out += kids
                todo += kids
        except OSError:
            continue
    return out


def _kill_all() -> None:
    """SIGKILL and reap everything below this process, until nothing is left."""
    for _ in range(100):
        pids = _descendants()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap(block=False)
    _reap(block=False)


def _reap(block: bool) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    parent, command = int(argv[0]), argv[1:]
    prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    def stop(signum: int, _frame: object) -> None:
        _kill_all()
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, stop)
    if os.getppid() != parent:  # the agent died before PDEATHSIG was set
        return 1
    child = os.fork()
    if child == 0:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except OSError as e:  # said on stderr (an MCP server's goes to its log)
            os.write(2, f"{command[0]}: {e.strerror or e}\n".encode(errors="replace"))
        finally:
            os._exit(127)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            break
    _kill_all()
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

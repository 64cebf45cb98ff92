"""The OS sandbox that `run_shell` puts every command in: bubblewrap on Linux, Seatbelt on macOS.

Inside, the whole filesystem is read-only except the repository (and a private temp dir);
the repository's git folder stays read-only too, because hooks and `.git/config` run code
outside the sandbox the next time anyone uses git. The network is cut unless allowed. On
Linux the command also gets its own PID namespace, so nothing it starts (background jobs,
`setsid` children) outlives the call, and killing `bwrap` kills everything inside; macOS
has no such namespace, so there only the process group is killed on timeout.

`available()` probes once per process whether a sandbox actually works here (bwrap can be
installed yet refused inside some containers); `wrap()` turns an argv into the sandboxed
argv. This module neither runs commands nor decides whether they need approval.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ._paths import git_dirs

SANDBOX_EXEC = "/usr/bin/sandbox-exec"  # never from PATH: a repo could shadow it
_PROBE_TIMEOUT_S = 30.0


def _bwrap() -> str | None:
    return "/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else shutil.which("bwrap")


_probed: tuple[bool, str] | None = None


def child_env() -> dict[str, str]:
    """The environment for commands we start: ours without the OpenBLAS preload the CLI adds
    to itself (a multi-threaded library preloaded into bwrap makes it hang at start, and the
    user's commands should not get it either)."""
    env = dict(os.environ)
    kept = [p for p in env.pop("LD_PRELOAD", "").split(":") if p and "libopenblas" not in p]
    if kept:
        env["LD_PRELOAD"] = ":".join(kept)
    env.pop("SPEC_AGENT_BLAS_REEXEC", None)
    return env


def available() -> tuple[bool, str]:
    """(True, what) when commands can be sandboxed here, else (False, why not). A definite
    answer is cached; a probe that timed out (a loaded machine) is tried again next time."""
    global _probed
    if _probed is None:
        result, definite = _probe()
        if not definite:
            return result
        _probed = result
    return _probed


def forget() -> None:
    """Probe again on the next `available()` (tests; a sandbox installed meanwhile)."""
    global _probed
    _probed = None


def _probe() -> tuple[tuple[bool, str], bool]:
    """((works, what or why), whether the answer is definite)."""
    if sys.platform == "darwin":
        if not os.access(SANDBOX_EXEC, os.X_OK):
            return (False, f"{SANDBOX_EXEC} not found"), True
        probe = [SANDBOX_EXEC, "-p", "(version 1)(allow default)", "/usr/bin/true"]
        what = "sandbox-exec"
    elif sys.platform.startswith("linux"):
        exe = _bwrap()
        if exe is None:
            return (False, "bwrap not installed: install the bubblewrap package"), True
        probe = wrap(["true"], Path("/"), allow_network=False, exe=exe)
        what = "bwrap"
    else:
        return (False, f"no sandbox implemented for {sys.platform}"), True
    try:
        r = subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=_PROBE_TIMEOUT_S, check=False, env=child_env())
    except subprocess.TimeoutExpired:
        return (False, f"{what} did not start within {_PROBE_TIMEOUT_S:g} s"), False
    except OSError as e:
        return (False, f"{what} failed to start: {e}"), True
    if r.returncode != 0:
        detail = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[0]
        return (False, f"{what} does not work here: {detail}"), True
    return (True, what), True


def wrap(argv: list[str], root: Path, allow_network: bool = False, git_writable: bool = False,
         exe: str | None = None) -> list[str]:
    """`argv` run in the sandbox with `root` writable (its git folder not, unless
    `git_writable`) and the network cut unless `allow_network`."""
    root = Path(os.path.realpath(root))
    protected = [] if git_writable else _protected(root)
    if sys.platform == "darwin":
        return _seatbelt(argv, root, protected, allow_network)
    return _bubblewrap(argv, root, protected, allow_network, exe or _bwrap() or "bwrap")


def _protected(root: Path) -> list[Path]:
    """The git data to keep read-only: the git folders, and a `.git` *file* at the root too
    (rewritten, it would point git, run later outside the sandbox, at planted hooks)."""
    dirs = [Path(os.path.realpath(d)) for d in git_dirs(root)]
    dot = root / ".git"
    if dot.is_file() and not dot.is_symlink() and dot not in dirs:
        dirs.insert(0, dot)
    return dirs


def _bubblewrap(argv: list[str], root: Path, protected: list[Path], allow_network: bool,
                exe: str) -> list[str]:
    out = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    if root != Path("/"):  # (the probe: nothing writable)
        out += ["--bind", str(root), str(root)]
    for d in protected:  # after the repo's bind, so they cover it; also re-shows a gitdir in /tmp
        out += ["--ro-bind", str(d), str(d)]
    if not allow_network:
        out.append("--unshare-net")
    out += ["--unshare-pid", "--die-with-parent", "--new-session",
            "--setenv", "TMPDIR", "/tmp", "--chdir", str(root), "--"]
    return out + list(argv)


# Seatbelt: everything allowed but what is denied; denies only, so rule order cannot matter.
# Paths come in as -D parameters: no quoting of user paths inside the profile.
_SBPL = """(version 1)
(allow default)
(deny file-write* (require-not (require-any
  (subpath (param "ROOT")) (subpath (param "TMP")) (subpath "/private/tmp")
  (literal "/dev/null") (literal "/dev/zero") (literal "/dev/tty")
  (regex #"^/dev/fd/[0-9]+$") (regex #"^/dev/ttys[0-9]+$"))))
"""


def _seatbelt(argv: list[str], root: Path, protected: list[Path], allow_network: bool) -> list[str]:
    profile = _SBPL
    params = ["-D", f"ROOT={root}", "-D", f"TMP={os.path.realpath(tempfile.gettempdir())}"]
    for i, d in enumerate(protected):
        profile += f'(deny file-write* (subpath (param "GIT{i}")))\n'
        params += ["-D", f"GIT{i}={d}"]
    if not allow_network:
        profile += "(deny network*)\n"
    return [SANDBOX_EXEC, "-p", profile, *params, *argv]


def resolve(setting: str) -> tuple[str, str]:
    """The `ToolContext.sandbox` value for the config's `sandbox` setting, and a warning for the
    user ('' when none). With "auto" and no working sandbox, commands run unsandboxed, and
    the approval policy asks for each one (it probes `available()` itself)."""
    if setting == "off":
        return "off", ""
    ok, why = available()
    if ok:
        return "auto", ""
    return "off", f"no sandbox available ({why}): shell commands run unsandboxed and need approval"

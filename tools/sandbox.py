"""The OS sandbox that `run_shell` puts every command in: bubblewrap on Linux, Seatbelt on macOS.

Inside, the whole filesystem is read-only except the repository (and a private temp dir);
the repository's git folder stays read-only too, because hooks and `.git/config` run code
outside the sandbox the next time anyone uses git. A command made only of plain git
invocations that record work (`git add`, `commit`, `stash pop`, `switch`, ...; see
`git_may_write`) gets the git folder writable, except the parts that name code git runs
(config, hooks, submodule and worktree folders), and runs without hooks. The network is cut
unless allowed, and so are the services whose sockets live in /run (a session bus, docker,
databases). On Linux the command also gets its own PID, IPC and UTS namespaces, no
capabilities (a root user's sandbox could otherwise remount the read-only filesystem) and
a read-only /proc/sys, so nothing it starts outlives the call, and killing `bwrap` kills
everything inside; it runs at a low priority (NICE) and may start at most MAX_PROCESSES
processes (RLIMIT_NPROC inside its user namespace, which the kernel does not apply to root:
`run_shell` also counts them and kills the command at the limit). macOS has no such namespaces, so there only the process group
is killed on timeout and the process count is not limited.

`available()` probes once per process whether a sandbox actually works here (bwrap can be
installed yet refused inside some containers); `wrap()` turns an argv into the sandboxed
argv. This module neither runs commands nor decides whether they need approval.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from . import git
from ._paths import _is_dotgit, git_dirs, nested_git_dirs
from .denylist import denylisted
from .environ import scrubbed
from .shellparse import SUBST, simple_commands

SANDBOX_EXEC = "/usr/bin/sandbox-exec"  # never from PATH: a repo could shadow it
PRLIMIT = "/usr/bin/prlimit"
# Processes a sandboxed command may have at once (threads count too, for RLIMIT_NPROC):
# room for a parallel build on a big machine, far from what makes one unusable.
MAX_PROCESSES = max(1024, 32 * (os.cpu_count() or 1))
_RLIMIT_SLACK = 16  # RLIMIT_NPROC a little above, so that run_shell's count sees the limit reached
# Sandboxed commands run at this nice level: what the user runs meanwhile stays responsive,
# and so does run_shell's process count when a command forks without end (measured here with
# a shell fork bomb and a limit of 24, as root: killed after 0.4-1.1 s at nice 19, 3-8 s at 0).
NICE = 19
NICE_EXE = "/usr/bin/nice"
_PROBE_TIMEOUT_S = 30.0


def _bwrap() -> str | None:
    return "/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else shutil.which("bwrap")


_probed: tuple[bool, str] | None = None


def child_env(passthrough: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment for commands we start: ours cut to tools/environ.py's allowlist (no
    credentials unless `passthrough` names them), without the OpenBLAS preload the CLI adds
    to itself (a multi-threaded library preloaded into bwrap makes it hang at start, and the
    user's commands should not get it either)."""
    env = scrubbed(os.environ, passthrough)
    if "LD_PRELOAD" in os.environ:
        env["LD_PRELOAD"] = os.environ["LD_PRELOAD"]
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
         exe: str | None = None, info_fd: int | None = None,
         read_only: tuple[Path, ...] = ()) -> list[str]:
    """`argv` run in the sandbox with `root` writable (its git folder not, unless
    `git_writable`: then all of it but the parts that name code git runs; nor the files
    `read_only` names) and the network cut unless `allow_network`. `info_fd` (bwrap): a
    descriptor bwrap writes the sandbox's first process id to, as JSON ("child-pid"), for
    `process_count`."""
    root = Path(os.path.realpath(root))
    protected = _protected(root, git_writable) + [Path(os.path.realpath(p)) for p in read_only]
    if sys.platform == "darwin":
        return _seatbelt(argv, root, protected, allow_network)
    exe = exe or _bwrap() or "bwrap"
    out = _bubblewrap(root, protected, allow_network, exe)
    if info_fd is not None:
        out[-3:-3] = ["--info-fd", str(info_fd)]  # before --chdir ROOT --
    return out + _limited(argv, exe)


# Inside a git folder: what names code git runs (settings, hooks, the git folders of
# submodules) or points git at another git folder. Kept read-only even for git commands.
_GIT_CODE = ("config", "config.worktree", "hooks", "modules", "commondir", "gitdir")


def _protected(root: Path, git_writable: bool = False) -> list[Path]:
    """The git data to keep read-only: the git folders (or, for a git command allowed to
    write, the parts of them in _GIT_CODE), and a `.git` *file* at the root too (rewritten,
    it would point git, run later outside the sandbox, at planted hooks)."""
    dirs = [Path(os.path.realpath(d)) for d in git_dirs(root)]
    dot = root / ".git"
    pointer = [dot] if dot.is_file() and not dot.is_symlink() and dot not in dirs else []
    pointer += nested_git_dirs(root)  # read-only as the top one, for every command
    if not git_writable:
        return pointer + dirs
    paths = []
    for d in dirs:
        paths += [d / name for name in _GIT_CODE]
        try:
            linked = sorted(p for p in (d / "worktrees").iterdir() if p.is_dir())
        except OSError:
            linked = []
        paths += [w / name for w in linked for name in ("config.worktree", "commondir", "gitdir")]
    return pointer + list(dict.fromkeys(paths))


def missing_git_code(root: Path) -> list[Path]:
    """The paths of _GIT_CODE (in every git folder of `root`) that do not exist: a command
    given a writable git folder could create them, where no bind can keep them read-only."""
    return [p for p in _protected(root, git_writable=True) if not os.path.lexists(p)]


def remove_planted(paths: list[Path]) -> list[str]:
    """Delete those of `paths` (from `missing_git_code`, before a command) that exist now;
    returns them. Nothing a git command allowed to write its folder does creates them."""
    planted = []
    for p in paths:
        if not os.path.lexists(p):
            continue
        planted.append(str(p))
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return planted


def _bubblewrap(root: Path, protected: list[Path], allow_network: bool, exe: str) -> list[str]:
    """bwrap's options, ending with `--chdir ROOT --`."""
    out = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
           "--ro-bind", "/proc/sys", "/proc/sys",  # bwrap leaves it writable to root
           "--tmpfs", "/tmp", *_runtime_dirs(allow_network)]
    if root != Path("/"):  # (the probe: nothing writable)
        out += ["--bind", str(root), str(root)]
    for d in protected:  # after the repo's bind, so they cover it; also re-shows a gitdir in /tmp
        out += ["--ro-bind-try", str(d), str(d)]
    out += _home_socket_dirs(allow_network)  # after it too: a home inside the repo stays covered
    if not allow_network:
        out.append("--unshare-net")
    out += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--setenv", "TMPDIR", "/tmp", "--chdir", str(root), "--"]
    return out


# Folders of the home directory that hold sockets to services outside the sandbox: ssh's
# connection sharing (commands on the user's servers), gpg's agent (signing as the user),
# Docker Desktop's daemon.
_HOME_SOCKET_DIRS = (".ssh", ".gnupg", ".docker")


def _runtime_dirs(allow_network: bool) -> list[str]:
    """Empty /run (and /var/run, $XDG_RUNTIME_DIR when they are folders of their own): the
    sockets there reach services outside the sandbox (a session bus starts programs, docker
    mounts anything, a database accepts the user). Its symlinks stay (NixOS keeps its system
    there), so do removable media under /run/media and, with the network, the file that
    /etc/resolv.conf points to."""
    out, tops = [], ["/run", "/var/run"]
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/") and not runtime.startswith(("/run/", "/var/run/")):
        tops.append(runtime)
    for top in tops:
        if not os.path.isdir(top) or os.path.islink(top):
            continue
        out += ["--tmpfs", top]
        try:
            links = [e for e in os.scandir(top) if e.is_symlink()]
        except OSError:
            links = []
        for e in links:
            out += ["--symlink", os.readlink(e.path), e.path]
    keep = ["/run/media"]
    if allow_network:
        keep.append(os.path.realpath("/etc/resolv.conf"))
    for path in keep:
        if path.startswith(("/run/", "/var/run/")) and os.path.exists(path):
            out += ["--ro-bind-try", path, path]
    return out


def _home_socket_dirs(allow_network: bool) -> list[str]:
    """Without the network, _HOME_SOCKET_DIRS emptied (nothing there is of use offline, and
    their sockets reach out; with the network, ssh and git over ssh need ~/.ssh)."""
    home, out = os.path.expanduser("~"), []
    for name in _HOME_SOCKET_DIRS if not allow_network and home != "/" else ():
        path = os.path.join(home, name)
        if os.path.isdir(path) and not os.path.islink(path):
            out += ["--tmpfs", path]
    return out


def _limited(argv: list[str], exe: str) -> list[str]:
    """`argv` at nice NICE, under RLIMIT_NPROC set inside the sandbox (in bwrap's user
    namespace the count is the sandbox's own; a setuid bwrap makes none, and there the limit
    would count every process of the user, so it is left out)."""
    out = [NICE_EXE, "-n", str(NICE)] if os.access(NICE_EXE, os.X_OK) else []
    try:
        setuid = os.getuid() != 0 and bool(os.stat(shutil.which(exe) or exe).st_mode & stat.S_ISUID)
    except OSError:
        setuid = False
    if os.access(PRLIMIT, os.X_OK) and not setuid:
        n = MAX_PROCESSES + _RLIMIT_SLACK
        out += [PRLIMIT, f"--nproc={n}:{n}", "--"]
    return out + list(argv)


@functools.lru_cache(maxsize=1)
def _own_pid_namespace() -> str:
    return os.readlink("/proc/self/ns/pid")


def process_count(child_pid: int) -> int | None:
    """How many processes the bwrap sandbox whose first process is `child_pid` holds now (its
    own /proc lists only them); None when it cannot be seen (gone, no permission), or when
    the pid is no longer the sandbox's: a pid that ended and was reused by a process outside
    it is in this process's PID namespace, and its /proc would list every process here."""
    try:
        ours = _own_pid_namespace()
        before = os.readlink(f"/proc/{child_pid}/ns/pid")
        n = sum(1 for name in os.listdir(f"/proc/{child_pid}/root/proc") if name.isdigit())
        after = os.readlink(f"/proc/{child_pid}/ns/pid")
    except OSError:
        return None
    return None if ours in (before, after) else n


# ---- which commands may write the git folder -------------------------------------------------

# git subcommands that record work (and need to write the git folder for it), and the ones
# that only show it, which often come along (`git add -A && git commit ... && git log -1`)
_GIT_ALLOWED = frozenset({"add", "am", "apply", "bisect", "branch", "checkout", "cherry-pick",
                          "commit", "merge", "mv", "notes", "rebase", "reset", "restore",
                          "revert", "rm", "stash", "switch", "tag",
                          "status", "log", "show", "diff", "rev-parse", "ls-files", "describe"})
# global options that change nothing about where git reads or writes, or what it runs
_GIT_PLAIN_GLOBALS = frozenset({"--no-pager", "-P", "--literal-pathspecs", "--glob-pathspecs",
                                "--noglob-pathspecs", "--icase-pathspecs", "--no-optional-locks",
                                "--no-replace-objects"})
# options that write a file the command names, run a command, or reach other git folders;
# git accepts any unambiguous prefix of a long option, so prefixes of these count too
_GIT_RISKY = ("--output", "--output-directory", "--exec", "--upload-pack", "--receive-pack",
              "--prefix", "--directory", "--unsafe-paths", "--build-fake-ancestor", "--template",
              "--work-tree", "--git-dir", "--recurse-submodules", "--strategy")
_BRACE_LIST = re.compile(r"\{[^{}\s]*(,|\.\.)[^{}\s]*\}")


def git_may_write(command: str, root: Path, env: dict[str, str] | None = None) -> bool:
    """Whether `command` may run with the git folder writable: it is made only of plain
    `git SUBCOMMAND ...` invocations (no other program, no variable, substitution, glob or
    brace list whose value the text does not show, no environment prefix) whose subcommands
    record or show work (_GIT_ALLOWED), with none of the options in _GIT_RISKY (nor `rebase -x`,
    `bisect run`), output redirected only to /dev/null or to files of the repository outside
    its git folder, nothing the denylist calls destructive, and `git` itself not found in
    the repository (through PATH)."""
    commands = simple_commands(command)
    unquoted, expanded = _shell_views(command)
    if (not commands or set(unquoted) & set("*?[") or _BRACE_LIST.search(unquoted)
            or set(expanded) & set("$`") or _git_in_repo(root, env)):
        return False
    for words in commands:
        if words[0] != "git" or any(SUBST in w for w in words) or not _plain_git(words[1:], root):
            return False
    return denylisted(command, root) == ""


def _plain_git(args: list[str], root: Path) -> bool:
    """`git ARGS` records or shows work and writes nothing but what git keeps (git_may_write)."""
    args, targets = _without_redirects(args)
    while args and args[0].startswith("-"):
        if args[0] not in _GIT_PLAIN_GLOBALS:
            return False
        args = args[1:]
    if not args or args[0] not in _GIT_ALLOWED:
        return False
    sub, rest = args[0], args[1:]
    if sub == "bisect" and "run" in rest:
        return False
    options = True
    for word in rest:
        options = options and word != "--"
        if not options or not word.startswith("-"):
            if _names_git_folder(word, root):  # `git mv x .git/commondir` renames before it checks
                return False
            continue
        name, _, value = word.partition("=")
        if name.startswith("--") and len(name) > 3 and any(
                r.startswith(name) or name.startswith(r) for r in _GIT_RISKY):
            return False
        if value and _names_git_folder(value, root):
            return False
        if sub == "rebase" and not name.startswith("--") and "x" in name:
            return False  # rebase -x CMD runs CMD
    return all(_writable_target(t, root) for t in targets)


def _names_git_folder(word: str, root: Path) -> bool:
    """`word`, read as a path, names the git folder or something in it (however spelled, or
    through a symlink)."""
    if any(_is_dotgit(part) for part in word.replace("\\", "/").split("/")):
        return True
    full = Path(os.path.realpath(root / word))
    return any(full == d or d in full.parents for d in (Path(os.path.realpath(g)) for g in git_dirs(root)))


def _without_redirects(words: list[str]) -> tuple[list[str], list[str]]:
    """(the words without redirections, the files output is redirected into)."""
    out, targets, i = [], [], 0
    while i < len(words):
        w = words[i]
        if w and set(w) <= set("<>&|"):
            nxt = words[i + 1] if i + 1 < len(words) else ""
            if ">" in w and not (w.endswith("&") and (nxt.isdigit() or nxt == "-")):
                targets.append(nxt)
            i += 2
            continue
        if w.isdigit() and i + 1 < len(words) and words[i + 1] and set(words[i + 1]) <= set("<>&|"):
            i += 1  # the 2 of 2>file
            continue
        out.append(w)
        i += 1
    return out, targets


def _writable_target(target: str, root: Path) -> bool:
    from ._paths import PathError, confine

    if target == "/dev/null":
        return True
    try:
        confine(root, target)  # refuses the git folder however spelled, and symlinks out
    except PathError:
        return False
    return True


def _shell_views(text: str) -> tuple[str, str]:
    """(`text` with every quoted character masked, `text` with only single-quoted and
    backslash-escaped characters masked): where the shell expands globs and braces, and
    where it expands `$` and backticks."""
    unquoted, expanded, i, quote = [], [], 0, ""
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "'":
            c, i = "x", i + 1
            unquoted.append(c)
        elif quote:
            if c == quote:
                quote = ""
            unquoted.append("x")
        else:
            if c in "'\"":
                quote = c
            unquoted.append(c if not quote else "x")
        expanded.append("x" if quote == "'" or c == "x" else c)
        i += 1
    return "".join(unquoted), "".join(expanded)


def _git_in_repo(root: Path, env: dict[str, str] | None) -> bool:
    """The `git` the shell would run lies in the repository, or PATH has a relative entry
    (a planted `git` or `git-*` helper would then run with the git folder writable)."""
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    for entry in path.split(os.pathsep):
        if not entry.startswith("/"):
            return True
        real = Path(os.path.realpath(entry))
        if real == root or root in real.parents:
            return True
    return False


def without_hooks(env: dict[str, str]) -> dict[str, str]:
    """`env` with git told to run no hooks (core.hooksPath=/dev/null, added to any settings
    the environment already gives git): for a git command allowed to write its folder, whose
    hooks could otherwise run files of the repository with that folder writable."""
    return git.with_config(env, (("core.hooksPath", "/dev/null"),))


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

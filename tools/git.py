"""The one way spec-agent runs git: every git process it starts goes through `run`.

A sandboxed command may write anywhere in the work tree, including a nested repository's
`.git`, a `core.hooksPath` folder inside the tree or an included config file; git run by us
outside the sandbox would then execute what it planted with the user's full rights. So each
git process gets, through the environment (`GIT_CONFIG_COUNT`, which outranks every config
file and reaches the git processes git itself starts, submodules included):
- hooks off (`core.hooksPath` at an empty private folder), `core.fsmonitor` off;
- no pager, editor, credential helper, askpass or ssh command, no commit/tag signing;
- every filter driver (`filter.*.clean|smudge|process`) any config names emptied;
- `diff`, `show` and `log` run with `--no-ext-diff --no-textconv` (external diff and textconv
  programs do not run) and submodules are not descended into (`diff.ignoreSubmodules=dirty`);
- an environment without the caller's `GIT_*` variables (but identity, dates and the config
  locations), no terminal prompts, literal pathspecs unless asked otherwise.
Each git process runs in a session of its own (a terminal's Ctrl-C is ours to handle) and is
killed at its time limit; with hooks and filters off it starts no programs of its own, so
unlike shell commands it needs no group kill or PR_SET_PDEATHSIG (tools/procs.py), whose
fork is several times slower than the spawn used here, for the dozens of git calls per action.
Git's own ownership check (`safe.directory`) stays on: a repository owned by another user is
refused by git, and the error comes back as any other. Aliases cannot shadow the builtin
commands this runs, so `!` aliases never run. Raises GitPython's `GitCommandError` on failure.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import tempfile
from pathlib import Path

_NO_HOOKS: str | None = None

# Caller variables kept: who commits and when, and where the user's own config lives.
_KEPT_GIT_VARS = {"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
                  "GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE",
                  "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "GIT_CEILING_DIRECTORIES"}

# Settings that would make git start a program of the repository's choosing.
_FIXED: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.askPass", ""),
    ("core.sshCommand", "false"),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("diff.ignoreSubmodules", "dirty"),
    ("submodule.recurse", "false"),
)
_DRIVER_KEYS = r"^filter\..*\.(clean|smudge|process|required)$"
_DIFF_COMMANDS = {"diff", "show", "log"}


def __getattr__(name: str):
    # GitPython's error type, imported when first used: the grep worker imports this package
    # without site-packages.
    if name == "GitCommandError":
        import git as gitpython

        return gitpython.exc.GitCommandError
    raise AttributeError(name)


def no_hooks_dir() -> str:
    """An empty folder, private to this process, for `core.hooksPath`: no hook can run."""
    global _NO_HOOKS
    if _NO_HOOKS is None or not os.path.isdir(_NO_HOOKS):
        _NO_HOOKS = tempfile.mkdtemp(prefix="spec-agent-nohooks-")
        os.chmod(_NO_HOOKS, 0o500)
        atexit.register(_remove_empty, _NO_HOOKS)
    return _NO_HOOKS


def _remove_empty(path: str) -> None:
    """Remove the hooks folder at exit (it stays empty, so rmdir is enough)."""
    try:
        os.rmdir(path)
    except OSError:
        pass


def with_config(env: dict[str, str], pairs: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> dict[str, str]:
    """`env` with git settings `pairs` added after any the environment already gives git."""
    try:
        n = int(env.get("GIT_CONFIG_COUNT", "0") or "0")
    except ValueError:
        n = 0
    out = dict(env)
    for key, value in pairs:
        out[f"GIT_CONFIG_KEY_{n}"], out[f"GIT_CONFIG_VALUE_{n}"] = key, value
        n += 1
    out["GIT_CONFIG_COUNT"] = str(n)
    return out


def _base_env(extra: dict[str, str] | None, literal: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _KEPT_GIT_VARS}
    env["GIT_TERMINAL_PROMPT"] = "0"
    if literal:  # (check-ignore takes plain paths and rejects any pathspec magic)
        env["GIT_LITERAL_PATHSPECS"] = "1"
    env.update(extra or {})
    return with_config(env, (("core.hooksPath", no_hooks_dir()), *_FIXED))


def _driver_overrides(cwd: Path | str, env: dict[str, str]) -> list[tuple[str, str]]:
    """Every filter driver setting the repository's config files name, emptied."""
    try:
        proc = subprocess.run(["git", "config", "--name-only", "--get-regexp", _DRIVER_KEYS], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=10, check=False, start_new_session=True)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [(k, "false" if k.endswith(".required") else "") for k in proc.stdout.split()]


def hardened_env(cwd: Path | str, extra: dict[str, str] | None = None, literal: bool = True) -> dict[str, str]:
    """The environment a git process in `cwd` runs with (see the module docstring)."""
    env = _base_env(extra, literal)
    return with_config(env, _driver_overrides(cwd, env))


def argv(*args: str) -> list[str]:
    """`git ARGS`, with external diff and textconv programs off where the command diffs."""
    if args and args[0] in _DIFF_COMMANDS:
        args = (args[0], "--no-ext-diff", "--no-textconv", *args[1:])
    return ["git", *args]


def run(cwd: Path | str, *args: str, input: str | None = None, env: dict[str, str] | None = None,
        check: bool = True, literal: bool = True, timeout: float | None = 60) -> subprocess.CompletedProcess:
    """Run `git ARGS` in `cwd`, hardened; GitCommandError when it fails (or times out) and `check`."""
    try:
        proc = subprocess.run(argv(*args), cwd=cwd, input=input, capture_output=True, text=True, errors="replace",
                              env=hardened_env(cwd, env, literal), timeout=timeout, check=False,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        proc = subprocess.CompletedProcess(["git", *args], 124, "", f"git {args[0] if args else ''} timed out")
    except OSError as e:
        proc = subprocess.CompletedProcess(["git", *args], 127, "", f"cannot run git: {e}")
    if check and proc.returncode != 0:
        raise __getattr__("GitCommandError")(["git", *args], proc.returncode, proc.stderr)
    return proc


def trailers(message: str) -> list[str]:
    """The trailer lines of a commit message, as git itself parses them."""
    proc = run(tempfile.gettempdir(), "interpret-trailers", "--parse", input=message, check=False)
    return [line.strip() for line in proc.stdout.splitlines()] if proc.returncode == 0 else []


def toplevel(path: Path | str) -> Path | None:
    """The work tree `path` is in, or None outside a (non-bare) repository."""
    proc = run(path, "rev-parse", "--show-toplevel", check=False)
    top = proc.stdout.strip()
    return Path(top) if proc.returncode == 0 and top else None

"""The denylist's rules for git (tools/denylist.py): commands that lose uncommitted work or
history, options and environment that make git run a command (`-c core.hooksPath=...`,
`GIT_CONFIG_KEY_0`, `--exec-path=DIR`, `rebase -x`), and commands that write outside the
repository: `git config` writes of the user's or the system's settings (`--global`,
`--system`, a `--file` elsewhere), any writing command aimed at another repository (`-C`,
`--git-dir`, `--work-tree`, `GIT_DIR`, `GIT_WORK_TREE` elsewhere), a new repository, clone,
worktree, archive, patch or bundle made outside, a push into a folder outside, credential
helpers. Long options match by unambiguous prefix, as git's parser accepts them. Command
lines found inside (an `-x` command) are judged by the `judge` the caller passes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from .cmdwords import git_flag, has_flag, operands, option_values, outside, target

Judge = Callable[[str], str]  # a command line → why it is destructive, or ''

# git settings whose value is a command git runs (or that make git run one)
_GIT_RUNS = re.compile(r"(alias\.|core\.(pager|editor|sshcommand|fsmonitor|hookspath|askpass|"
                       r"gitproxy|worktree)|diff\.external|diff\..*\.(textconv|command)|filter\.|"
                       r"pager\.|sequence\.editor|credential\.|gpg\.|ssh\.|uploadpack\.|"
                       r"remote\..*\.(uploadpack|receivepack|vcs)|interactive\.difffilter|"
                       r"merge\..*\.driver|mergetool\.|difftool\.|protocol\.|include\.|"
                       r"includeif\.)", re.IGNORECASE)
_STASH_SAFE = {"list", "show", "apply", "pop", "branch", "create", "store"}
# subcommands that only read, wherever they are pointed
_READS = {"status", "log", "show", "diff", "rev-parse", "ls-files", "ls-tree", "cat-file",
          "describe", "blame", "grep", "shortlog", "rev-list", "name-rev", "show-ref",
          "for-each-ref", "whatchanged", "version", "help", "var", "check-ignore",
          "count-objects", "show-branch", "merge-base", "diff-tree", "diff-files", "diff-index"}
# environment that makes git run a command, or look at another repository
_ENV_WHERE = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY")
_ENV_RUNS = ("GIT_SSH_COMMAND", "GIT_SSH", "GIT_PAGER", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR",
             "GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "GIT_PROXY_COMMAND", "GIT_EXEC_PATH",
             "GIT_TEMPLATE_DIR", "GIT_CONFIG_PARAMETERS")

_CONFIG_READS = ("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color",
                 "--get-colorbool", "--list")
_CONFIG_WRITES = ("--add", "--replace-all", "--unset", "--unset-all", "--rename-section",
                  "--remove-section", "--edit")
_CONFIG_VALUED = {"-f", "--file", "--blob", "--type", "-t", "--default", "--comment", "--value"}
_GIT_HISTORY = {"reflog": ("expire", "delete"), "update-ref": ("-d", "--delete"),
                "gc": ("--prune", "--prune=now", "--prune=all"), "prune": None,
                "filter-branch": None, "filter-repo": None}


def _config_args(rest: list[str]) -> tuple[list[str], list[str]]:
    """(the files `-f`/`--file` name, the operands) of `git config`'s arguments."""
    files, ops, i = [], [], 0
    while i < len(rest):
        a = rest[i]
        if a in _CONFIG_VALUED:
            if a in ("-f", "--file"):
                files.append(rest[i + 1] if i + 1 < len(rest) else "")
            i += 2
            continue
        if a.startswith("--file="):
            files.append(a.split("=", 1)[1])
        elif a.startswith("-f") and not a.startswith("--"):  # -fPATH
            files.append(a[2:])
        elif not a.startswith("-"):
            ops.append(a)
        i += 1
    return files, ops


def _config_writes(rest: list[str]) -> tuple[bool, list[str], list[str]]:
    """(whether `git config REST` writes (old and 2.46 syntax), the files it names, the keys)."""
    files, ops = _config_args(rest)
    sub = ops[0] if ops and ops[0] in ("get", "list", "set", "unset", "rename-section",
                                       "remove-section", "edit") else ""
    keys = ops[1:] if sub else ops
    reads = sub in ("get", "list") or git_flag(rest, "l", *_CONFIG_READS)
    writes = sub in ("set", "unset", "rename-section", "remove-section", "edit") or git_flag(
        rest, "e", *_CONFIG_WRITES) or (not sub and not reads and len(keys) >= 2)
    return writes, files, keys


def _config_why(rest: list[str], cwd: Path, root: Path) -> str:
    """`git config ...`: a write outside the repository (`--global`, `--system`, a `--file`
    elsewhere), or of a setting that makes git run a command."""
    writes, files, keys = _config_writes(rest)
    if not writes:
        return ""
    if git_flag(rest, "", "--global", "--system"):
        return "git config writes the user's or the system's git settings, outside the repo"
    for f in files:
        if target(f, cwd) is None or outside(f, cwd, root):
            return f"git config writes a file outside the repo ({f or '?'})"
    if git_flag(rest, "e", "--edit") or _config_args(rest)[1][:1] == ["edit"]:
        return "git config --edit changes any setting, commands git runs included"
    if keys and _GIT_RUNS.match(keys[0]):
        return f"git config sets {keys[0]}, which makes git run a command or trust a folder"
    return ""  # (the repository's own config: the sandbox keeps .git read-only)


def _globals(args: list[str], cwd: Path) -> tuple[list[str], str, list[str]]:
    """(args from the subcommand on, why the global options alone are risky or '', the
    folders `-C`, `--git-dir` and `--work-tree` name)."""
    why, places = "", []
    here = cwd
    while args and args[0].startswith("-"):  # global options: -C dir, -c k=v, --no-pager, ...
        a, value = args[0], args[1] if len(args) > 1 else ""
        if a in ("-c", "--config-env") and _GIT_RUNS.match(value):
            why = f"sets git's {value.split('=')[0]} on the command line (a command git runs)"
        elif a.startswith("--config-env=") and _GIT_RUNS.match(a.split("=", 1)[1]):
            why = "sets a git option that names a command git runs"
        elif a.startswith("--exec-path="):
            why = "git runs its programs from another folder (--exec-path)"
        if a == "-C":
            found = target(value, here)
            here = found if found is not None else Path("/")  # unknown: assume the worst
            places.append(str(here))
        elif a in ("--git-dir", "--work-tree"):
            places.append(value)
        elif a.startswith(("--git-dir=", "--work-tree=")):
            places.append(a.split("=", 1)[1])
        takes_value = a in ("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env")
        args = args[2:] if takes_value else args[1:]
    return args, why, [str(here / p) if not p.startswith(("/", "~", "$")) else p for p in places]


def _env_why(env: dict[str, str], judge: Judge) -> tuple[str, list[str]]:
    """(why the environment `env` makes git run a command, or ''; the folders it points at)."""
    for name, value in env.items():
        if name.startswith("GIT_CONFIG_KEY_") and _GIT_RUNS.match(value):
            return f"sets git's {value} in the environment (a command git runs)", []
        if name in _ENV_RUNS and (name in ("GIT_EXEC_PATH", "GIT_TEMPLATE_DIR", "GIT_CONFIG_PARAMETERS")
                                  or judge(value)):
            return f"{name} makes git run a command", []
    return "", [env[n] for n in _ENV_WHERE if n in env]


def _elsewhere_why(sub: str, rest: list[str], cwd: Path, root: Path) -> str:
    """Subcommands that make or write something at a path outside the repository."""
    paths: list[str] = option_values(rest, "--output", "--output-directory", "--separate-git-dir",
                                     "--template")
    if sub in ("archive", "format-patch"):
        paths += option_values(rest, "-o")
    ops = operands([a for a in rest if not a.startswith("--") or "=" in a])
    if sub == "init":
        if "--bare" in rest:
            return "git init --bare writes a repository's files into a folder"
        paths += ops[:1]
    elif sub == "clone" or (sub, ops[:1]) in (("worktree", ["add"]), ("bundle", ["create"])):
        paths += ops[1:2]
    elif sub == "push" and ops and re.match(r"[/~.$]|file:", ops[0]):
        paths += ops[:1]
    for p in paths:
        if target(p, cwd) is None or outside(p, cwd, root):
            return f"git {sub} writes outside the repo ({p})"
    return ""


def git_why(args: list[str], cwd: Path, root: Path | None = None,
            env: dict[str, str] | None = None, judge: Judge = lambda _c: "") -> str:
    """Why a `git ...` command (args after `git`, `env` the GIT_* variables set before it)
    loses work, runs a command or writes outside the repository `root`, or ''."""
    root = root or cwd
    args, why, places = _globals(args, cwd)
    env_why, env_places = _env_why(env or {}, judge)
    if why or env_why or not args:
        return why or env_why
    sub, rest = args[0], args[1:]
    reads = sub in _READS or (sub == "config" and not _config_writes(rest)[0])
    for p in [str(cwd)] + places + env_places:  # (a `cd` elsewhere first counts as `-C`)
        if (target(p, cwd) is None or outside(p, cwd, root)) and not reads:
            return f"git {sub} in a repository outside this one ({p})"
    if sub == "config":
        return _config_why(rest, cwd, root)
    return _elsewhere_why(sub, rest, cwd, root) or _runs_why(sub, rest, judge) or _loses_why(sub, rest, cwd)


def _runs_why(sub: str, rest: list[str], judge: Judge) -> str:
    """Subcommands that run a command, change credentials or the user's settings."""
    if sub.startswith("credential"):
        return f"git {sub} reads or changes stored credentials"
    if sub == "rebase":
        for cmd in option_values(rest, "-x", "--exec"):
            why = judge(cmd)
            if why:
                return f"git rebase --exec: {why}"
    if sub == "bisect" and rest[:1] == ["run"]:
        why = judge(" ".join(rest[1:]))
        if why:
            return f"git bisect run: {why}"
    if any(git_flag(rest, "", o) for o in ("--upload-pack", "--receive-pack", "--exec")) \
            and sub in ("clone", "fetch", "pull", "push", "ls-remote", "archive"):
        return f"git {sub} runs a command of its options on the other side"
    if sub == "clone" and any(_GIT_RUNS.match(v) for v in option_values(rest, "-c", "--config")):
        return "git clone sets a git option that names a command git runs"
    if sub == "apply" and git_flag(rest, "", "--unsafe-paths"):
        return "git apply --unsafe-paths writes outside the repo"
    if sub == "maintenance" and rest[:1] and rest[0] in ("register", "start", "unregister", "stop"):
        return "git maintenance changes the user's git settings and scheduled jobs"
    if sub == "lfs" and rest[:1] and rest[0] in ("install", "uninstall") and not git_flag(
            rest, "l", "--local", "--worktree"):
        return f"git lfs {rest[0]} changes the user's git settings"
    if sub == "submodule" and "foreach" in rest:
        return "git submodule foreach runs a command in every submodule"
    return ""


def _loses_why(sub: str, rest: list[str], cwd: Path) -> str:
    """Subcommands that lose uncommitted work, history or a branch, here or on a remote."""
    lose = "discards uncommitted work"
    if sub == "reset" and git_flag(rest, "", "--hard", "--merge"):
        return f"git reset --hard {lose}"
    if sub == "clean" and not has_flag(rest, "n", "--dry-run"):
        return "git clean deletes untracked files"
    if sub == "stash" and (not rest or rest[0] not in _STASH_SAFE):
        return "git stash hides or deletes uncommitted work"
    if sub == "restore" and not (has_flag(rest, "S", "--staged") and not git_flag(rest, "W", "--worktree")):
        return f"git restore {lose}"
    if sub in ("checkout", "switch") and git_flag(rest, "f", "--force", "--discard-changes"):
        return f"git {sub} --force {lose}"
    if sub == "checkout" and ("--" in rest or any(
            a in (".", ":/") or "*" in a or (cwd / a).exists() for a in operands(rest))):
        return f"git checkout of paths {lose}"
    if sub == "rm" and git_flag(rest, "f", "--force"):
        return f"git rm --force {lose}"
    if sub == "push" and (git_flag(rest, "f", "--force", "--force-with-lease", "--mirror")
                          or any(a.startswith("+") for a in rest)):
        return "force push"
    if sub == "push" and (git_flag(rest, "d", "--delete", "--prune")
                          or any(a.startswith(":") and len(a) > 1 for a in operands(rest))):
        return "git push deletes branches on the remote"
    if sub == "branch" and (has_flag(rest, "D") or (git_flag(rest, "d", "--delete")
                                                      and git_flag(rest, "f", "--force"))):
        return "git branch -D deletes a branch whatever it holds"
    if sub == "tag" and git_flag(rest, "d", "--delete"):
        return "git tag -d deletes a tag"
    if sub == "worktree" and rest[:1] and rest[0] in ("remove", "prune"):
        return f"git worktree {rest[0]} deletes a working tree"
    if sub == "checkout-index" and git_flag(rest, "f", "--force"):
        return f"git checkout-index --force {lose}"
    if sub == "read-tree" and git_flag(rest, "u", "--reset"):
        return f"git read-tree -u {lose}"
    if sub in _GIT_HISTORY and (_GIT_HISTORY[sub] is None or any(
            a in _GIT_HISTORY[sub] or a.startswith("--prune=") for a in rest)):
        return f"git {sub} drops history git could otherwise recover"
    return ""

"""Which tool calls need the user's approval.

Modes (`Config.approval_mode`): `suggest` asks before every edit and shell command,
`auto-edit` lets edits through and asks for shell commands, `full-auto` asks for nothing,
except that destructive shell commands (the denylist below) always ask, whatever the mode.
A command is split into simple commands by agent/shellparse.py (quotes, comments, line
continuations, here-documents; the commands inside `$(...)` and backticks are judged too, and
such a substitution used as an operand counts as a path known only when the command runs).
Wrappers (`timeout`, `nice`, `env`, `setsid`, `nohup`, `stdbuf`, `xargs`, `sudo`, `exec`, ...)
are looked through, `sh -c`/`bash -c` strings and `find -exec` commands judged as commands,
and git's long options match by unambiguous prefix as git itself accepts them (`--har`).
This is an early "are you sure", not what protects the user: the OS sandbox limits what a
command can touch and snapshots let `spec-agent undo` bring back what it destroyed inside the
repository. A determined script can hide what it does (variables, interpreters), and this
module does not try to see through that. It only decides; asking (a prompt, a dialog) or
stopping a non-interactive run is the caller's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .shellparse import SUBST, simple_commands

MODES = ("suggest", "auto-edit", "full-auto")

# (pattern, why): shapes no word-by-word check sees. Matched against the command line with
# quotes removed, case-sensitive like the shell.
DENYLIST: tuple[tuple[str, str], ...] = (
    (r"\bmkfs(\.\w+)?\b", "formats a filesystem"),
    (r"\bdd\b.*\bof=/dev/", "dd onto a device"),
    (r">\s*/dev/(sd|nvme|hd|disk|mmcblk)", "writes to a raw device"),
    (r":\(\)\s*\{\s*:\|:&\s*\};:", "fork bomb"),
    (r"\b(shutdown|reboot|halt|poweroff)\b", "powers the machine off"),
    (r"\b(sudo|su|doas)\s", "runs as another user"),
    (r"\b(curl|wget)\b[^|]*\|\s*(sudo\s+)?(ba|z|da)?sh\b", "pipes a download into a shell"),
)
_KEYWORDS = {"then", "do", "else", "elif", "if", "while", "until", "time", "!"}
# Programs that run the command in their arguments: options taking a value (short letters,
# long names), and how many plain arguments come before the command.
_WRAPPERS: dict[str, tuple[str, tuple[str, ...], int]] = {
    "command": ("", (), 0), "builtin": ("", (), 0), "exec": ("a", (), 0), "nohup": ("", (), 0),
    "setsid": ("", (), 0), "time": ("fo", ("--format", "--output"), 0),
    "env": ("uCS", ("--unset", "--chdir", "--split-string"), 0),
    "nice": ("n", ("--adjustment",), 0), "ionice": ("cnp", ("--class", "--classdata", "--pid"), 0),
    "timeout": ("sk", ("--signal", "--kill-after"), 1),
    "stdbuf": ("ioe", ("--input", "--output", "--error"), 0),
    "xargs": ("aEedIiLlnPs", ("--arg-file", "--delimiter", "--eof", "--replace", "--max-lines",
                              "--max-args", "--max-procs", "--max-chars", "--process-slot-var"), 0),
    "sudo": ("CDghpRrTtUu", ("--close-from", "--chdir", "--group", "--host", "--prompt",
                            "--chroot", "--role", "--type", "--other-user", "--user"), 0),
    "doas": ("Cu", (), 0), "chrt": ("", (), 1), "taskset": ("", (), 1), "unbuffer": ("", (), 0),
    "flock": ("Ew", ("--conflict-exit-code", "--wait", "--timeout"), 1),
    "watch": ("dn", ("--differences", "--interval"), 0), "busybox": ("", (), 0),
    "chroot": ("", ("--userspec", "--groups"), 1), "strace": ("eoOpsSuU", ("--output",), 0),
    "parallel": ("jS", ("--jobs",), 0),
}
_SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "mksh"}
# git settings whose value is a command git runs (or that make git run one)
_GIT_RUNS = re.compile(r"(alias\.|core\.(pager|editor|sshcommand|fsmonitor|hookspath|askpass)|"
                       r"diff\.external|diff\..*\.(textconv|command)|filter\.|pager\.|"
                       r"sequence\.editor|credential\.|gpg\.|ssh\.|uploadpack\.|"
                       r"remote\..*\.(uploadpack|receivepack|vcs)|interactive\.difffilter|"
                       r"merge\..*\.driver|protocol\.|include\.|includeif\.)", re.IGNORECASE)
_SAFE_DEV = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/")
# What each file-changing command writes: "all" operands, the "last" one, or all "but-first".
_WRITERS = {"rm": "all", "rmdir": "all", "unlink": "all", "shred": "all", "truncate": "all",
            "touch": "all", "mkdir": "all", "tee": "all", "mv": "all", "cp": "last",
            "install": "last", "ln": "last", "rsync": "last", "chmod": "but-first",
            "chown": "but-first", "chgrp": "but-first"}
_STASH_SAFE = {"list", "show", "apply", "pop", "branch", "create", "store"}


@dataclass(frozen=True)
class Decision:
    ask: bool
    reason: str = ""


def _home() -> Path:
    return Path(os.path.expanduser("~"))


def _target(word: str, cwd: Path) -> Path | None:
    """Where `word` points, or None when a variable makes it unknowable."""
    for home in ("$HOME", "${HOME}", "~"):
        if word == home or word.startswith(home + "/"):
            word = str(_home()) + word[len(home):]
            break
    if "$" in word or word.startswith("~"):
        return None
    return Path(os.path.normpath(cwd / word))


def _outside(word: str, cwd: Path, root: Path) -> bool:
    if word.startswith(_SAFE_DEV):
        return False
    full = _target(word, cwd)
    if full is None:
        return False
    try:
        full.resolve().relative_to(root)
        return False
    except ValueError:
        return True


def _operands(args: list[str]) -> list[str]:
    """Arguments that are not options (everything after `--` counts)."""
    if "--" in args:
        i = args.index("--")
        return [a for a in args[:i] if not a.startswith("-")] + args[i + 1:]
    return [a for a in args if not a.startswith("-")]


def _has_flag(args: list[str], short: str, *long: str, prefix: bool = False) -> bool:
    """`-x` alone or bundled (`-rf`), or one of the long forms; with `prefix`, also a long
    form cut short (`--har` for `--hard`), as git's option parser accepts unambiguous ones."""
    for a in args:
        if a == "--":
            return False
        name = a.split("=", 1)[0]
        if name in long or (short and a.startswith("-") and not a.startswith("--") and short in a[1:]):
            return True
        if prefix and name.startswith("--") and len(name) >= 3 and any(lo.startswith(name) for lo in long):
            return True
    return False


def _git_flag(args: list[str], short: str, *long: str) -> bool:
    return _has_flag(args, short, *long, prefix=True)


def _split_redirects(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the command's own words, files it redirects output into)."""
    words, targets, i = [], [], 0
    while i < len(argv):
        w = argv[i]
        if set(w) <= set("<>&|") and ">" in w:
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            if not (w.endswith("&") and (nxt.isdigit() or nxt == "-")):
                targets.append(nxt)
            i += 2
            continue
        if set(w) <= set("<>&") and "<" in w:
            i += 2
            continue
        if w.isdigit() and i + 1 < len(argv) and set(argv[i + 1]) <= set("<>&") and argv[i + 1]:
            i += 1  # the `2` of `2>file`
            continue
        words.append(w)
        i += 1
    return words, targets


_GIT_HISTORY = {"reflog": ("expire", "delete"), "update-ref": ("-d", "--delete"),
                "gc": ("--prune", "--prune=now", "--prune=all"), "prune": None,
                "filter-branch": None, "filter-repo": None}


def _git_globals(args: list[str]) -> tuple[list[str], str]:
    """(args from the subcommand on, why the global options alone are risky or '')."""
    why = ""
    while args and args[0].startswith("-"):  # global options: -C dir, -c k=v, --no-pager, ...
        if args[0] in ("-c", "--config-env") and len(args) > 1 and _GIT_RUNS.match(args[1]):
            why = f"sets git's {args[1].split('=')[0]} on the command line (a command git runs)"
        elif args[0].startswith("--config-env=") and _GIT_RUNS.match(args[0].split("=", 1)[1]):
            why = "sets a git option that names a command git runs"
        takes_value = args[0] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env")
        args = args[2:] if takes_value else args[1:]
    return args, why


def _git_why(args: list[str], cwd: Path) -> str:
    """Why a `git ...` command (args after `git`) loses work, or ''."""
    args, why = _git_globals(args)
    if why or not args:
        return why
    sub, rest = args[0], args[1:]
    lose = "discards uncommitted work"
    if sub == "reset" and _git_flag(rest, "", "--hard", "--merge"):
        return f"git reset --hard {lose}"
    if sub == "clean" and not _has_flag(rest, "n", "--dry-run"):
        return "git clean deletes untracked files"
    if sub == "stash" and (not rest or rest[0] not in _STASH_SAFE):
        return "git stash hides or deletes uncommitted work"
    if sub == "restore" and not (_has_flag(rest, "S", "--staged") and not _git_flag(rest, "W", "--worktree")):
        return f"git restore {lose}"
    if sub in ("checkout", "switch") and _git_flag(rest, "f", "--force", "--discard-changes"):
        return f"git {sub} --force {lose}"
    if sub == "checkout" and ("--" in rest or any(
            a in (".", ":/") or "*" in a or (cwd / a).exists() for a in _operands(rest))):
        return f"git checkout of paths {lose}"
    if sub == "rm" and _git_flag(rest, "f", "--force"):
        return f"git rm --force {lose}"
    if sub == "push" and (_git_flag(rest, "f", "--force", "--force-with-lease", "--mirror")
                          or any(a.startswith("+") for a in rest)):
        return "force push"
    if sub == "branch" and (_has_flag(rest, "D") or (_git_flag(rest, "d", "--delete")
                                                      and _git_flag(rest, "f", "--force"))):
        return "git branch -D deletes a branch whatever it holds"
    if sub == "checkout-index" and _git_flag(rest, "f", "--force"):
        return f"git checkout-index --force {lose}"
    if sub == "read-tree" and _git_flag(rest, "u", "--reset"):
        return f"git read-tree -u {lose}"
    if sub == "submodule" and "foreach" in rest:
        return "git submodule foreach runs a command in every submodule"
    if sub in _GIT_HISTORY and (_GIT_HISTORY[sub] is None or any(
            a in _GIT_HISTORY[sub] or a.startswith("--prune=") for a in rest)):
        return f"git {sub} drops history git could otherwise recover"
    return ""


def _rm_why(args: list[str], cwd: Path, root: Path) -> str:
    if "--no-preserve-root" in args:
        return "rm --no-preserve-root"
    recursive = _has_flag(args, "r", "--recursive") or _has_flag(args, "R")
    for a in _operands(args):
        full = _target(a, cwd)
        if recursive and full is None:
            return f"recursive delete of {a}, a path known only when the command runs"
        if recursive and full is not None and (full == root or _matches_all(a)):
            return "recursive delete of the whole repo"
        if recursive and full is not None and any(p.casefold() == ".git" for p in full.parts):
            return "deletes the git history (.git)"  # (`rm .git/index.lock` is fine)
    return ""


def _matches_all(word: str) -> bool:
    """A glob that matches every name at its level (`*`, `.*`, `?*`, `[a-z]*`, `./*/`)."""
    rest = word.removeprefix("./").rstrip("/")
    rest = re.sub(r"\[[^\]]*\]", "?", rest)
    return bool(rest) and set(rest) <= set("*?.") and bool(set(rest) & set("*?"))


def _writes_outside(name: str, args: list[str], cwd: Path, root: Path) -> str:
    how = _WRITERS.get(name)
    if how is None:
        return ""
    ops = _operands(args)
    if name in ("cp", "mv", "install", "ln") and any(a.startswith("--target-directory=") for a in args):
        ops.append(next(a.split("=", 1)[1] for a in args if a.startswith("--target-directory=")))
    if "-t" in args and args.index("-t") + 1 < len(args):
        ops.append(args[args.index("-t") + 1])
    targets = ops[-1:] if how == "last" else ops[1:] if how == "but-first" else ops
    for t in targets:
        if _outside(t, cwd, root):
            verb = "deletes" if name in ("rm", "rmdir", "unlink", "shred") else "writes"
            return f"{verb} outside the repo ({t})"
    return ""


def _skip_options(words: list[str], short: str, long: tuple[str, ...]) -> list[str]:
    """`words` after the leading options of a wrapper (and the values they take)."""
    while words and words[0].startswith("-") and words[0] != "-":
        w, words = words[0], words[1:]
        if w == "--":
            break
        takes = (w.startswith("--") and "=" not in w and w in long) or (
            not w.startswith("--") and len(w) == 2 and w[1] in short)
        if takes and words:
            words = words[1:]
    return words


def _without_prefixes(words: list[str]) -> tuple[list[str], bool]:
    """`env X=1 timeout 5 nohup rm ...` → `rm ...`: the words of the program that really runs,
    and whether a wrapper (xargs) feeds it operands the text does not show."""
    fed = False
    while words:
        name = os.path.basename(words[0])
        if words[0] in _KEYWORDS or re.fullmatch(r"\w+=.*", words[0]):
            words = words[1:]
        elif name in _WRAPPERS:
            short, long, plain = _WRAPPERS[name]
            fed = fed or name == "xargs"
            words = _skip_options(words[1:], short, long)
            while words and name == "env" and re.fullmatch(r"\w+=.*", words[0]):
                words = words[1:]
            words = words[plain:]
        else:
            break
    return words, fed


def programs(command: str) -> list[str] | None:
    """The program each simple command of `command` runs (`$(...)` and backticks included),
    in order without repeats; None when one cannot be known from the text (a variable, a
    shell or `eval` running a string)."""
    out: list[str] = []
    for argv in simple_commands(command):
        words = _without_prefixes(_split_redirects(argv)[0])[0]
        if not words:
            continue
        name = os.path.basename(words[0])
        if "$" in words[0] or name in (*_SHELLS, "eval", "find"):
            return None  # (find runs what -exec names)
        out.append(name)
    return list(dict.fromkeys(out)) or None


def _shell_why(args: list[str], cwd: Path, root: Path) -> str:
    """`sh -c SCRIPT` / `bash -lc SCRIPT`: the script judged as a command line."""
    for i, a in enumerate(args):
        if not a.startswith("-") or a.startswith("--"):
            if a.startswith("--"):
                continue
            return ""  # a script file: not seen from here
        if "c" in a[1:]:
            script = next((w for w in args[i + 1:] if not w.startswith("-")), "")
            return denylisted(script, root, cwd)
    return "a shell running commands from its input, which the text does not show"


def _find_why(args: list[str], cwd: Path, root: Path) -> str:
    """`find ... -delete` of the whole repo or outside it; `-exec CMD {} ;` judged as CMD."""
    i = 0
    while i < len(args):
        if args[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            end = next((j for j in range(i + 1, len(args)) if args[j] in (";", "+")), len(args))
            sub = [SUBST if "{}" in w else w for w in args[i + 1:end]]
            why = _command_why(sub, cwd, root) if sub else ""
            if why:
                return f"find -exec: {why}"
            i = end
        i += 1
    if "-delete" not in args:
        return ""
    starts = [a for a in args[:next((i for i, a in enumerate(args) if a.startswith("-")), len(args))]
              if a not in ("-H", "-L", "-P")] or ["."]
    for start in starts:
        if _outside(start, cwd, root):
            return f"deletes outside the repo ({start})"
    names = {"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex",
             "-newer", "-mtime", "-mmin", "-size", "-empty", "-lname", "-samefile", "-inum"}
    if not names & set(args) and any(_target(s, cwd) in (None, root) for s in starts):
        return "find -delete of everything in the repo"
    return ""


def _command_why(argv: list[str], cwd: Path, root: Path) -> str:
    """Why one simple command is destructive, or ''."""
    words, redirects = _split_redirects(argv)
    for t in redirects:
        if _outside(t, cwd, root):
            return f"writes outside the repo ({t})"
    words, fed = _without_prefixes(words)
    if not words:
        return ""
    name, args = os.path.basename(words[0]), words[1:] + ([SUBST] if fed else [])
    if "$" in words[0]:
        return f"runs a program known only when the command runs ({words[0]})"
    if name in _SHELLS:
        return _shell_why(args, cwd, root)
    if name == "eval":
        return denylisted(" ".join(args), root, cwd)
    if name == "git":
        return _git_why(args, cwd)
    if name == "find":
        return _find_why(args, cwd, root)
    if name == "chmod" and _has_flag(args, "R", "--recursive") and "/" in _operands(args):
        return "recursive chmod of /"
    if name == "rm":
        why = _rm_why(args, cwd, root)
        if why:
            return why
    return _writes_outside(name, args, cwd, root)


def denylisted(command: str, root: Path | None = None, cwd: Path | None = None) -> str:
    """Why `command` (run in `root`, the repo) is destructive; '' when it is not."""
    root = (root or Path.cwd()).resolve()
    cwd = cwd or root
    commands = simple_commands(command)
    flat = " ; ".join(" ".join(argv) for argv in commands)
    for pattern, why in DENYLIST:
        if re.search(pattern, flat) or re.search(pattern, command):
            return why
    for argv in commands:
        if argv[0] in ("cd", "pushd"):  # later relative paths are relative to the new folder
            dest = _target(argv[1], cwd) if len(argv) > 1 else _home()
            cwd = dest if dest is not None else Path("/")  # unknown: assume the worst
            continue
        why = _command_why(argv, cwd, root)
        if why:
            return why
    return ""


def decide(mode: str, kind: str, name: str, arguments: dict[str, Any], root: Path | None = None) -> Decision:
    """Whether tool `name` (of `kind` read|edit|shell|mcp) needs approval in `mode`."""
    if kind == "mcp":  # another program, outside the sandbox: asks in every mode unless allowed
        server = name.split("__")[1] if name.count("__") >= 2 else name
        return Decision(True, f"{name} is a tool of the MCP server '{server}' (allow it with "
                        f"allow = true or allow_tools in [mcp.servers.{server}])")
    if kind == "shell":
        why = denylisted(str(arguments.get("command", "")), root)
        if why:
            return Decision(True, f"destructive command ({why}): {arguments.get('command')}")
        if mode in ("suggest", "auto-edit"):
            return Decision(True, f"shell command needs approval in {mode} mode: {arguments.get('command')}")
        from tools.sandbox import available  # full-auto's freedom rests on the OS sandbox

        sandboxed, why = available()
        if not sandboxed:
            return Decision(True, f"no sandbox available ({why}): shell commands need approval")
        return Decision(False)
    if kind == "edit" and mode == "suggest":
        return Decision(True, f"{name} of {arguments.get('path')} needs approval in suggest mode")
    return Decision(False)

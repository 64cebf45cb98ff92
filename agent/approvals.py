"""Which tool calls need the user's approval.

Modes (`Config.approval_mode`): `suggest` asks before every edit and shell command,
`auto-edit` lets edits through and asks for shell commands, `full-auto` asks for nothing,
except that destructive shell commands (the denylist below) always ask, whatever the mode.
A command is split into simple commands (quotes removed, `;`/`&&`/`|`/newlines/`$(...)`
separate them) and each is judged on its words, so flag order and quoting do not matter.
This is a safety net for a model's mistakes, not a sandbox: a determined script can hide
what it does (variables, interpreters), and this module does not try to see through that.
It only decides; asking (a prompt, a dialog) or stopping a non-interactive run is the caller's.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "$", "|&", ";;", "{", "}", "!"}
_PREFIXES = {"command", "builtin", "exec", "nohup", "time", "env", "nice", "then", "do", "else",
             "elif", "if", "while", "until", "xargs"}
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


def _words(command: str) -> list[str]:
    """Shell words with quotes removed; operators (`;`, `&&`, `|`, `>`, ...) are their own words."""
    text = command.replace("`", " ; ").replace("\n", " ; ")
    for attempt in (text, text.replace('"', " ").replace("'", " ")):  # 2nd: unbalanced quotes
        lexer = shlex.shlex(attempt, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            return list(lexer)
        except ValueError:
            continue
    return text.split()


def _simple_commands(words: list[str]) -> list[list[str]]:
    """Split words at separators; redirections stay inside their command."""
    out, cur = [], []
    for w in words:
        if w in _SEPARATORS:
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append(w)
    return out + ([cur] if cur else [])


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


def _has_flag(args: list[str], short: str, *long: str) -> bool:
    """`-x` alone or bundled (`-rf`), or one of the long forms."""
    for a in args:
        if a == "--":
            return False
        if a in long or (short and a.startswith("-") and not a.startswith("--") and short in a[1:]):
            return True
    return False


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


def _git_why(args: list[str], cwd: Path) -> str:
    """Why a `git ...` command (args after `git`) loses work, or ''."""
    while args and args[0].startswith("-"):  # global options: -C dir, -c k=v, --no-pager, ...
        args = args[2:] if args[0] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") else args[1:]
    if not args:
        return ""
    sub, rest = args[0], args[1:]
    lose = "discards uncommitted work"
    if sub == "reset" and _has_flag(rest, "", "--hard", "--merge"):
        return f"git reset --hard {lose}"
    if sub == "clean" and not _has_flag(rest, "n", "--dry-run"):
        return "git clean deletes untracked files"
    if sub == "stash" and (not rest or rest[0] not in _STASH_SAFE):
        return "git stash hides or deletes uncommitted work"
    if sub == "restore" and not (_has_flag(rest, "S", "--staged") and not _has_flag(rest, "W", "--worktree")):
        return f"git restore {lose}"
    if sub in ("checkout", "switch") and _has_flag(rest, "f", "--force", "--discard-changes"):
        return f"git {sub} --force {lose}"
    if sub == "checkout" and ("--" in rest or any(
            a in (".", ":/") or "*" in a or (cwd / a).exists() for a in _operands(rest))):
        return f"git checkout of paths {lose}"
    if sub == "rm" and _has_flag(rest, "f", "--force"):
        return f"git rm --force {lose}"
    if sub == "push" and (_has_flag(rest, "f", "--force", "--force-with-lease", "--mirror")
                          or any(a.startswith(("--force-with-lease=", "+")) for a in rest)):
        return "force push"
    return ""


def _rm_why(args: list[str], cwd: Path, root: Path) -> str:
    if "--no-preserve-root" in args:
        return "rm --no-preserve-root"
    recursive = _has_flag(args, "r", "--recursive") or _has_flag(args, "R")
    for a in _operands(args):
        full = _target(a, cwd)
        if recursive and full is None:
            return f"recursive delete of {a}, a path known only when the command runs"
        if recursive and full is not None and (full == root or a.rstrip("/") in ("*", "./*", ".*")):
            return "recursive delete of the whole repo"
        if recursive and full is not None and any(p.casefold() == ".git" for p in full.parts):
            return "deletes the git history (.git)"  # (`rm .git/index.lock` is fine)
    return ""


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


def _without_prefixes(words: list[str]) -> list[str]:
    """`env X=1 nohup rm ...` → `rm ...`: the words of the program that really runs."""
    while words and (words[0] in _PREFIXES or re.fullmatch(r"\w+=.*", words[0])
                     or (words[0].startswith("-") and len(words) > 1)):
        words = words[1:]
    return words


def programs(command: str) -> list[str] | None:
    """The program each simple command of `command` runs (`$(...)` and backticks included),
    in order without repeats; None when one cannot be known from the text (a variable, a
    shell or `eval` running a string)."""
    out: list[str] = []
    for argv in _simple_commands(_words(command)):
        words = _without_prefixes(_split_redirects(argv)[0])
        if not words:
            continue
        name = os.path.basename(words[0])
        if "$" in words[0] or name in ("sh", "bash", "zsh", "dash", "ksh", "eval"):
            return None
        out.append(name)
    return list(dict.fromkeys(out)) or None


def _command_why(argv: list[str], cwd: Path, root: Path) -> str:
    """Why one simple command is destructive, or ''."""
    words, redirects = _split_redirects(argv)
    for t in redirects:
        if _outside(t, cwd, root):
            return f"writes outside the repo ({t})"
    words = _without_prefixes(words)
    if not words:
        return ""
    name, args = os.path.basename(words[0]), words[1:]
    if name in ("sh", "bash", "zsh", "dash", "ksh") and "-c" in args[:-1]:
        return denylisted(args[args.index("-c") + 1], root, cwd)
    if name == "eval":
        return denylisted(" ".join(args), root, cwd)
    if name == "git":
        return _git_why(args, cwd)
    if name == "find" and {"-delete", "-exec", "-execdir"} & set(args):
        first_test = next((i for i, a in enumerate(args) if a.startswith("-")), len(args))
        return next((f"deletes outside the repo ({s})" for s in args[:first_test]
                     if _outside(s, cwd, root)), "")
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
    words = _words(command)
    flat = " ".join(words)
    for pattern, why in DENYLIST:
        if re.search(pattern, flat) or re.search(pattern, command):
            return why
    for argv in _simple_commands(words):
        if argv[0] in ("cd", "pushd"):  # later relative paths are relative to the new folder
            dest = _target(argv[1], cwd) if len(argv) > 1 else _home()
            cwd = dest if dest is not None else Path("/")  # unknown: assume the worst
            continue
        why = _command_why(argv, cwd, root)
        if why:
            return why
    return ""


def decide(mode: str, kind: str, name: str, arguments: dict[str, Any], root: Path | None = None) -> Decision:
    """Whether tool `name` (of `kind` read|edit|shell) needs approval in `mode`."""
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

"""The denylist's rules for commands that delete, write or change files (tools/denylist.py):
`rm`, `chmod`/`chown`/`chgrp`/`chattr`/`setfacl`, the writers (`mv`, `cp`, `tee`, `truncate`,
`sed -i`, `dd of=`, `tar -C`, `curl -o`, ...) and `find -delete`/`-exec`. What asks: a change
outside the repository (home and / included), in its git folder, a recursive one of the
whole repository, and a delete of paths known only when the command runs (`$(...)`,
variables, what `xargs` or `find -exec` feeds it) unless what feeds it selects only build
leftovers (`*.pyc`, `__pycache__`, ...). Judging a `find -exec` command is the caller's
(`command_why`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from pathlib import Path

from .cmdwords import braces, has_flag, operands, option_values, outside, target
from .shellparse import SUBST

CommandWhy = Callable[[list[str], Path], str]  # (argv, cwd) → why it is destructive, or ''

# What each file-changing command writes: "all" operands, the "last" one.
WRITERS = {"rm": "all", "rmdir": "all", "unlink": "all", "shred": "all", "truncate": "all",
           "touch": "all", "mkdir": "all", "tee": "all", "mv": "all", "cp": "last",
           "install": "last", "ln": "last", "rsync": "last"}
DELETERS = {"rm", "rmdir", "unlink", "shred"}
# Commands whose first operand is a mode or an owner, then the files they change: their option
# letters (a word starting with `-` and made of others, as chmod's `-rwx`, is the mode).
MODERS = {"chmod": "cfvR", "chown": "cfvRhHLP", "chgrp": "cfvRhHLP", "chattr": "RVf"}
# What `find` may select for deleting without asking: build and tool leftovers.
LEFTOVERS = ("*.pyc", "*.pyo", "__pycache__", "*.o", "*.obj", "*.class", "*.log", "*.tmp",
             ".DS_Store", "*~", "*.orig", "*.rej", "*.swp", ".pytest_cache", ".mypy_cache",
             ".ruff_cache", "*.egg-info", ".coverage", "*.gcda", "*.gcno", "node_modules",
             "build", "dist", ".tox", ".nox", "htmlcov", "*.bak")
_FIND_TESTS = {"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex",
               "-iregex", "-newer", "-mtime", "-mmin", "-size", "-empty", "-lname",
               "-samefile", "-inum"}


def may_be_dotgit(word: str) -> bool:
    """Whether `word` (brace lists and globs as the shell expands them) may name a `.git`
    folder or something in one."""
    for w in braces(word):
        for part in w.split("/"):
            if part.casefold() == ".git" or (set(part) & set("*?[") and part not in ("*", "?*")
                                             and fnmatch.fnmatch(".git", part)):
                return True
    return False


def unknown(word: str, cwd: Path) -> bool:
    """A path known only when the command runs."""
    return SUBST in word or target(word, cwd) is None


def moder_why(name: str, args: list[str], cwd: Path, root: Path) -> str:
    """chmod, chown, chgrp, chattr, setfacl: a change outside the repository or in its git
    folder, or a recursive one of a path known only when the command runs."""
    if name == "setfacl":
        ops = [a for a in operands(args) if a not in option_values(args, "-m", "-x", "-M", "-X",
                                                                   "--set", "--set-file", "--modify",
                                                                   "--remove")]
        targets = ops
    else:
        letters, ops, i = MODERS[name], [], 0
        while i < len(args):
            a = args[i]
            if a == "--":
                ops += args[i + 1:]
                break
            if name == "chattr" and a in ("-v", "-p"):  # (a version or project number follows)
                i += 2
                continue
            if not (a.startswith("--") or (len(a) > 1 and a[0] == "-" and set(a[1:]) <= set(letters))):
                ops.append(a)
            i += 1
        targets = ops if any(a.startswith("--reference") for a in args) else ops[1:]
    recursive = has_flag(args, "R", "--recursive")
    for t in targets:
        if outside(t, cwd, root):
            return f"{name} outside the repo ({t})"
        if may_be_dotgit(t):
            return f"{name} in the git folder (.git)"
        if recursive and unknown(t, cwd):
            return f"recursive {name} of {t}, a path known only when the command runs"
    return ""


def rm_why(args: list[str], cwd: Path, root: Path) -> str:
    if "--no-preserve-root" in args:
        return "rm --no-preserve-root"
    recursive = has_flag(args, "r", "--recursive") or has_flag(args, "R")
    for a in operands(args):
        if recursive and may_be_dotgit(a):
            return "deletes the git history (.git)"
        full = target(a, cwd)
        if unknown(a, cwd):
            kind = "recursive delete" if recursive else "delete"
            return f"{kind} of {a}, a path known only when the command runs"
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


def _tar_writes(args: list[str]) -> list[str]:
    """Where tar writes: the `-C` folder, and the archive (`-f`) when it makes one."""
    out = option_values(args, "-C", "--directory")
    first = args[0] if args else ""
    bundle = first.lstrip("-") if first and not first.startswith("--") else ""
    making = any(c in bundle for c in "cruA") if bundle and set(bundle) <= set("cxtrufvzjJaApC") \
        else has_flag(args, "c", "--create", "--append", "--update")
    if making:
        out += option_values(args, "-f", "--file")
        if bundle.endswith("f") and len(args) > 1 and not first.startswith("-"):
            out.append(args[1])  # `tar czf OUT.tgz ...`
    return out


def other_writes(name: str, args: list[str]) -> list[str] | None:
    """The files written by the writers whose targets are not plain operands: `sed -i`
    (the files after the script), `dd of=`, `tar`, `unzip -d`, `curl -o`, `wget -O`,
    `sort -o`, `ssh-keygen -f`; None for others."""
    if name == "sed" and (has_flag(args, "i") or any(a.startswith("--in-place") for a in args)):
        ops = operands([a for a in args if not a.startswith("-i")])
        scripted = has_flag(args, "e", "--expression") or has_flag(args, "f", "--file")
        return ops if scripted else ops[1:]
    if name == "dd":
        return [a[3:] for a in args if a.startswith("of=")]
    if name in ("tar", "bsdtar", "gtar"):
        return _tar_writes(args)
    if name == "unzip":
        return option_values(args, "-d")
    if name == "curl":
        return option_values(args, "-o", "--output")
    if name == "wget":
        return option_values(args, "-O", "--output-document", "-P", "--directory-prefix")
    if name == "sort":
        return option_values(args, "-o", "--output")
    if name == "ssh-keygen" and not has_flag(args, "l") and not has_flag(args, "y"):
        return option_values(args, "-f")
    return None


def writes_why(name: str, args: list[str], cwd: Path, root: Path) -> str:
    """A writer changing a path outside the repository or in its git folder."""
    other = other_writes(name, args)
    if other is not None:
        for t in other:
            if outside(t, cwd, root) or unknown(t, cwd) or may_be_dotgit(t):
                return f"writes outside the repo ({t})"
        return ""
    how = WRITERS.get(name)
    if how is None:
        return ""
    ops = operands(args)
    ops += option_values(args, "--target-directory", "-t") if name in ("cp", "mv", "install", "ln") else []
    targets = ops[-1:] if how == "last" else ops
    for t in targets:
        if outside(t, cwd, root):
            verb = "deletes" if name in DELETERS else "writes"
            return f"{verb} outside the repo ({t})"
        if unknown(t, cwd) and name in DELETERS:
            return f"deletes {t}, a path known only when the command runs"
    if name != "rm" and any(may_be_dotgit(t) for t in ops):
        return f"{name} changes the git folder (.git)"
    if name == "rsync" and any(a.startswith("--del") for a in args) and targets and (
            target(targets[0], cwd) == root or _matches_all(targets[0])):
        return "rsync --delete into the whole repo"
    return ""


def find_selects_leftovers(args: list[str]) -> bool:
    """Whether `find ARGS` selects by name only build leftovers (LEFTOVERS)."""
    names = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-name", "-iname")]
    others = _FIND_TESTS - {"-name", "-iname", "-type", "-empty"}
    return bool(names) and not others & set(args) and all(
        any(fnmatch.fnmatch(n, p) or n == p for p in LEFTOVERS) for n in names)


def find_starts(args: list[str]) -> list[str]:
    end = next((i for i, a in enumerate(args) if a.startswith(("-", "(", "!"))
                and a not in ("-H", "-L", "-P")), len(args))
    return [a for a in args[:end] if a not in ("-H", "-L", "-P")] or ["."]


def find_why(args: list[str], cwd: Path, root: Path, command_why: CommandWhy) -> str:
    """`find ... -delete`/`-exec CMD {} ;` as `rm -r START`/`CMD START` for each start, except
    that a start that is the whole repo (or known only when it runs) asks unless find selects
    only build leftovers, and a start in the git folder asks."""
    starts = find_starts(args)
    tidy = find_selects_leftovers(args)
    whole = [s for s in starts if unknown(s, cwd) or target(s, cwd) == root]
    i = 0
    while i < len(args):
        if args[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            end = next((j for j in range(i + 1, len(args)) if args[j] in (";", "+")), len(args))
            cmd = args[i + 1:end]
            runs = [[w.replace("{}", s) for w in cmd] for s in starts if s not in whole]
            if whole and not tidy:
                runs.append([SUBST if "{}" in w else w for w in cmd])
            for sub in runs:
                why = command_why(sub, cwd) if sub else ""
                if why:
                    return f"find -exec: {why}"
            if cmd and cmd[0] in {*WRITERS, *MODERS} and any(may_be_dotgit(s) for s in starts):
                return f"find -exec {cmd[0]} in the git folder (.git)"
            i = end
        i += 1
    if "-delete" not in args:
        return ""
    for start in starts:
        if outside(start, cwd, root):
            return f"deletes outside the repo ({start})"
        if may_be_dotgit(start):
            return "find -delete in the git history (.git)"
    if whole and not tidy:
        return "find -delete in the whole repo of what is not a build leftover"
    return ""

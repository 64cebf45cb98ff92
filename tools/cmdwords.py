"""Reading a simple command's words for the denylist (tools/denylist.py): where an operand
points (`~`, `~user`, `$HOME`, `$PWD`, `..` and the variables the command line itself set
followed; None where a value is known only when the command runs), whether it lies outside
the repository, options alone or bundled, brace lists expanded as the shell expands them,
redirections and here-strings split off, here-document bodies found. Word splitting itself
is tools/shellparse.py's. Depends on nothing above `tools/`.
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

SAFE_DEV = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/")
MAX_WORDS = 64  # expansions of one word (brace lists, variables with several values) looked at
# `$NAME`, `${NAME}` and `${NAME<op>...}` (`:-`, `:?`, `%`, `#`, ...: taken as NAME's value)
_VAR = re.compile(r"\$(?:\{(\w+)[^}]*\}|(\w+))")
_HEREDOC = re.compile(r"(?<!<)<<(?!<)(-?)[ \t]*(['\"]?)([\w.-]+)\2[^\n]*\n")

Vars = dict[str, "list[str] | None"]  # name → its possible values, None when unknowable


def home() -> Path:
    return Path(os.path.expanduser("~"))


def expand_vars(word: str, cwd: Path, known: Vars) -> list[str]:
    """`word` with `$HOME`, `$PWD` and the variables in `known` replaced by their values
    (every combination, at most MAX_WORDS); a word with an unknowable variable stays as is."""
    names = [m.group(1) or m.group(2) for m in _VAR.finditer(word)]
    if not names:
        return [word]
    values: list[list[str]] = []
    for name in names:
        if known.get(name) is not None:
            values.append(known[name] or [""])
        elif name == "HOME" and name not in known:
            values.append([str(home())])
        elif name == "PWD" and name not in known:
            values.append([str(cwd)])
        else:
            return [word]
    return [_filled(word, combo) for combo in itertools.islice(itertools.product(*values), MAX_WORDS)]


def _filled(word: str, values: tuple[str, ...]) -> str:
    """`word` with its variables replaced by `values`, in order."""
    parts = iter(values)
    return _VAR.sub(lambda _m: next(parts), word)


def target(word: str, cwd: Path) -> Path | None:
    """Where `word` points, or None when a variable or substitution makes it unknowable."""
    for var, value in (("$HOME", home()), ("${HOME}", home()), ("$PWD", cwd), ("${PWD}", cwd)):
        if word == var or word.startswith(var + "/"):
            word = str(value) + word[len(var):]
            break
    if word.startswith("~"):  # `~`, `~/x`, `~user/x`; a `~name` no user has stays unknown
        head, sep, rest = word.partition("/")
        expanded = os.path.expanduser(head)
        if expanded == head:
            return None
        word = expanded + sep + rest
    if "$" in word:
        return None
    return Path(os.path.normpath(cwd / word))


def _inside(full: Path, root: Path) -> bool:
    try:
        full.resolve().relative_to(root)
        return True
    except (ValueError, OSError, RuntimeError):
        return False


def outside(word: str, cwd: Path, root: Path) -> bool:
    """Whether `word` names a path outside the repository `root`. A path whose tail is
    known only when the command runs (`/home/$USER/x`, `~/$(...)`) counts as outside when
    the part before it is."""
    if word.startswith(SAFE_DEV):
        return False
    full = target(word, cwd)
    if full is not None:
        return not _inside(full, root)
    fixed = word[:word.find("$")]
    if "/" not in fixed:
        return False  # (`$X/...`: where it starts is unknown, not known to be outside)
    head = target(fixed[:fixed.rfind("/") + 1] or "/", cwd)
    return head is not None and not _inside(head, root)


def operands(args: list[str]) -> list[str]:
    """Arguments that are not options (everything after `--` counts)."""
    if "--" in args:
        i = args.index("--")
        return [a for a in args[:i] if not a.startswith("-")] + args[i + 1:]
    return [a for a in args if not a.startswith("-")]


def has_flag(args: list[str], short: str, *long: str, prefix: bool = False) -> bool:
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


def git_flag(args: list[str], short: str, *long: str) -> bool:
    return has_flag(args, short, *long, prefix=True)


def option_values(args: list[str], *names: str) -> list[str]:
    """The values of options `names` (`-o X`, `-oX`, `--out X`, `--out=X`) in `args`."""
    out = []
    for i, a in enumerate(args):
        if a == "--":
            break
        for n in names:
            if a == n and i + 1 < len(args):
                out.append(args[i + 1])
            elif n.startswith("--") and a.startswith(n + "="):
                out.append(a[len(n) + 1:])
            elif len(n) == 2 and not n.startswith("--") and a.startswith(n) and len(a) > 2 \
                    and not a.startswith("--"):
                out.append(a[2:])
    return out


def split_redirects(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the command's own words, files it redirects output into)."""
    words, targets, _ = split_all(argv)
    return words, targets


def split_all(argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(the command's own words, files it redirects output into, its here-strings' texts)."""
    words, targets, strings, i = [], [], [], 0
    while i < len(argv):
        w = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if set(w) <= set("<>&|") and ">" in w:
            if not (w.endswith("&") and (nxt.isdigit() or nxt == "-")):
                targets.append(nxt)
            i += 2
            continue
        if set(w) <= set("<>&") and "<" in w:
            if w == "<<<":
                strings.append(nxt)
            i += 2
            continue
        if w.isdigit() and i + 1 < len(argv) and set(argv[i + 1]) <= set("<>&") and argv[i + 1]:
            i += 1  # the `2` of `2>file`
            continue
        words.append(w)
        i += 1
    return words, targets, strings


def braces(word: str, limit: int = MAX_WORDS) -> list[str]:
    """`word` with its brace lists expanded as the shell does (`.{g,}it` → `.git`, `.it`),
    at most `limit` words."""
    m = re.search(r"\{([^{}\s]*,[^{}\s]*)\}", word)
    if not m:
        return [word]
    out: list[str] = []
    for part in m.group(1).split(","):
        out += braces(word[:m.start()] + part + word[m.end():], limit)
        if len(out) >= limit:
            break
    return out[:limit]


def heredoc_bodies(text: str) -> list[str]:
    """The bodies of the here-documents in `text` (read loosely: from the line after
    `<<WORD` up to a line that is WORD, tabs stripped for `<<-`)."""
    bodies = []
    for m in itertools.islice(_HEREDOC.finditer(text), MAX_WORDS):
        strip, word, lines = m.group(1) == "-", m.group(3), []
        for line in text[m.end():].split("\n"):
            if (line.lstrip("\t") if strip else line) == word:
                break
            lines.append(line)
        bodies.append("\n".join(lines))
    return bodies

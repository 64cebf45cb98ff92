"""The denylist's rules for programs an interpreter runs from the command line (tools/denylist.py):
`python -c CODE`, `perl -e`, `ruby -e`, `node -e`/`--eval`, `php -r`, `awk 'PROGRAM'`,
`osascript -e`, ..., and a program read from standard input (a here-document, a here-string,
a pipe), for which the whole command line is read as its code.

Code is not run or parsed, only read: its string literals are judged as command lines
(`os.system("rm -rf ~")`, `execSync('...')`, `['rm', '-rf', '/home']` joined), and code that
calls a file-destroying function (rmtree, unlink, chmod, rename, a write, ...) and names the
home folder, a path outside the repository or the git folder asks. `perl -i`/`ruby -i` files
count as written. It sees what the text shows: code that builds its strings or names at run
time is not seen through. Depends on nothing above `tools/`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from .cmdwords import operands, outside

Judge = Callable[[str], str]  # a command line → why it is destructive, or ''

MAX_CODE = 64 * 1024  # characters of code read (each pattern scans a bounded stretch)
_PYTHON = re.compile(r"(python|pypy)[\d.]*")
_AWK = {"awk", "gawk", "mawk", "nawk", "busybox-awk"}
# interpreter → (options whose value is code, options that take some other value)
_CODE_FLAGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "perl": (("-e", "-E"), ("-I", "-M", "-m", "-x")),
    "ruby": (("-e",), ("-I", "-r", "-C", "-E", "-F")),
    "node": (("-e", "--eval", "-p", "--print"), ("-r", "--require", "--import", "--loader")),
    "nodejs": (("-e", "--eval", "-p", "--print"), ("-r", "--require")),
    "bun": (("-e", "--eval", "-p", "--print"), ()),
    "php": (("-r", "-B", "-R", "-E"), ("-c", "-d", "-z")),
    "lua": (("-e",), ("-l",)), "luajit": (("-e",), ("-l",)),
    "Rscript": (("-e",), ()), "osascript": (("-e",), ()),
    "pwsh": (("-c", "-Command", "-command"), ()), "powershell": (("-c", "-Command", "-command"), ()),
    "tclsh": ((), ()), "irb": (("-e",), ()),
}
# Functions that delete, move, overwrite or change the mode of files, in the usual languages.
_DESTROYS = re.compile(
    r"rmtree|rm_rf|rm_r\b|\brm\s*\(|rmSync|rmdirSync|unlinkSync|\bunlink\b|\brmdir\b|\bremove(dirs)?\b"
    r"|remove_tree|\bdelete\s*\(|Remove-Item|\bchmod|\bchown|\blchown|os\.replace|\.rename|renameSync"
    r"|\btruncate|write_text|write_bytes|writeFile|appendFile|copyFile|cpSync|shutil\.(move|copy)"
    r"|FileUtils|File::Path|File::Copy|\bmove\s*\(|emptyDir|"
    r"\bopen\s*\([^)]{0,300}['\"](w|a|x|r\+|>|>>|\+>)", re.IGNORECASE)
# Ways code names the home folder whatever the literal text.
_HOME = re.compile(r"expanduser|Path\.home|homedir|Dir\.home|\bHOME\b|UserHomeDir|home_dir"
                   r"|getpwuid|expand_path", re.IGNORECASE)
_RECURSIVE = re.compile(r"rmtree|rm_rf|rm_r\b|remove_tree|recursive|rmSync|emptyDir|Remove-Item",
                        re.IGNORECASE)
_LITERAL = re.compile(r"'''(.{0,4000}?)'''|\"\"\"(.{0,4000}?)\"\"\"|'((?:\\.|[^'\\\n]){0,4000})'"
                      r"|\"((?:\\.|[^\"\\\n]){0,4000})\"|`([^`]{0,4000})`", re.DOTALL)
# Functions that run a command line, in the usual languages.
_RUNS = re.compile(r"system|popen|subprocess|spawn|exec|child_process|shell|\bqx|%x|`", re.IGNORECASE)
_LIST = re.compile(r"[\[(]([^\[\]()]*)[\])]")


def interpreter(name: str) -> bool:
    return bool(_PYTHON.fullmatch(name)) or name in _AWK or name in _CODE_FLAGS or name == "deno"


def code_of(name: str, args: list[str]) -> tuple[list[str], bool, list[str]]:
    """(the code `name ARGS` runs from its arguments, whether it reads its program from
    standard input, the files it edits in place)."""
    if _PYTHON.fullmatch(name):
        return _python_code(args)
    if name in _AWK:
        if any(a == "-f" or a.startswith(("-f", "--file")) for a in args):
            return [], False, []
        ops = [a for i, a in enumerate(args) if not a.startswith("-")
               and not (i and args[i - 1] in ("-v", "-F", "--assign", "--field-separator"))]
        return ops[:1], False, []
    if name == "deno":
        return (args[1:2] if args[:1] == ["eval"] else []), False, []
    code_flags, valued = _CODE_FLAGS[name]
    codes, rest, i = [], [], 0
    while i < len(args):
        a = args[i]
        flag = next((f for f in code_flags if a == f or (a.startswith(f + "=") and f.startswith("--"))
                     or (len(f) == 2 and a.startswith(f) and len(a) > 2)), None)
        if flag is not None:
            value = a[len(flag):].lstrip("=") if a != flag else (args[i + 1] if i + 1 < len(args) else "")
            codes.append(value)
            i += 1 if a != flag else 2
            continue
        i += 2 if a in valued else 1
        rest.append(a)
    inplace = name in ("perl", "ruby") and any(a.startswith("-") and not a.startswith("--")
                                               and "i" in a[1:] for a in rest)
    files = operands(rest) if codes else operands(rest)[1:]
    return codes, not codes and not operands(rest), files if inplace else []


def _python_code(args: list[str]) -> tuple[list[str], bool, list[str]]:
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-" or not a.startswith("-"):
            return [], a == "-", []
        letters = a[1:]
        if a.startswith("--"):
            i += 1
            continue
        for j, c in enumerate(letters):
            if c == "c":
                code = letters[j + 1:] or (args[i + 1] if i + 1 < len(args) else "")
                return [code], False, []
            if c == "m":
                return [], False, []  # a module: not seen from here
            if c in "WX":
                i += 0 if letters[j + 1:] else 1
                break
        i += 1
    return [], True, []


def _literals(code: str) -> list[str]:
    return [next(g for g in m.groups() if g is not None) for m in _LITERAL.finditer(code)]


def code_why(code: str, cwd: Path, root: Path, judge: Judge) -> str:
    """Why interpreter code `code` is destructive, or ''."""
    code = code[:MAX_CODE]
    literals = _literals(code)
    literals += [inner for lit in literals for inner in _literals(lit)]  # (code quoted for a shell)
    runs = bool(_RUNS.search(code))
    lines = [lit for lit in literals if " " in lit.strip() or (runs and lit.strip())]
    for m in _LIST.finditer(code):  # `['rm', '-rf', path]`, `("rm", "-rf", "/home")`
        parts = _literals(m.group(1))
        if len(parts) > 1:
            lines.append(" ".join(parts))
    for line in lines[:64]:
        why = judge(line)
        if why:
            return f"code that runs a command: {why}"
    if not _DESTROYS.search(code):
        return ""
    if _HOME.search(code):
        return "code that changes files in the home folder"
    for lit in literals:
        word = lit.strip()
        if word and "\n" not in word and (outside(word, cwd, root) or word.startswith("~")):
            return f"code that changes files outside the repo ({word})"
        if re.search(r"(^|/)\.git(/|$)", word, re.IGNORECASE):
            return "code that changes the git history (.git)"
        if word in (".", "./") and _RECURSIVE.search(code):
            return "code that deletes the whole repo"
    return ""

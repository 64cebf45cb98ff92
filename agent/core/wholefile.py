"""The "whole" edit format: the model changes a file by writing all of it in its reply.

A reply changes a file with the file's path on its own line (plain, in backticks or bold, or
after "File:"), or in the fence's info string, followed by the complete new text in one fenced
code block (a reply's only unnamed code block, when the message had exactly one file attached,
is taken for that file); a `<file path="...">...</file>` block, the form attachments arrive
in, counts too:

    calc.py
    ```python
    def add(a, b):
        ...
    ```

Small models get whole-file rewrites right far more often than exact search/replace, and
prompt lookup drafts the unchanged lines from the attached copy, so they cost little to decode.
A block is applied as a write_file call (same approvals, snapshot, confinement and commit),
except: a block identical to the file (a quote, not a change) and, for an existing file of at
least `MIN_LINES` lines, a block with under half its lines (unless, in Python, it defines
every top-level function and class the file does: a whole rewrite), and for an existing
Python file that defines functions or classes, a block that defines none (a snippet, not the
whole file: small models copy an example statement from the instructions as the file) are
not applied; the latter two are reported (and, unless the block only quotes the file's own
lines, the model is told, see `quotes`). A Python snippet that redefines some of the file's
functions or classes is spliced into the file instead (`spliced`); what a rewrite leaves out
of the file is kept by core/editguard.py, which vets every whole-file write: small models drop
the code they did not change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(`{3,}|~{3,})([^`\n]*)$")
PATH = re.compile(r"^[\w\-.][\w./\-]*$")
FILE_BLOCK = re.compile(r'<file path="([^"\n]+)">\n(.*?)\n?</file>', re.DOTALL)
MIN_LINES = 8
SNIPPET = "not applied (write the whole file to change it)"  # how a snippet's verdict ends
DEFINES = re.compile(r"^(?:async\s+def|def|class)\s+(\w+)", re.MULTILINE)  # top-level defs


@dataclass(frozen=True)
class FileBlock:
    path: str
    content: str


def _path_in(line: str) -> str:
    """The path a line names, or ''. Accepts `path`, **path**, path:, File: path, # path."""
    s = line.strip().strip("*`").strip()
    for prefix in ("File:", "file:", "Filename:", "filename:", "#"):
        s = s.removeprefix(prefix).strip().strip("*`").strip()
    s = s.rstrip(":").strip("*`").strip()
    if not PATH.match(s) or s in (".", "..") or not ("." in s or "/" in s or s in _BARE_NAMES):
        return ""
    return s.removeprefix("./")


_BARE_NAMES = {"Makefile", "Dockerfile", "LICENSE", "README", "Procfile", "Gemfile", "Rakefile"}


def _info_path(info: str) -> str:
    """A path in a fence's info string: ```python calc.py, ```calc.py or ```python:calc.py."""
    for part in re.split(r"[\s:]+", info.strip()):
        if ("." in part or "/" in part) and PATH.match(part):
            return part.removeprefix("./")
    return ""


# A fence's language, by the file extensions it can stand for: an unnamed ```json block is not
# taken for a .py file.
LANGUAGES = {
    "python": (".py", ".pyi"), "py": (".py", ".pyi"), "json": (".json",), "toml": (".toml",),
    "yaml": (".yaml", ".yml"), "yml": (".yaml", ".yml"), "javascript": (".js", ".mjs", ".cjs"),
    "js": (".js", ".mjs", ".cjs"), "typescript": (".ts", ".tsx"), "ts": (".ts", ".tsx"),
    "go": (".go",), "rust": (".rs",), "c": (".c", ".h"), "cpp": (".cc", ".cpp", ".hpp", ".h"),
    "java": (".java",), "ruby": (".rb",), "sh": (".sh",), "bash": (".sh",),
    "html": (".html", ".htm"), "css": (".css",), "markdown": (".md",), "md": (".md",),
    "makefile": ("Makefile",), "make": ("Makefile",),
}


def _fits(language: str, path: str) -> bool:
    """May a block fenced with `language` be the file `path`? (Unknown or no language: yes.)"""
    exts = LANGUAGES.get(language)
    return exts is None or any(path.endswith(e) for e in exts)


@dataclass(frozen=True)
class Fence:
    """A closed fenced code block of a reply: the fence's info string, the path it is named
    by (the info string's, else one of the two lines above it; '' for none) and its body."""

    info: str
    path: str
    body: str


def _closing(lines: list[str], i: int, fence: str) -> int | None:
    """The index of the line that closes the fence opened at lines[i] (None: unclosed)."""
    return next((j for j in range(i + 1, len(lines))
                 if lines[j].strip().startswith(fence[0] * len(fence))
                 and not lines[j].strip().strip(fence[0])), None)


def fences(text: str) -> list[Fence]:
    """The reply's closed code blocks, in order; an unclosed one (a reply cut short) and any
    after it are left out, so they are never applied."""
    out: list[Fence] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip())
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2)
        end = _closing(lines, i, fence)
        if end is None:
            break
        path = _info_path(info) or next(
            (_path_in(lines[j]) for j in range(i - 1, max(i - 3, -1), -1) if lines[j].strip()), "")
        body = "\n".join(lines[i + 1 : end])
        out.append(Fence(info, path, body + "\n" if body else ""))
        i = end + 1
    return out


def prose(text: str) -> str:
    """The reply's text outside its code blocks (fenced and `<file>` ones, closed or not) and
    the lines just above a block that name its path: '' for a reply that is only code."""
    lines = FILE_BLOCK.sub("", text).split("\n")
    kept: list[str] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip())
        if not m:
            kept.append(lines[i])
            i += 1
            continue
        while kept and not kept[-1].strip():
            kept.pop()
        if kept and _path_in(kept[-1]):
            kept.pop()
        end = _closing(lines, i, m.group(1))
        i = len(lines) if end is None else end + 1
    return "\n".join(kept).strip()


def parse_blocks(text: str, default: str = "", skip=None,
                 owners: dict[str, set[str]] | None = None) -> list[FileBlock]:
    """Every whole-file block in a reply, in order (a later block for a path wins). A code
    block without a path is taken for `default` (the one file attached to the message), if
    given and if it is the reply's only code block without one; otherwise, with `owners`
    (Python files the model was shown, each with its top-level functions and classes), for
    the one file among them that defines any of the functions or classes it defines, if it
    parses as Python (a small model given a module and its test writes the fix without
    naming the file).
    `skip(fence)`: fences that are not whole-file blocks (e.g. search/replace edits), left
    out first."""
    out: dict[str, str] = {}
    for m in FILE_BLOCK.finditer(text):
        out[m.group(1).removeprefix("./")] = m.group(2) + "\n"
    unnamed: list[tuple[str, str]] = []  # (fence language, body) of blocks without a path
    for f in fences(text):
        if skip is not None and skip(f):
            continue
        if f.path:
            out[f.path] = f.body
        else:
            unnamed.append((f.info.strip().split(" ")[0].lower(), f.body))
    if default and len(unnamed) == 1 and default not in out and _fits(unnamed[0][0], default):
        out[default] = unnamed[0][1]
    elif owners:
        named = set(out)
        for language, body in unnamed:  # (a later block for the same file wins)
            owner = owner_of(body, owners) if language in ("python", "py", "") and parses(body) else ""
            if owner and owner not in named:
                out[owner] = body
    return [FileBlock(p, c) for p, c in out.items()]


def parses(text: str) -> bool:
    """Is `text` Python source (parses; not e.g. a JavaScript class of the same name)?"""
    from .pymerge import _parse

    return _parse(text) is not None


def defined(text: str) -> set[str]:
    """The top-level functions and classes a Python text defines (by their lines)."""
    return set(DEFINES.findall(text))


def owner_of(body: str, owners: dict[str, set[str]]) -> str:
    """The one file of `owners` (path: its top-level definitions) that defines any of the
    functions or classes `body` defines; '' for none or more than one."""
    names = defined(body)
    hits = [path for path, defs in owners.items() if names & defs] if names else []
    return hits[0] if len(hits) == 1 else ""


def judge(block: FileBlock, root: Path, shown: str | None = None) -> str:
    """'' to apply the block, 'same' when it equals the file, or why it is not applied.
    `shown`: the file's text as the reply read it, where that was not the file as it is (a
    reply that answered an earlier request again, core/attempts.py restart_view): whether
    the block is the whole file or a snippet is judged against what the model saw."""
    from tools._paths import PathError, confine

    try:
        target = confine(root, block.path)
    except PathError as e:
        return str(e)
    try:
        if not target.is_file():
            return "" if not target.exists() else f"{block.path} is not a regular file"
    except OSError as e:  # a name too long, ...
        return f"{block.path}: {e.strerror or e}"
    try:
        old = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return f"{block.path} is not a text file this format can rewrite"
    if old.rstrip("\n") == block.content.rstrip("\n"):
        return "same"
    old = old if shown is None else shown
    old_lines, new_lines = old.count("\n") + 1, block.content.count("\n") + 1
    if old_lines >= MIN_LINES and new_lines * 2 < old_lines and not _redefines(old, block):
        return (f"the code block for {block.path} has {new_lines} of the file's {old_lines} "
                "lines: " + SNIPPET)
    if block.path.endswith((".py", ".pyi")) and not DEFINES.search(block.content):
        names = list(dict.fromkeys(DEFINES.findall(old)))
        if names:
            shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            return (f"the code block for {block.path} defines none of the file's functions and "
                    f"classes ({shown}): " + SNIPPET)
    return ""


MAX_TEXT_BYTES = 4 << 20  # a larger file is not one this format rewrites


def current_text(root: Path, path: str, shown: str | None = None) -> str | None:
    """The file's text (`shown`, the text a reply read, where given); None where it is not a
    regular UTF-8 file inside the root (missing, a symlink, a FIFO, too big)."""
    if shown is not None:
        return shown
    import os
    import stat

    from tools._paths import PathError, confine

    try:
        fd = os.open(confine(root, path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except (PathError, OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_TEXT_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_TEXT_BYTES + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


_text = current_text


def spliced(block: FileBlock, root: Path, intent: str, asked: str,
            shown: str | None = None) -> FileBlock | None:
    """A Python block that is only some of the file's definitions, spliced into the file as it
    is (core/pymerge.py), or None where it is not one, where `intent` may want definitions
    gone (`keeps_all`), or where `asked` (the message typed) asks for no change (a snippet in
    an answer to a question illustrates). `shown`: as for `judge`, the file as the reply
    read it, which is what the block is spliced into."""
    from .pymerge import splice

    if not block.path.endswith((".py", ".pyi")) or not keeps_all(intent) or not asks_change(asked):
        return None
    old = _text(root, block.path, shown)
    if old is None:
        return None
    text = splice(old, block.content)
    return None if text is None else FileBlock(block.path, text)


# A message that may want definitions gone: a whole rewrite that leaves some out is its answer.
REMOVES = re.compile(r"\b(?:remov|delet|drop|renam|replac|unused|dead|get rid|eliminat|merg|inlin|"
                     r"mov|refactor|clean|strip|prun|consolidat|split|extract|rewrit|simplif|"
                     r"reorgani[sz]|restructur|undo|revert|roll ?back|convert|combin|"
                     r"turn [^.\n]{0,80} into|no longer|(?:do not|don't|dont) need|instead|"
                     r"only keep|keep only)", re.IGNORECASE)
# A message that asks for no change: a code block in the reply illustrates, it is not an edit.
NO_CHANGE = re.compile(r"\b(?:(?:do not|don't|dont|without) (?:chang|edit|modif|touch|writ)|"
                       r"just explain|only explain|explain only)", re.IGNORECASE)


# A message that forbids every change ("do not change any file", "change nothing", "just
# explain"), not one that spares some files ("fix it but do not change the tests").
FORBIDS_CHANGE = re.compile(
    r"\b(?:(?:do not|don't|dont|never|without)\s+(?:chang|edit|modif|touch|writ)\w*\s+"
    r"(?:anything\b|any(?:\s+files?)?\b|a single \w+|(?:the|this) file\b|it\b)(?!\s+files?\b)"
    r"(?!\s+(?:else|other|in|under|outside|but|except)\b)"
    r"|\b(?:fix|change|edit|modify|touch)\s+nothing\b(?!\s+(?:else|but|except))"
    r"|\bno\s+(?:changes|edits)\b|just explain|only explain|explain only)", re.IGNORECASE)


def forbids_change(text: str) -> bool:
    """Does the typed `text` forbid every change to the repository's files?"""
    return bool(FORBIDS_CHANGE.search(text[:20_000]))


def keeps_all(intent: str) -> bool:
    """May a reply that writes only part of a Python file be kept whole (core/pymerge.py)?
    `intent`: what the person typed (and what they answered: the earlier request, the reply
    they answer). Not where it may want definitions gone (remove, rename, move, refactor,
    undo, ...)."""
    return not REMOVES.search(intent)


def asks_change(text: str) -> bool:
    """Does `text` ask for a change: a sentence that is not a question, and no "do not change"?"""
    from .testcmd import sentences

    return not NO_CHANGE.search(text) and any(
        s.strip() and not s.rstrip().endswith("?") for s in sentences(text))


def is_snippet(verdict: str) -> bool:
    """Is `verdict` (judge's) a block refused as a part of the file rather than all of it?"""
    return verdict.endswith(SNIPPET)


LEAD_LINE_CHARS = 200  # a longer first line is left to the model
LEAD_READ_CHARS = 16384  # how much of the file is read for its first line


def leads_to(path: str) -> bool:
    """Does a reply that begins `path` and a fence write that file? (Its line parses back as
    the path: not for a path with spaces, which only a `<file path=...>` block names.)"""
    return _path_in(path) == path


def lead(path: str, root: Path | None = None) -> str:
    """The start of a reply that writes `path` whole: its path, an opening fence and, with
    `root`, the file's first line as it is, without its newline (so the model goes on writing
    that file, not the nearest example of a path and a fence it has seen)."""
    language = next((name for name, exts in LANGUAGES.items()
                     if len(name) > 2 and any(path.endswith(e) for e in exts)), "")
    first = ""
    if root is not None:
        from tools._paths import PathError, confine

        try:
            with confine(root, path).open(encoding="utf-8") as f:
                text = f.read(LEAD_READ_CHARS)
        except (PathError, OSError, UnicodeDecodeError, ValueError):
            text = ""
        first = next((line for line in text.split("\n") if line.strip()), "")
        if FENCE.match(first.strip()) or len(first) > LEAD_LINE_CHARS:
            first = ""  # a fence would close the block; a long line is the model's to write
    return f"{path}\n```{language}\n{first}"


def _redefines(old: str, block: FileBlock) -> bool:
    """Does a shorter Python block define every top-level function and class of the file (a
    whole rewrite, e.g. without the long docstrings of the version before, not a snippet)?"""
    if not block.path.endswith((".py", ".pyi")):
        return False
    names = defined(old)
    return bool(names) and names <= defined(block.content)


COPIES = re.compile(r"\b(?:cop(?:y|ies|ied)|duplicat|same as|identical|mirror|overwrite|"
                    r"reset|restor|sync)", re.IGNORECASE)
# A message that may want a new file beside the one it names (or that one left as it is).
ANEW = re.compile(COPIES.pattern[:-1] + r"|fake|mock|stub|variant|fallback|separate|"
                  r"new (?:module|file|script)|own (?:module|file)|as it is|unchanged|"
                  r"untouched|alone)", re.IGNORECASE)


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").split("\n")]


def copies(block: FileBlock, root: Path, others: list[str], intent: str = "",
           written: tuple[str, ...] = ()) -> str:
    """The other file whose text the block for an existing, different file is ('' for none):
    a small model given two files (a test and its module) sometimes writes one's text under
    the other's path, which would replace that file's code. Not where `intent` asks for a
    copy, nor against a file the reply itself rewrites (`written`: a move); files of under
    two non-blank lines are not compared."""
    if COPIES.search(intent):
        return ""
    new = _lines(block.content)
    if sum(1 for line in new if line.strip()) < 2:
        return ""
    old = _text(root, block.path)
    if old is None or _lines(old) == new:
        return ""
    for other in dict.fromkeys(others):
        if other == block.path or other in written:
            continue
        if (text := _text(root, other)) is not None and _lines(text) == new:
            return other
    return ""


def _is_test(path: str) -> bool:
    """A test file as the repo map tells them, and pytest's conftest.py, Django's tests.py."""
    from .repomap import is_test

    parts = path.split("/")
    return (is_test(path) or parts[-1] in ("conftest.py", "tests.py", "test.py")
            or "testing" in parts[:-1])


def owners_in(root: Path, paths: list[str]) -> dict[str, set[str]]:
    """The Python files among `paths` as they are, each with its top-level functions and
    classes (for `parse_blocks` and `retarget`). Not test files: a reply that shows a test
    without naming its file suggests it, and a model that writes tests names their file."""
    out: dict[str, set[str]] = {}
    for path in paths:
        text = _text(root, path) if path.endswith((".py", ".pyi")) and not _is_test(path) else None
        if text is not None and (names := defined(text)):
            out[path] = names
    return out


_PY_PATH = re.compile(r"[\w./\-]+\.py\b")


def names_new_file(text: str, root: Path) -> bool:
    """Does `text` name a Python file that does not exist (one it asks to create)?"""
    from tools._paths import PathError, confine

    for path in _PY_PATH.findall(text):
        try:
            if not confine(root, path.removeprefix("./")).exists():
                return True
        except (PathError, OSError, ValueError):
            continue
    return False


def retarget(block: FileBlock, root: Path, owners: dict[str, set[str]], asked: str,
             intent: str, written: list[str]) -> str:
    """The file a Python block for a new file is meant for ('' for none): the 0.5B asked to
    add a parameter to `repeat` in text.py wrote `repeat` to a new repeat.py, which leaves
    text.py as it was. Only for a .py file named after a function or class it defines; the
    one file of `owners` that defines every function and class the block defines, where the
    message does not name the new path and asks for nothing to move, be copied or made
    anew (`keeps_all`, ANEW), and the reply (`written`: its blocks' paths and the files
    blocks before went to) writes no block for that file itself."""
    if not owners or not block.path.endswith(".py") or block.path in asked:
        return ""
    from tools._paths import PathError, confine

    try:
        if confine(root, block.path).exists():
            return ""
    except (PathError, OSError):
        return ""
    if not keeps_all(intent) or ANEW.search(intent) or not parses(block.content):
        return ""
    names = defined(block.content)
    stem = block.path.rsplit("/", 1)[-1].removesuffix(".py").lower()
    if stem not in {n.lower() for n in names}:
        return ""  # (named after what it defines: `repeat` in repeat.py, `Character` in Character.py)
    owner = owner_of(block.content, owners)
    if not owner or not owner.endswith(".py") or owner in written or not names <= owners[owner]:
        return ""  # (a new module that defines more is not a misnamed version of this one)
    return owner


def quotes(block: FileBlock, root: Path) -> bool:
    """Is every non-blank line of the block a line of the file as it is (a quote, e.g. in an
    answer about the code, rather than a change written as a snippet)?"""
    old = _text(root, block.path)
    if old is None:
        return False
    have = {line.strip() for line in old.split("\n")}
    return all(line.strip() in have for line in block.content.split("\n"))

"""The "diff" edit format: search/replace blocks, and the "auto" format that mixes them with
whole files.

A reply changes a file with the file's path on a line (as for whole files, core/wholefile.py:
plain, in backticks or bold, after "File:", or in the fence's info string; inside the fence
before the first marker too), then a fenced block of one or more pairs:

    calc.py
    ```python
    <<<<<<< SEARCH
        return a - b
    =======
        return b - a
    >>>>>>> REPLACE
    ```

A fence is an edit block when a line of it is a SEARCH marker (5 to 9 `<`); a path line
between pairs switches the file. An empty SEARCH creates a file that does not exist (or is
empty). A pair without its `=======` or `>>>>>>> REPLACE` line is not applied; an unclosed
fence (a reply cut short) never is. Each SEARCH is looked for, in order, at the first level
that finds it (`LEVELS`): the exact lines; the lines without trailing whitespace; the lines
with one leading indent added or removed throughout (the REPLACE lines are re-indented the
same way); that, ignoring blank lines; last, the one span of the file whose text is at least
`FUZZY_RATIO` alike (difflib) for a SEARCH of at least `FUZZY_MIN_LINES` lines. A level that
finds it at more than one place refuses it (it never falls through to a looser one). The
pairs of a file apply one after the other to its text; the ones that match are applied
(as one write_file call per file, so approvals, snapshots, confinement and commits are the
whole format's), the others are reported for the model: with the file's closest lines, or
with the name of the one other attached file that has the SEARCH lines (never applied there).
A pair whose REPLACE is its SEARCH changes nothing and is reported too.

"auto" asks for whole files below `AUTO_LINES` lines and search/replace blocks from there on
(a whole 100-line Python file is 700-1100 tokens with Qwen2.5's tokenizer: the exercism
reference solutions average 7.3 tokens a line, this project's code 11.2, against the default
`max_tokens` of 1024). It applies search/replace blocks to any file and whole-file blocks to
new files and files under `AUTO_LINES` lines; a whole-file block for a longer file is refused
and goes back to the model (Qwen2.5-Coder-0.5B, given a 137-line file, echoed it cut short
with a line changed: written, it lost the function the task was about). "diff" takes
whole-file blocks only for files that do not exist yet.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .wholefile import FileBlock, Fence, _path_in, fences, judge

AUTO_LINES = 100  # "auto": files of at least this many lines are edited with search/replace
FUZZY_RATIO = 0.9  # the least difflib ratio of a fuzzy match
FUZZY_MIN_LINES = 3  # ... and the least number of SEARCH lines it is tried for
FIX_HOW = {  # how to reply after a block was not applied (the "whole" format's is conversation.REFUSED)
    "diff": ("To change a file, reply with its path on one line and then a code block of "
             "SEARCH/REPLACE blocks, each SEARCH copying lines exactly as they are in the file "
             "now; send again only the blocks that were not applied."),
    "auto": ("To change a file, reply with its path on one line and then the complete new file "
             f"in one code block or, for a file of {AUTO_LINES} lines or more, a code block of "
             "SEARCH/REPLACE blocks, each SEARCH copying lines exactly as they are in the file "
             "now; send again only the blocks that were not applied."),
}
LEVELS = ("exact", "trailing whitespace", "indentation", "blank lines", "fuzzy")

SEARCH = re.compile(r"^<{5,9} ?SEARCH\s*$")
DIVIDER = re.compile(r"^={5,9}\s*$")
REPLACE = re.compile(r"^>{5,9} ?REPLACE\s*$")


@dataclass(frozen=True)
class Edit:
    """One SEARCH/REPLACE pair (both end with a newline unless empty)."""

    path: str
    search: str
    replace: str


@dataclass
class FileEdit:
    """What a file's pairs make of it: `content` is the new text (None: nothing to write)."""

    path: str
    content: str | None = None
    applied: list[str] = field(default_factory=list)  # the level each applied pair matched at
    problems: list[str] = field(default_factory=list)  # why the others were not applied


def is_edit_fence(fence: Fence) -> bool:
    """Is a line of the fence a SEARCH or REPLACE marker (an edit block, never a whole file)?"""
    return any(SEARCH.match(line.strip()) or REPLACE.match(line.strip())
               for line in fence.body.split("\n"))


def parse_edits(text: str, default: str = "") -> tuple[list[Edit], list[str]]:
    """(the reply's search/replace pairs in order, why malformed ones were left out). A fence
    without a path is for `default` (the one file attached to the message) when given."""
    edits: list[Edit] = []
    problems: list[str] = []
    for fence in fences(text):
        if not is_edit_fence(fence):
            continue
        path = fence.path or default
        state, search, replace = "out", [], []
        for line in fence.body.split("\n"):
            mark = line.strip()
            if state == "out":
                if SEARCH.match(mark):
                    state, search = "search", []
                elif REPLACE.match(mark):
                    problems.append(f"a SEARCH/REPLACE block{_for(path)} is not applied: it has "
                                    "no <<<<<<< SEARCH line")
                elif mark and _path_in(mark):
                    path = _path_in(mark)
            elif state == "search":
                if DIVIDER.match(mark):
                    state, replace = "replace", []
                elif SEARCH.match(mark) or REPLACE.match(mark):
                    problems.append(f"a SEARCH/REPLACE block{_for(path)} is not applied: it has "
                                    "no ======= line")
                    state = "search" if SEARCH.match(mark) else "out"
                    search = []
                else:
                    search.append(line)
            elif REPLACE.match(mark):
                if path:
                    edits.append(Edit(path, _join(search), _join(replace)))
                else:
                    problems.append("a SEARCH/REPLACE block names no file, so it is not applied; "
                                    "put the file's path on the line before the code block")
                state = "out"
            elif SEARCH.match(mark) or DIVIDER.match(mark):
                problems.append(f"a SEARCH/REPLACE block{_for(path)} is not applied: it has "
                                "no >>>>>>> REPLACE line")
                state, search = ("search", []) if SEARCH.match(mark) else ("out", [])
            else:
                replace.append(line)
        if state != "out":
            problems.append(f"a SEARCH/REPLACE block{_for(path)} is not applied: it is not "
                            "closed by a >>>>>>> REPLACE line")
    return edits, problems


def _for(path: str) -> str:
    return f" for {path}" if path else ""


def _join(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


# ---- matching -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Match:
    start: int  # first file line replaced
    end: int  # one past the last
    indent: tuple[str, str] = ("", "")  # (removed from, added to) each REPLACE line


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _offset(file_indent: str, search_indent: str) -> tuple[str, str] | None:
    """(remove, add): how an indent of `search_indent` becomes `file_indent`, or None."""
    if file_indent.endswith(search_indent):
        return ("", file_indent[: len(file_indent) - len(search_indent)])
    if search_indent.endswith(file_indent):
        return (search_indent[: len(search_indent) - len(file_indent)], "")
    return None


def _shift(file_line: str, search_line: str) -> tuple[str, str] | None:
    """How `search_line` becomes `file_line` by its leading indent: (remove, add), or None."""
    f, s = file_line.rstrip(), search_line.rstrip()
    fi, si = _indent(f), _indent(s)
    if f[len(fi):] != s[len(si):]:
        return None
    return _offset(fi, si)


def _same(file_lines: list[str], search: list[str], level: int) -> tuple[str, str] | None:
    """The indent shift under which `file_lines` equal `search` at `level` (0-3), or None."""
    if len(file_lines) != len(search):
        return None
    if level == 0:
        return ("", "") if file_lines == search else None
    if level == 1:
        return ("", "") if all(a.rstrip() == b.rstrip() for a, b in zip(file_lines, search)) else None
    shift = None
    for a, b in zip(file_lines, search):
        if not a.strip() or not b.strip():
            if a.strip() or b.strip():
                return None
            continue
        this = _shift(a, b)
        if this is None or (shift is not None and this != shift):
            return None
        shift = this
    return shift or ("", "")


def _find(lines: list[str], search: list[str], level: int) -> list[Match]:
    """Every place `search` matches at `level` (0: exact ... 3: ignoring blank lines)."""
    if level < 3:
        n = len(search)
        out = []
        for i in range(len(lines) - n + 1):
            shift = _same(lines[i : i + n], search, level)
            if shift is not None:
                out.append(Match(i, i + n, shift))
        return out
    filled = [i for i, line in enumerate(lines) if line.strip()]
    want = [line for line in search if line.strip()]
    m = len(want)
    out = []
    for k in range(len(filled) - m + 1):
        shift = _same([lines[i] for i in filled[k : k + m]], want, 2)
        if shift is not None:
            out.append(Match(filled[k], filled[k + m - 1] + 1, shift))
    return out


def _dedent(lines: list[str]) -> str:
    cut = min((len(_indent(line)) for line in lines if line.strip()), default=0)
    return "\n".join(line[cut:].rstrip() for line in lines)


def _fuzzy(lines: list[str], search: list[str]) -> list[Match]:
    """The spans at least FUZZY_RATIO alike to `search` (of its length; if none, of one line
    fewer or more), the best first; more than one only when some do not overlap the best."""
    if sum(1 for line in search if line.strip()) < FUZZY_MIN_LINES:
        return []
    want = _dedent(search)
    scored: list[tuple[float, int, int]] = []
    n = len(search)
    sm = difflib.SequenceMatcher(None, autojunk=False)
    sm.set_seq2(want)  # (the index of `want` is built once)
    for size in (n, n - 1, n + 1):
        if scored:  # spans of the SEARCH's own length first; one line more or less after
            break
        for i in range(len(lines) - size + 1):
            sm.set_seq1(_dedent(lines[i : i + size]))
            if sm.real_quick_ratio() >= FUZZY_RATIO and sm.quick_ratio() >= FUZZY_RATIO:
                ratio = sm.ratio()
                if ratio >= FUZZY_RATIO:
                    scored.append((ratio, i, i + size))
    if not scored:
        return []
    _, start, end = max(scored, key=lambda s: (s[0], -abs(s[2] - s[1] - n)))
    apart = [Match(s, e) for _, s, e in scored if e <= start or s >= end]
    first = next((lines[i] for i in range(start, end) if lines[i].strip()), "")
    at = next((line for line in search if line.strip()), "")
    shift = _offset(_indent(first), _indent(at)) or ("", "")
    return [Match(start, end, shift), *apart]


def _reindent(text_lines: list[str], shift: tuple[str, str]) -> list[str]:
    remove, add = shift
    out = []
    for line in text_lines:
        if line.strip():
            line = add + line.removeprefix(remove) if line.startswith(remove) else add + line
        out.append(line)
    return out


def _trim_blank(replace: list[str], search: list[str]) -> list[str]:
    """At the blank-line level: drop as many blank lines from the ends of the REPLACE lines as
    the SEARCH lines had there (they matched nothing in the file)."""
    lead = next((i for i, line in enumerate(search) if line.strip()), len(search))
    tail = next((i for i, line in enumerate(reversed(search)) if line.strip()), 0)
    while lead and replace and not replace[0].strip():
        replace, lead = replace[1:], lead - 1
    while tail and replace and not replace[-1].strip():
        replace, tail = replace[:-1], tail - 1
    return replace


def locate(text: str, search: str) -> tuple[str, list[Match]]:
    """(the level name, its matches) for the first level that matches `search` in `text`;
    ('', []) when none does."""
    lines, want = text.split("\n"), search.removesuffix("\n").split("\n")
    for level, name in enumerate(LEVELS):
        found = _fuzzy(lines, want) if name == "fuzzy" else _find(lines, want, level)
        if found:
            return name, found
    return "", []


def apply_one(text: str, edit: Edit) -> tuple[str | None, str, str]:
    """(the new text, the level it matched at, '') or (None, '', why not) for one pair."""
    newline = "\r\n" if "\r\n" in text else "\n"
    body = text.replace("\r\n", "\n")
    if not edit.search.strip():
        if body.strip():
            return None, "", (f"its SEARCH section is empty, but {edit.path} is not: copy the "
                              f"lines to replace into it; the file ends with:\n"
                              + "\n".join(body.rstrip("\n").split("\n")[-5:]))
        return edit.replace.replace("\n", newline), "new", ""
    name, found = locate(body, edit.search)
    if not found:
        near = closest_lines(body, edit.search)
        done = edit.replace.strip() and locate(body, edit.replace)[0] not in ("", "fuzzy")
        also = "\nIts REPLACE lines are already in the file." if done else ""
        return None, "", f"its SEARCH lines are not in {edit.path}; {near}{also}"
    if len(found) > 1:
        at = ", ".join(str(m.start + 1) for m in found[:10])
        how = "are alike to" if name == "fuzzy" else "occur at"
        return None, "", (f"its SEARCH lines {how} {len(found)} places in {edit.path} (lines "
                          f"{at}); copy more lines around the change so they match one place")
    m = found[0]
    lines = body.split("\n")
    search = edit.search.removesuffix("\n").split("\n")
    replace = edit.replace.removesuffix("\n").split("\n") if edit.replace else []
    if name == "blank lines":
        replace = _trim_blank(replace, search)
    new = lines[: m.start] + _reindent(replace, m.indent) + lines[m.end :]
    return "\n".join(new).replace("\n", newline), name, ""


def closest_lines(text: str, search: str) -> str:
    """The file's lines most like `search` (tools/edits.py's, as edit_file reports them)."""
    from tools.edits import closest

    return closest(text, search)


def apply_edits(edits: list[Edit], root: Path, others: Sequence[str] = ()) -> list[FileEdit]:
    """Each file's pairs applied in order to its text (read and confined as edit_file reads:
    tools/edits.py); one FileEdit per file, in the order the reply names them. A SEARCH that
    is not in its file but is in one of `others` (the files attached to the message) is
    reported with that file's name; it is never applied there."""
    from tools._paths import PathError, confine
    from tools.edits import read_existing

    out: dict[str, FileEdit] = {}
    texts: dict[str, str | None] = {}
    before: dict[str, str | None] = {}  # each file's text as the reply found it
    refused: set[str] = set()  # paths that may not be edited: their later pairs are not tried
    for k, edit in enumerate(edits):
        fe = out.setdefault(edit.path, FileEdit(edit.path))
        nth = sum(1 for e in edits[: k + 1] if e.path == edit.path)
        which = f"SEARCH/REPLACE block {nth} for {edit.path}"
        if edit.path in refused:
            continue
        if edit.path not in texts:
            try:
                texts[edit.path] = read_existing(confine(root, edit.path), edit.path)
                before[edit.path] = texts[edit.path]
            except (PathError, OSError) as e:
                refused.add(edit.path)
                fe.problems.append(f"{which} is not applied: {e}")
                continue
        text = texts[edit.path]
        if text is None and edit.search.strip():
            fe.problems.append(f"{which} is not applied: {edit.path} does not exist; to "
                               "create it, leave the SEARCH section empty")
            continue
        new, level, why = apply_one(text or "", edit)
        same = bool(edit.search.strip()) and edit.search == edit.replace
        if new is None or same:
            elsewhere = _found_in(edit, root, others) if "are not in" in why else ""
            if elsewhere:
                why = (f"its SEARCH lines are not in {edit.path} but in {elsewhere}: put "
                       f"{elsewhere} on the line before the code block")
            if same:  # (reported even where it matches: it changes nothing)
                why = "; ".join(filter(None, [why, "its REPLACE lines are its SEARCH lines, so "
                                              "it changes nothing: write in REPLACE the lines "
                                              "as they should be"]))
            fe.problems.append(f"{which} is not applied: {why}")
            continue
        texts[edit.path] = new
        fe.applied.append(level)
    for fe in out.values():
        if fe.applied and texts[fe.path] != before[fe.path]:
            fe.content = texts[fe.path]
        if fe.problems and fe.applied:
            fe.problems.append(f"The other {len(fe.applied)} block(s) for {fe.path} were applied; "
                               "do not send them again.")
    return list(out.values())


def _found_in(edit: Edit, root: Path, others: Sequence[str]) -> str:
    """The one other file of `others` where the SEARCH matches one place short of fuzzy."""
    from tools._paths import PathError, confine
    from tools.edits import read_existing

    found = []
    for path in dict.fromkeys(others):
        if path == edit.path:
            continue
        try:
            text = read_existing(confine(root, path), path)
        except (PathError, OSError):
            continue
        level, matches = locate(text.replace("\r\n", "\n"), edit.search) if text else ("", [])
        if level not in ("", "fuzzy") and len(matches) == 1:
            found.append(path)
    return found[0] if len(found) == 1 else ""


def whole_verdict(block: FileBlock, root: Path, edit_format: str) -> str:
    """judge()'s verdict on a whole-file block (core/wholefile.py) in the "diff" and "auto"
    formats, which take whole files only for new files and ("auto") for files under
    AUTO_LINES lines: a whole block for a longer one is refused, with how to change it."""
    verdict = judge(block, root)
    if verdict == "same" or not _exists(block, root):
        return verdict
    if edit_format == "diff" and verdict == "":
        return (f"the code block for {block.path} is not applied: change an existing file "
                "with SEARCH/REPLACE blocks")
    n = lines_of(block.path, root)
    if edit_format == "auto" and n >= AUTO_LINES and (verdict == "" or "not applied" in verdict):
        return (f"the code block for {block.path} is not applied: the file has {n} lines; "
                f"change a file of {AUTO_LINES} lines or more with SEARCH/REPLACE blocks")
    return verdict


def _exists(block: FileBlock, root: Path) -> bool:
    from tools._paths import PathError, confine

    try:
        return confine(root, block.path).is_file()
    except PathError:
        return False


def lines_of(path: str, root: Path) -> int:
    """The number of lines of a file in the repository (0 when it cannot be read)."""
    from tools._paths import PathError, confine

    try:
        return confine(root, path).read_text(encoding="utf-8").count("\n")
    except (PathError, OSError, UnicodeDecodeError, ValueError):
        return 0


def whole_fixes(edit_format: str, paths: list[str], root: Path) -> bool:
    """Does a failed check's feedback ask for the whole file again? In "whole", yes; in
    "auto", when every edited file is under AUTO_LINES lines."""
    if edit_format == "auto":
        return all(lines_of(p, root) < AUTO_LINES for p in paths)
    return edit_format == "whole"


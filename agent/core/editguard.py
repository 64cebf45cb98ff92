"""What a whole-file write may not do: drop code nobody asked to remove, or leave a file that
does not parse.

Every whole-file write the agent makes (a reply's code block, a `write_file` call) is vetted
here before it reaches the disk (`vet`):
- markup a reply wraps code in and leaves behind (a `</file>` line, a stray fence, `<code>`)
  at the start or end of the text, where the file did not have it, is stripped;
- a Python, JSON or TOML text that does not parse is refused, with the parser's message;
- a Python rewrite that leaves out a top-level name of the file (an import, a constant or
  table, a function, a class) or a class's member is given them back (core/pymerge.py
  `restore`, then the file's own import statements), unless the message names what goes. Where
  they cannot be put back, the write is refused with the names, for the model to see.

What the message means to remove is what it names: a name the person typed (or the request a
reply answers) may go; a generic "clean up" is not a licence to drop the module's data. The
model is told what was kept. `parses` is also the gate every other edit (`edit_file`, a search
and replace) and every commit goes through.
"""

from __future__ import annotations

import ast
import json
import re
import tomllib
from dataclasses import dataclass, field

from .pymerge import restore
from .pynames import defined_names

PY = (".py", ".pyi")
# a line of markup around code, never Python or data by itself
REMNANT = re.compile(r"^\s*(?:</?file\b[^>\n]*>|`{3,}[\w+.-]*|~{3,}[\w+.-]*|</?(?:code|pre)>)\s*$")
# a message that asks for unused imports to go
IMPORTS_GO = re.compile(r"\b(?:remov|delet|drop|clean|prun|unused)\w*\b[^.\n]{0,60}\bimports?\b|"
                        r"\bimports?\b[^.\n]{0,40}\b(?:unused|remov|delet|drop)", re.IGNORECASE)
MAX_LISTED = 6


@dataclass(frozen=True)
class Vetted:
    content: str  # the text to write (remnants stripped, left-out code put back)
    problem: str = ""  # why it is not written ('' to write it)
    kept: tuple[str, ...] = ()  # names put back
    notes: tuple[str, ...] = field(default=())  # what was changed on the way, for the user


def parse_problem(path: str, text: str) -> str:
    """'' where `text` parses as what `path` names (Python, JSON, TOML; other files always
    do), else the parser's message with its line."""
    if path.endswith(PY):
        try:
            compile(text, path, "exec", dont_inherit=True)  # (compiles; runs nothing)
        except SyntaxError as e:
            where = f"line {e.lineno}: " if e.lineno else ""
            return f"{where}{e.msg}"
        except (ValueError, RecursionError, MemoryError) as e:
            return str(e) or type(e).__name__
        return ""
    if path.endswith(".json"):
        try:
            json.loads(text)
        except (ValueError, RecursionError) as e:
            return str(e)
        return ""
    if path.endswith(".toml"):
        try:
            tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError) as e:
            return str(e)
    return ""


def strip_remnants(new: str, old: str | None) -> str:
    """`new` without markup lines at its start and end (`</file>`, a fence, `<code>`) that the
    file `old` does not have there; `new` itself where it has none."""
    lines = new.split("\n")
    old_lines = set((old or "").split("\n"))

    def remnant(line: str) -> bool:
        return bool(REMNANT.match(line)) and line not in old_lines

    end, cut = len(lines), False
    while end and (not lines[end - 1].strip() or remnant(lines[end - 1])):
        cut = cut or remnant(lines[end - 1])
        end -= 1
    if not cut:
        end = len(lines)
    start = 0
    while start < end and remnant(lines[start]):
        start += 1
    if start == 0 and end == len(lines):
        return new
    body = lines[start:end]
    if not any(line.strip() for line in body):
        return new
    trail = "\n" if end < len(lines) and (new.endswith("\n") or (old or "").endswith("\n")) else ""
    return "\n".join(body) + trail


def _shape(tree: ast.Module) -> set[str] | None:
    """The module's top-level names and its classes' members (`Class.name`); None where they
    cannot be known (a star import, a module `__getattr__`)."""
    names = defined_names(tree)
    if names is None:
        return None

    def members(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                inner = f"{prefix}{node.name}."
                for s in node.body:
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        names.add(inner + s.name)
                    elif isinstance(s, (ast.Assign, ast.AnnAssign)):
                        targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                        names.update(inner + t.id for t in targets if isinstance(t, ast.Name))
                members(node.body, inner)

    members(tree.body, "")
    return names


def _tree(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def left_out(old: str, new: str) -> list[str]:
    """The names `old` defines (top level, class members) that `new` does not, in `old`'s
    order; [] where either does not parse or its names cannot be known."""
    a, b = _tree(old), _tree(new)
    if a is None or b is None:
        return []
    had, has = _shape(a), _shape(b)
    if had is None or has is None:
        return []
    gone = had - has
    # a member of a class that is gone entirely is reported as the class
    gone = {n for n in gone if "." not in n or n.rsplit(".", 1)[0] not in gone}
    order: dict[str, int] = {}
    for i, word in enumerate(re.findall(r"\w+", old)):
        order.setdefault(word, i)
    return sorted(gone, key=lambda n: (order.get(n.split(".")[0], 1 << 30), n))


# words before a plain name that say it is to go (or become something else)
GOES = re.compile(r"\b(?:remov|delet|drop|renam|replac|get rid|eliminat|merg|inlin|mov|split|"
                  r"extract|consolidat|deprecat|unused|dead|instead of|without)", re.IGNORECASE)


# words after a name that say it goes: "GERMAN is unused", "add and sub can go"
GOES_AFTER = re.compile(
    r"^(?:[^.;:!?]|\.(?=\S)){0,40}?\b(?:is|are|was|were|(?:can|should|could|may|must|will)"
    r"(?:\s+be)?)\s+(?:now\s+)?(?:unused|dead|obsolete|redundant|not\s+(?:used|needed)|go|removed|"
    r"deleted|dropped|deprecated|replaced|renamed|merged|inlined|moved)\b", re.IGNORECASE)
NOT_GOES = re.compile(r"\b(?:not|never|n't|keep|leave)\s+(?:\w+\s+)?$", re.IGNORECASE)


def _goes(text: str) -> bool:
    """Does `text` say something goes ("remove", "is unused"), not negated ("do not remove")?"""
    return any(not NOT_GOES.search(text[:m.start()]) for m in GOES.finditer(text))


def _named(name: str, intent: str) -> bool:
    """Does `intent` name `name` (or, for a member, its own name) in a sentence that says it
    goes: "remove add and sub", "GERMAN is unused", "drop Table.put", not "do not remove
    GERMAN"? A name only mentioned ("what does STOPWORDS hold?", "add mul to calc.py") may not
    go."""
    last = name.rsplit(".", 1)[-1]
    for m in re.finditer(rf"(?<!\w){re.escape(last)}(?!\w)", intent):
        before = re.split(r"[.!?]\s|\n", intent[:m.start()])[-1]  # ("Table." ends no sentence)
        after = re.split(r"[.!?](?:\s|$)|\n", intent[m.end():])[0]
        if _goes(before[-120:]) or GOES_AFTER.search(after):
            return True
    return False


def _imported(tree: ast.Module) -> dict[str, ast.stmt]:
    """{name: the top-level import statement that binds it}."""
    out: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = node
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                out[a.asname or a.name] = node
    return out


def _used(name: str, text: str) -> bool:
    tree = _tree(text)
    return tree is not None and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(tree))


def _put_imports_back(old: str, new: str, names: list[str]) -> str:
    """`new` with the file's own import statements for `names` added after its last top-level
    import (or its docstring, or at its top)."""
    was, now = _tree(old), _tree(new)
    if was is None or now is None:
        return new
    binds = _imported(was)
    stmts = list(dict.fromkeys(binds[n] for n in names if n in binds))
    if not stmts:
        return new
    old_lines = old.split("\n")
    block = [line for s in stmts for line in old_lines[s.lineno - 1:s.end_lineno or s.lineno]]
    at = 0  # the end of the leading run of imports (and the docstring)
    for i, node in enumerate(now.body):
        doc = (i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
               and isinstance(node.value.value, str))
        if not (doc or isinstance(node, (ast.Import, ast.ImportFrom))):
            break
        at = node.end_lineno or node.lineno
    lines = new.split("\n")
    if at == 0:  # after leading comments (a shebang, an encoding cookie)
        while at < len(lines) and lines[at].startswith("#"):
            at += 1
    return "\n".join(lines[:at] + block + lines[at:])


def vet(path: str, old: str | None, new: str, intent: str) -> Vetted:
    """The text to write for a whole-file write of `path` (`old`: its text now, None for a new
    file), or why it is refused. `intent`: what the person asked (what the write may remove)."""
    notes: list[str] = []
    cleaned = strip_remnants(new, old)
    if cleaned != new:
        notes.append(f"removed markup lines around the code for {path}")
    problem = parse_problem(path, cleaned)
    if problem:
        return Vetted(cleaned, f"the code for {path} does not parse ({problem}): not applied; "
                      "the file is as it was", notes=tuple(notes))
    if old is None or not path.endswith(PY) or _tree(old) is None:
        return Vetted(cleaned, notes=tuple(notes))
    gone = left_out(old, cleaned)
    spare = {n for n in gone if _named(n, intent)}
    if IMPORTS_GO.search(intent):
        imports = _imported(_tree(old))  # type: ignore[arg-type]
        spare |= {n for n in gone if n in imports and not _used(n, cleaned)}
    out = cleaned
    back = restore(old, out, frozenset(n.rsplit(".", 1)[-1] for n in spare))
    kept: list[str] = []
    if back is not None:
        out, kept = back[0], list(back[1])
    missing = [n for n in left_out(old, out) if n not in spare]
    if missing:
        out = _put_imports_back(old, out, missing)
        kept += [n for n in missing if n not in left_out(old, out)]
    missing = [n for n in left_out(old, out) if n not in spare]
    if missing or parse_problem(path, out):
        listed = ", ".join(missing[:MAX_LISTED]) + (", ..." if len(missing) > MAX_LISTED else "")
        return Vetted(cleaned, f"the code for {path} leaves out {listed or 'part'} of the file, "
                      "which the message does not ask to remove: not applied (write the whole "
                      "file, keeping what the change does not touch)", notes=tuple(notes))
    return Vetted(out, kept=tuple(dict.fromkeys(kept)), notes=tuple(notes))


def same_code(path: str, old: str, new: str) -> bool:
    """Whether a Python file's `new` text is `old` but for blank lines and comments (the same
    syntax tree, docstrings included)."""
    if not path.endswith(".py") or old == new:
        return old == new
    import ast

    try:
        return ast.dump(ast.parse(old)) == ast.dump(ast.parse(new))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False

"""What a message asks for that the files can be checked for once a reply has edited them.

A small model often writes a file back with the asked-for change missing (the class still
without its docstring, the flag never added, the test function not written) and ends the
message as if it were done. `asks` reads the few requests whose result is visible in the
code, sentence by sentence, from what the person typed:
- a new name: "add a parameter greeting", "a test function test_shout", "a --shout flag",
  "rename area to rect_area": a name the repository did not contain when the message came
  (`new_names`) must be in a file the message's replies wrote;
- a docstring: "add a docstring to the class Counter" (or to every function of a file);
- type hints: "add type hints to join_words": its parameters (not self/cls) and its return;
- a removal: "remove the unused function _old_format" (no longer defined), "remove the unused
  imports from app.py" (nothing imported that the module does not use).
`unmet` says which of them the files do not show. A sentence that is a question, asks for an
explanation, or says not to change files asks for nothing here. Nothing runs: files are read
and parsed.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re
from dataclasses import dataclass
from pathlib import Path

from .attach import NOT_NAMES
from .testcmd import sentences

MAX_FILE_BYTES = 1 << 20
MAX_SCANNED_FILES, MAX_SCANNED_BYTES = 2000, 32 << 20

# A sentence that asks for something to be added, written or renamed.
_ADD = re.compile(r"\b(?:add|adds|adding|create|introduce|implement|write|define|support|"
                  r"accept|expose|insert|include|rename|renaming|new)\b", re.I)
_REMOVE = re.compile(r"\b(?:remove|delete|drop|get rid of|strip out)\b", re.I)
# Sentences that ask for no change, or for words rather than code.
_NO_EDIT = re.compile(r"\b(?:(?:do not|don't|dont|never|without) (?:chang|edit|modif|touch|writ)"
                      r"\w*(?! (?:anything|something|everything) else| the rest| other)"
                      r"|just explain|only explain|explain only)", re.I)
_WORDS_ONLY = re.compile(r"^\s*(?:please\s+)?(?:explain|describe|tell|show me how|how|why|what|"
                         r"which|where|when|who|should|could|would|can|is|are|does|do)\b", re.I)
_NEGATED = re.compile(r"(?:\bnot|n't|\bnever|\bno|\bwithout)\W+(?:\w+\W+){0,2}$", re.I)
# "a function called load", "the parameter `times`", "a test function test_shout".
_KINDS = (r"(functions?|methods?|class(?:es)?|variables?|constants?|attributes?|fields?|"
          r"parameters?|params?|arguments?|propert(?:y|ies)|fixtures?|options?|flags?|keys?|"
          r"settings?|subcommands?)")
_KIND = re.compile(_KINDS + r"\s+(?:(?:called|named)\s+)?(?:`([^`\s]+)`|[\"']([A-Za-z_][\w-]*)[\"']|"
                   r"([A-Za-z_]\w*))(?![\w(]|\.\w)", re.I)
# A plain lowercase word is a name only right after the verb: "add a parameter greeting",
# "create a new method called reset" (prose says "the methods outlined above").
_VERB_KIND = re.compile(_ADD.pattern + r"\s+(?:(?:a|an|the|one|new|optional|test|keyword|boolean|"
                        r"integer|string|command-line|cli|second|third|extra|another)\s+){0,3}"
                        + _KINDS + r"\s+(?:(?:called|named)\s+)?([A-Za-z_]\w*)(?![\w(]|\.\w)", re.I)
_PLURAL = {"functions", "methods", "classes", "variables", "constants", "attributes", "fields",
           "parameters", "params", "arguments", "properties", "fixtures", "options", "flags",
           "keys", "settings", "subcommands"}
_SINGULAR = {"classes": "class", "properties": "property", "params": "parameter",
             "param": "parameter", "class": "class"}
_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")
_RENAME = re.compile(r"\brenam\w*\s+(?:the\s+)?(?:\w+\s+)?`?([A-Za-z_]\w*)`?\s+(?:to|as|into)\s+"
                     r"(?:`([A-Za-z_]\w*)`|([A-Za-z_]\w*))", re.I)
_DOCSTRING = re.compile(r"\bdocstrings?\b", re.I)
_HINTS = re.compile(r"\b(?:type[- ]?hints?|type annotations?|annotations?|annotate)\b", re.I)
_ALL = re.compile(r"\b(?:all|every|each)\b", re.I)
_UNUSED_IMPORTS = re.compile(r"\bunused imports?\b|\bimports? (?:that|which) (?:are|is) "
                             r"(?:not|never) used\b", re.I)
_REMOVED_KIND = re.compile(r"\b(?:functions?|methods?|class(?:es)?|variables?|constants?|"
                           r"imports?)\s+(?:(?:called|named)\s+)?`?([A-Za-z_]\w*)`?(?![\w(]|\.\w)",
                           re.I)
_IDENT = re.compile(r"`([A-Za-z_]\w*)`|(?<![\w.])([A-Za-z_]\w*)(?!\w|\.\w)")
_FILE = re.compile(r"(?<![\w/.-])([\w./-]+\.[A-Za-z0-9]{1,5})\b")
_NOT_ASKED = NOT_NAMES | {"docstring", "docstrings", "type", "hint", "hints", "default", "value",
                          "values", "flag", "option", "test", "tests", "file", "module",
                          "code", "line", "lines", "them", "called", "named"}


@dataclass(frozen=True)
class Ask:
    kind: str  # name | docstring | hints | gone | unused_imports
    name: str  # the code name or flag ('' for unused_imports and "every ..." asks)
    said: str  # how the message put it, for the feedback ("a parameter `greeting`")
    files: tuple[str, ...] = ()  # files the sentence names


def asks(text: str) -> list[Ask]:
    """The checkable requests of `text` (what a person typed), in order, without repeats."""
    out: list[Ask] = []
    for s in sentences(text):
        if not s.strip() or s.rstrip().endswith("?") or _NO_EDIT.search(s) or _WORDS_ONLY.match(s):
            continue
        files = tuple(dict.fromkeys(m.group(1).removeprefix("./") for m in _FILE.finditer(s)))
        add, remove = _ADD.search(s), _REMOVE.search(s)
        if add and not _NEGATED.search(s[:add.start()]):
            out += _added(s, files)
        if remove and not _NEGATED.search(s[:remove.start()]):
            out += _removed(s, files, remove.end())
    return list(dict.fromkeys(out))


def _shaped(name: str) -> bool:
    """Shaped like a code name: snake_case, mixedCase, CONSTANT_CASE or with digits."""
    inner = name.strip("_")
    return ("_" in inner or any(c.isdigit() for c in inner)
            or (any(c.isupper() for c in inner[1:]) and any(c.islower() for c in inner))
            or (inner.isupper() and len(inner) >= 2))


def _word(name: str) -> bool:
    return (len(name) >= 2 and name.lower() not in _NOT_ASKED and not keyword.iskeyword(name)
            and not hasattr(builtins, name))


def _added(s: str, files: tuple[str, ...]) -> list[Ask]:
    out: list[Ask] = []
    renamed_from = {m.group(1) for m in _RENAME.finditer(s)}
    if _DOCSTRING.search(s):
        out += _per_definition("docstring", s, files)
    elif _HINTS.search(s):
        out += _per_definition("hints", s, files)
    else:
        after_verb = {m.start(1) for m in _VERB_KIND.finditer(s)}
        for m in _KIND.finditer(s):
            name = m.group(2) or m.group(3) or m.group(4)
            word = m.group(1).lower()
            kind = _SINGULAR.get(word, word[:-1] if word in _PLURAL else word)
            if _NEGATED.search(s[:m.start()]):
                continue
            if name.startswith("--"):
                out.append(Ask("name", name, f"the flag `{name}`", files))
                continue
            plain = m.group(4) is not None and not _shaped(name)
            if (_word(name) and name not in renamed_from and re.fullmatch(r"[A-Za-z_]\w*", name)
                    and (not plain or (m.start(1) in after_verb and word not in _PLURAL))):
                out.append(Ask("name", name, f"a {kind} `{name}`", files))
        for m in _FLAG.finditer(s):
            if not _NEGATED.search(s[:m.start()]):
                out.append(Ask("name", m.group(1), f"the flag `{m.group(1)}`", files))
    for m in _RENAME.finditer(s):
        new = m.group(2) or m.group(3)
        if _word(new):
            out.append(Ask("name", new, f"the new name `{new}`", files))
    return out


def _per_definition(kind: str, s: str, files: tuple[str, ...]) -> list[Ask]:
    """A docstring or hints ask for each code name of the sentence (which of them are
    definitions is known only from the files), or for every definition ("all functions")."""
    if _ALL.search(s):
        return [Ask(kind, "", "every definition", files)]
    names = [m.group(1) or m.group(2) for m in _IDENT.finditer(s)]
    return [Ask(kind, n, f"`{n}`", files) for n in dict.fromkeys(names) if _word(n)]


def _removed(s: str, files: tuple[str, ...], at: int) -> list[Ask]:
    out: list[Ask] = []
    rest = s[at:]
    if _UNUSED_IMPORTS.search(rest):
        out.append(Ask("unused_imports", "", "the unused imports", files))
    for m in _REMOVED_KIND.finditer(rest):
        if _word(m.group(1)):
            out.append(Ask("gone", m.group(1), f"`{m.group(1)}`", files))
    return out


def new_names(found: list[Ask], root: Path, files: list[str]) -> list[Ask]:
    """`found` without the name asks whose name one of the repository's `files` already
    contains (a rename's old name, a function the message only mentions); all name asks are
    dropped where the files are too many to read."""
    wanted = {a.name for a in found if a.kind == "name"}
    if not wanted:
        return found
    present: set[str] = set()
    pattern = re.compile("|".join(rf"(?<![\w-]){re.escape(n)}(?![\w-])"
                                  for n in sorted(wanted, key=len, reverse=True)))
    total = 0
    for i, path in enumerate(files):
        if i >= MAX_SCANNED_FILES or total >= MAX_SCANNED_BYTES:
            return [a for a in found if a.kind != "name"]
        text = _read(root / path)
        if text is None:
            continue
        total += len(text)
        present.update(pattern.findall(text))
        if present >= wanted:
            break
    return [a for a in found if a.kind != "name" or a.name not in present]


def _read(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            return None
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None


def unmet(found: list[Ask], root: Path, written: list[str], candidates: list[str]) -> list[str]:
    """One line per ask the files do not show. `written`: the files the message's replies
    wrote (a new name must be in one of them); `candidates`: where definitions asked about
    may be (written files first, then those the message attached or named)."""
    lines: list[str] = []
    texts = {p: t for p in dict.fromkeys(written + candidates) if (t := _read(root / p)) is not None}
    trees = {p: t for p in texts if p.endswith(".py") and (t := _parse(texts[p])) is not None}
    for a in found:
        where = [p for p in (a.files or ()) if p in texts] or list(texts)
        if a.kind == "name":
            pattern = re.compile(rf"(?<![\w-]){re.escape(a.name)}(?![\w-])")
            pool = [p for p in written if p in texts]
            if not any(pattern.search(texts[p]) for p in pool):
                shown = ", ".join(pool) if pool else "no file was changed"
                lines.append(f"{shown}: no `{a.name}` (the message asks for {a.said})")
        elif a.kind in ("docstring", "hints"):
            lines += _definitions_lack(a, {p: trees[p] for p in where if p in trees})
        elif a.kind == "gone":
            for p in where:
                if p in trees and (at := _defines(trees[p], a.name)):
                    lines.append(f"{p}:{at}: `{a.name}` is still there (the message asks to "
                                 "remove it)")
        elif a.kind == "unused_imports":
            for p in where:
                if p in trees and not p.endswith("__init__.py"):
                    lines += [f"{p}:{no}: `{n}` is imported and never used"
                              for n, no in _unused_imports(trees[p])]
    return list(dict.fromkeys(lines))


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _definitions(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """(name, node) of the module's functions and classes and their methods, in order."""
    out: list[tuple[str, ast.AST]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((node.name, node))
            if isinstance(node, ast.ClassDef):
                out += [(c.name, c) for c in node.body
                        if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return out


def _definitions_lack(a: Ask, trees: dict[str, ast.Module]) -> list[str]:
    lines = []
    for p, tree in trees.items():
        for name, node in _definitions(tree):
            if a.name and name != a.name:
                continue
            if not a.name and (name.startswith("_") and not name.startswith("__")):
                continue  # "every function": the public ones
            if a.kind == "docstring" and ast.get_docstring(node) is None:
                lines.append(f"{p}:{node.lineno}: `{name}` has no docstring")
            elif a.kind == "hints" and not isinstance(node, ast.ClassDef):
                bare = _unannotated(node)
                if bare:
                    lines.append(f"{p}:{node.lineno}: `{name}` has no type hint for {bare}")
    return lines


def _unannotated(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    args = fn.args
    params = [*args.posonlyargs, *args.args]
    if params and params[0].arg in ("self", "cls"):
        params = params[1:]
    params += [*args.kwonlyargs, *(x for x in (args.vararg, args.kwarg) if x is not None)]
    bare = [p.arg for p in params if p.annotation is None]
    if fn.returns is None and fn.name != "__init__":
        bare.append("its return value")
    return ", ".join(bare)


def _defines(tree: ast.Module, name: str) -> int:
    """The line where the module defines, assigns or imports `name` at its top level or in a
    class body (0: nowhere)."""
    bodies = [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]
    for body in bodies:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and node.name == name:
                return node.lineno
            if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                    (al.asname or al.name.split(".")[0]) == name for al in node.names):
                return node.lineno
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    return node.lineno
    return 0


def _unused_imports(tree: ast.Module) -> list[tuple[str, int]]:
    """(name, line) of each top-level import the module never uses (none where it sets
    `__all__` or imports with `*`; `from __future__` aside)."""
    imported: list[tuple[str, int]] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for al in node.names:
                if al.name == "*":
                    return []
                imported.append((al.asname or al.name.split(".")[0], node.lineno))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and any(
                isinstance(t, ast.Name) and t.id == "__all__"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
            return []
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    # names used only inside string annotations or docstrings are not looked for
    return [(n, no) for n, no in imported if n not in used]

"""Splicing a Python fragment into the file it was written for.

Asked for a whole file, a small model often writes only the definitions it changed: one
function or class of a module that has several. Written as the file, such a block would drop
the rest, so the whole-file format refuses it (core/wholefile.py) and the model is asked again,
where it mostly writes the same fragment. `splice` takes it for what it is instead, where it
is unambiguous:

- both texts parse, and every top-level statement of the fragment is an import, a function,
  a class or an assignment to plain names (a module docstring is dropped: the file keeps its
  own); anything else (a call, a loop, an `if __name__ == ...` block) means it is not a set
  of definitions, and nothing is spliced;
- it redefines at least one function or class the file defines, and each name it defines is
  defined once in each text;
- each definition it shares with the file replaces the file's (from its decorators to its
  last line), in place; a class it shares is spliced the same way, member by member (its
  header and docstring are the fragment's, the methods it leaves out stay), since a fragment
  of a class is as common as a fragment of a module; a definition the file lacks goes after
  the last statement of its body, an import the file lacks after the file's last top-level
  import (or its docstring);
- the result parses and differs from the file.

Comments outside the fragment's definitions are not carried over. The result is written as a
whole-file block would be (approvals, snapshot, commit).
"""

from __future__ import annotations

import ast

DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _names(node: ast.stmt) -> list[str] | None:
    """The names a top-level statement defines, [] for an import, None for anything else."""
    if isinstance(node, DEFS):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return []
    targets = node.targets if isinstance(node, ast.Assign) else (
        [node.target] if isinstance(node, ast.AnnAssign) else None)
    if targets is None:
        return None
    out = []
    for t in targets:
        elts = t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]
        if not all(isinstance(e, ast.Name) for e in elts):
            return None
        out += [e.id for e in elts]
    return out


def _is_docstring(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


def _span(node: ast.stmt) -> tuple[int, int]:
    """0-based first line (its decorators included) and end line (exclusive) of a statement."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return first - 1, node.end_lineno or node.lineno


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


class _NotASplice(Exception):
    pass


def _first(node: ast.stmt) -> int:
    return _span(node)[0]


def _defined(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    out: dict[str, ast.stmt] = {}
    for node in body:
        for name in _names(node) or []:
            if name in out:
                raise _NotASplice  # defined twice: which one the fragment means is not known
            out[name] = node
    return out


Edit = tuple[int, int, int, list[str]]  # old lines [a, b) become the lines; the depth orders ties


def _body(old: list[ast.stmt], new: list[ast.stmt], lines: list[str], depth: int,
          out: list[Edit]) -> bool:
    """Append the edits that splice the statements `new` (of the fragment, `lines`) into the
    body `old` (a module's or a class's); True where a function or class was revised."""
    have, revises, named = _defined(old), False, set()
    if new and _is_docstring(new[0]):
        doc, new = new[0], new[1:]
        if depth:  # a class's docstring replaces the file's; the module keeps its own
            text = lines[_first(doc):_span(doc)[1]]
            at = _span(old[0]) if old and _is_docstring(old[0]) else (_first(old[0]),) * 2
            out.append((*at, depth, text))
    adds, imports = [], []
    for node in new:
        names = _names(node)
        if names is None or named & set(names) or (depth and not names):
            raise _NotASplice  # a statement, a name twice, an import inside a class
        named.update(names)
        a, b = _span(node)
        if not names:
            imports.append(ast.unparse(node))
            continue
        hits = list({id(have[n]): have[n] for n in names if n in have}.values())
        if not hits:
            adds.append(lines[a:b])
        elif len(hits) == 1 and set(_names(hits[0]) or []) == set(names):
            was = hits[0]
            if isinstance(node, ast.ClassDef) and isinstance(was, ast.ClassDef):
                if node.body[0].lineno == node.lineno or was.body[0].lineno == was.lineno:
                    raise _NotASplice  # a class on one line
                out.append((_first(was), _first(was.body[0]), depth,
                            lines[a:_first(node.body[0])]))  # its header: decorators, bases
                _body(was.body, node.body, lines, depth + 1, out)
            else:
                out.append((*_span(was), depth, lines[a:b]))
            revises = revises or (isinstance(node, DEFS) and isinstance(was, DEFS))
        else:
            raise _NotASplice  # `a, b = ...` over two statements of the file, or the reverse
    if adds:
        end = max(_span(n)[1] for n in old)
        gap = [""] * (1 if depth else 2)
        out.append((end, end, depth, [line for text in adds for line in gap + text]))
    heads = [n for n in old if isinstance(n, (ast.Import, ast.ImportFrom))]
    imports = [i for i in dict.fromkeys(imports) if i not in {ast.unparse(n) for n in heads}]
    if imports:
        if heads:
            at = _span(heads[-1])[1]
        else:
            at = _span(old[0])[1] if old and _is_docstring(old[0]) else 0
        out.append((at, at, depth, imports + ([] if heads else [""])))
    return revises


def splice(old: str, fragment: str) -> str | None:
    """`old` with the fragment's definitions spliced in (see the module's docstring), or None
    where the fragment is not a set of definitions revising the file's."""
    old_tree, new_tree = _parse(old), _parse(fragment)
    if old_tree is None or new_tree is None or not new_tree.body or not old_tree.body:
        return None
    edits: list[Edit] = []
    try:
        if not _body(old_tree.body, new_tree.body, fragment.split("\n"), 0, edits):
            return None
    except _NotASplice:
        return None
    lines = old.split("\n")
    # from the bottom up; at one place the outer insertion first, so the inner one ends above it
    for a, b, _, new in sorted(edits, key=lambda e: (e[0], e[1], -e[2]), reverse=True):
        lines[a:b] = new
    out = "\n".join(lines)
    if out.rstrip("\n") == old.rstrip("\n") or _parse(out) is None:
        return None
    return out


def _kept(old: list[ast.stmt], new: list[ast.stmt], old_lines: list[str], depth: int,
          out: list[Edit], kept: list[str]) -> None:
    """Append the edits (in the new text's lines) that put back the definitions of the body
    `old` that the body `new` leaves out, each after the nearest one before it that `new`
    has (or before the nearest after it, or before `new`'s first definition); classes in
    both, member by member."""
    from .pynames import defined_names

    has = defined_names(ast.Module(body=new, type_ignores=[]))
    if has is None:
        raise _NotASplice
    where = _defined(new)
    gap = [""] * (1 if depth else 2)
    anchor: tuple[int, bool] | None = None  # (a line of the new text, insert after it)
    pending: list[list[str]] = []  # dropped definitions before the first anchor
    for node in old:
        names = _names(node)
        if not names:  # an import or a statement
            continue
        if not any(n in has for n in names):
            text = old_lines[_first(node):_span(node)[1]]
            kept.extend(names)
            if anchor is None:
                pending.append(text)
            else:
                out.append((anchor[0], anchor[0], depth, gap + text))
            continue
        twin = where.get(names[0])
        if twin is None:
            continue
        if pending:  # before the first definition both have
            at = _first(twin)
            out.append((at, at, depth, [line for t in pending for line in t + gap]))
            pending = []
        if isinstance(node, ast.ClassDef) and isinstance(twin, ast.ClassDef):
            _kept(node.body, twin.body, old_lines, depth + 1, out, kept)
        anchor = (_span(twin)[1], True)
    if pending:  # `new` has none of `old`'s definitions: before its first, or at its end
        first = next((n for n in new if _names(n)), None)
        if first is not None:
            at = _first(first)
            out.append((at, at, depth, [line for t in pending for line in t + gap]))
        else:
            end = max((_span(n)[1] for n in new), default=0)
            out.append((end, end, depth, [line for t in pending for line in gap + t]))


def restore(old: str, new: str) -> tuple[str, list[str]] | None:
    """`new` (a rewrite of the file `old`) with the functions, classes, methods and plain
    assignments of `old` it leaves out put back, and their names; None where it leaves none
    out, where either text does not parse, or where the result would not."""
    old_tree, new_tree = _parse(old), _parse(new)
    if old_tree is None or new_tree is None or not new_tree.body:
        return None
    edits: list[Edit] = []
    kept: list[str] = []
    try:
        _kept(old_tree.body, new_tree.body, old.split("\n"), 0, edits, kept)
    except _NotASplice:
        return None
    if not kept:
        return None
    lines = new.split("\n")
    for a, b, _, text in sorted(edits, key=lambda e: (e[0], e[1], -e[2]), reverse=True):
        lines[a:b] = text
    out = "\n".join(lines)
    return None if _parse(out) is None else (out, kept)

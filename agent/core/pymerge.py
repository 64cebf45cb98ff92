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
  last line), in place; a definition the file lacks goes after the file's last statement,
  an import the file lacks after the file's last top-level import (or its docstring);
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


def splice(old: str, fragment: str) -> str | None:
    """`old` with the fragment's definitions spliced in (see the module's docstring), or None
    where the fragment is not a set of definitions revising the file's."""
    old_tree, new_tree = _parse(old), _parse(fragment)
    if old_tree is None or new_tree is None or not new_tree.body:
        return None
    old_defs: dict[str, ast.stmt] = {}
    seen: set[str] = set()
    for node in old_tree.body:
        for name in _names(node) or []:
            if name in seen:
                return None  # defined twice: which one the fragment means is not known
            seen.add(name)
            old_defs[name] = node
    body = new_tree.body[1:] if _is_docstring(new_tree.body[0]) else new_tree.body
    new_lines = fragment.split("\n")
    replace: list[tuple[ast.stmt, str]] = []  # (the file's statement, its new text)
    add_imports, add_defs, named, revises = [], [], set(), False
    for node in body:
        names = _names(node)
        if names is None or named & set(names):
            return None
        named.update(names)
        a, b = _span(node)
        text = "\n".join(new_lines[a:b])
        if not names:
            add_imports.append(ast.unparse(node))
            continue
        hits = list({id(old_defs[n]): old_defs[n] for n in names if n in old_defs}.values())
        if not hits:
            add_defs.append(text)
        elif len(hits) == 1 and set(_names(hits[0]) or []) == set(names):
            replace.append((hits[0], text))
            revises = revises or (isinstance(node, DEFS) and isinstance(hits[0], DEFS))
        else:
            return None  # `a, b = ...` over two statements of the file, or the reverse
    if not revises:
        return None
    lines = old.split("\n")
    heads = [n for n in old_tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    imports = [i for i in dict.fromkeys(add_imports) if i not in {ast.unparse(n) for n in heads}]
    edits = [(*_span(node), text.split("\n")) for node, text in replace]
    if add_defs:
        end = max((_span(n)[1] for n in old_tree.body), default=0)
        block = []
        for text in add_defs:
            block += ["", ""] + text.split("\n")
        edits.append((end, end, block))
    if imports:
        if heads:
            at = _span(heads[-1])[1]
        elif old_tree.body and _is_docstring(old_tree.body[0]):
            at = _span(old_tree.body[0])[1]
        else:
            at = 0
        edits.append((at, at, imports + ([""] if not heads else [])))
    for a, b, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        lines[a:b] = new
    out = "\n".join(lines)
    if out.rstrip("\n") == old.rstrip("\n") or _parse(out) is None:
        return None
    return out

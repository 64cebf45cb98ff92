"""Keeping a Python file whole when a model writes only part of it.

Asked for a whole file, a small model often writes only the definitions it changed (one
function or class of a module that has several), or rewrites the file and leaves out the
functions it did not touch, or marks them `...` / `# ... existing code ...`. Written as the
file, each would drop code nobody asked to drop. Two operations keep it, where the texts say
unambiguously what was meant:

`splice(old, fragment)`: a fragment (where the whole-file format would refuse a snippet) made
only of definitions: every top-level statement an import, a function, a class or an
assignment to plain names (a module docstring is dropped: the file keeps its own); anything
else (a call, a loop, an `if __name__ == ...` block) means it is not a set of definitions.
It must redefine at least one function or class of the file. Each definition it shares with
the file replaces the file's, in place (the file's decorators stay where the fragment gives
none); a class it shares is spliced the same way, member by member (the methods it leaves
out stay; its header is the fragment's where that names bases or decorators); a definition
the file lacks goes before the file's copy of the next shared definition in the fragment's
order (so it is defined before what uses it), or after the previous one; an import the file
lacks after the file's last top-level import (after its docstring or leading comments where
it has none). A shared function whose new body is only a placeholder (`pass`, `...`, a
docstring, or a comment saying code was left out) where the file's was not means nothing is
spliced.

`restore(old, new)`: a rewrite that leaves out some of the file's functions, classes,
methods or assignments to plain names, or writes a placeholder where the file had a body,
gets the file's versions back, each after the nearest definition before it that the rewrite
has (or before the nearest after it). Whether to call it (the message may want definitions
gone) is the caller's decision (core/wholefile.py).

Both refuse (None) where either text does not parse, where a name is defined twice in one
body, where two statements share a line (`a = 1; b = 2`), and unless the result compiles and
has exactly the definitions of both texts in each body (a method pasted at another indent
would land inside the one before it). Comments outside definitions are not carried over.
"""

from __future__ import annotations

import ast
import itertools
import re

DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
# a comment line standing for code left out: "# ... existing code ...", "# rest unchanged"
LEFT_OUT = re.compile(r"^\s*#.*(?:\.\.\.|\b(?:existing|unchanged|rest of|as before|omitted)\b)",
                      re.IGNORECASE)
Edit = tuple[int, int, int, list[str]]  # lines [a, b) become the lines; the depth orders ties


class _NotASplice(Exception):
    pass


def _names(node: ast.stmt) -> list[str] | None:
    """The names a statement of a body defines, [] for an import, None for anything else."""
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


def _first(node: ast.stmt) -> int:
    """0-based first line of a statement, its decorators included."""
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1


def _span(node: ast.stmt) -> tuple[int, int]:
    """0-based first line (decorators included) and end line (exclusive) of a statement."""
    return _first(node), node.end_lineno or node.lineno


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _compiles(tree: ast.Module) -> bool:
    try:
        compile(tree, "<spliced>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _lines_apart(*bodies: list[ast.stmt]) -> None:
    """Raise where two statements of a body share a line (`a = 1; b = 2`)."""
    for body in bodies:
        for a, b in itertools.pairwise(body):
            if (a.end_lineno or a.lineno) >= _first(b) + 1:
                raise _NotASplice


def _members(node: ast.ClassDef, was: ast.ClassDef) -> None:
    """Raise unless both classes have their bodies on lines of their own."""
    if node.body[0].lineno == node.lineno or was.body[0].lineno == was.lineno:
        raise _NotASplice  # a class on one line


def _defined(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    out: dict[str, ast.stmt] = {}
    for node in body:
        for name in _names(node) or []:
            if name in out:
                raise _NotASplice  # defined twice: which one a fragment means is not known
            out[name] = node
    return out


def _shape(body: list[ast.stmt], path: tuple[str, ...] = (), out=None) -> dict:
    """{class path: the names its body defines} for the module and every class in it."""
    out = {} if out is None else out
    names = out.setdefault(path, set())
    for node in body:
        names.update(_names(node) or [])
        if isinstance(node, ast.ClassDef):
            _shape(node.body, (*path, node.name), out)
    return out


def _same_shape(out: str, *texts: ast.Module, spare: frozenset[str] = frozenset()) -> bool:
    """Does `out` compile and define, in each body, exactly what the texts define there (but
    the `spare` names the last text does not define)?"""
    tree = _parse(out)
    if tree is None or not _compiles(tree):
        return False
    want: dict = {}
    for t in texts:
        for path, names in _shape(t.body).items():
            want.setdefault(path, set()).update(names)
    last = _shape(texts[-1].body)
    for path in [p for p in want if any(n in spare for n in p) and p not in last]:
        del want[path]  # a class left out on purpose, and its members
    for path, names in want.items():
        names -= spare - last.get(path, set())
    return _shape(tree.body) == want


def _empty(node: ast.stmt) -> bool:
    """A function whose body is only `pass`, `...` or a docstring."""
    return isinstance(node, FUNCS) and all(
        _is_docstring(s) or isinstance(s, ast.Pass)
        or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
            and s.value.value is Ellipsis)
        for s in node.body)


def _placeholder(node: ast.stmt, lines: list[str], was: ast.stmt) -> bool:
    """Does `node` (a new version of the function `was`) stand for code it leaves out: an
    empty body where `was` had code, or a shorter one with a comment saying code was left
    out ("# ... existing code ...")?"""
    if not isinstance(node, FUNCS) or not isinstance(was, FUNCS) or _empty(was):
        return False
    if _empty(node):
        return True
    a, b = _span(node)
    return (b - a < _span(was)[1] - _span(was)[0]
            and any(LEFT_OUT.search(line) for line in lines[node.lineno:b]))


def _apply(text: str, edits: list[Edit]) -> str:
    lines = text.split("\n")
    # from the bottom up; at one place the outer insertion first, so the inner one ends above it
    for a, b, _, new in sorted(edits, key=lambda e: (e[0], e[1], -e[2]), reverse=True):
        lines[a:b] = new
    return "\n".join(lines)


def _top(lines: list[str]) -> int:
    """The first line after a file's leading comments (a shebang, an encoding cookie)."""
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        i += 1
    return i


# ---- splice -------------------------------------------------------------------------------


def _body(old: list[ast.stmt], new: list[ast.stmt], old_lines: list[str], lines: list[str],
          depth: int, out: list[Edit]) -> bool:
    """Append the edits (in the file's lines) that splice the statements `new` (of the
    fragment, `lines`) into the body `old`; True where a function or class was revised."""
    _lines_apart(old, new)
    have, revises, named = _defined(old), False, set()
    if new and _is_docstring(new[0]):
        doc, new = new[0], new[1:]
        if depth:  # a class's docstring replaces the file's; the module keeps its own
            text = lines[_first(doc):_span(doc)[1]]
            at = _span(old[0]) if old and _is_docstring(old[0]) else (_first(old[0]),) * 2
            out.append((*at, depth, text))
    imports: list[str] = []
    waiting: list[list[str]] = []  # new definitions until the next shared one
    after: int | None = None  # the end of the last shared definition in the file
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
            waiting.append(lines[a:b])
            continue
        if len(hits) != 1 or set(_names(hits[0]) or []) != set(names):
            raise _NotASplice  # `a, b = ...` over two statements of the file, or the reverse
        was = hits[0]
        if waiting:  # defined before the shared definition that follows them in the fragment
            at = _first(was)
            gap = [""] * (1 if depth else 2)
            out.append((at, at, depth, [x for t in waiting for x in t + gap]))
            waiting = []
        if isinstance(node, ast.ClassDef) and isinstance(was, ast.ClassDef):
            _members(node, was)
            header = lines[a:_first(node.body[0])]
            if node.bases or node.keywords or node.decorator_list:
                if not node.decorator_list and was.decorator_list:
                    header = old_lines[_first(was):was.lineno - 1] + header
                out.append((_first(was), _first(was.body[0]), depth, header))
            _body(was.body, node.body, old_lines, lines, depth + 1, out)
        else:
            if _placeholder(node, lines, was):
                raise _NotASplice  # "... existing code ..." would replace the code
            text = lines[a:b]
            if not getattr(node, "decorator_list", None) and getattr(was, "decorator_list", None):
                text = old_lines[_first(was):was.lineno - 1] + text
            out.append((*_span(was), depth, text))
        revises = revises or (isinstance(node, DEFS) and isinstance(was, DEFS))
        after = _span(was)[1]
    if waiting:
        end = after if after is not None else max(_span(n)[1] for n in old)
        out.append((end, end, depth, [x for t in waiting for x in [""] * (1 if depth else 2) + t]))
    heads = [n for n in old if isinstance(n, (ast.Import, ast.ImportFrom))]
    imports = [i for i in dict.fromkeys(imports) if i not in {ast.unparse(n) for n in heads}]
    if imports:
        if heads:
            at = _span(heads[-1])[1]
        elif old and _is_docstring(old[0]):
            at = _span(old[0])[1]
        else:
            at = _top(old_lines)
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
        if not _body(old_tree.body, new_tree.body, old.split("\n"), fragment.split("\n"), 0, edits):
            return None
    except _NotASplice:
        return None
    out = _apply(old, edits)
    if out.rstrip("\n") == old.rstrip("\n") or not _same_shape(out, old_tree, new_tree):
        return None
    return out


# ---- restore ------------------------------------------------------------------------------


def _kept(old: list[ast.stmt], new: list[ast.stmt], old_lines: list[str], new_lines: list[str],
          depth: int, out: list[Edit], kept: list[str], spare: frozenset[str] = frozenset()) -> None:
    """Append the edits (in the new text's lines) that put back the definitions of the body
    `old` that the body `new` leaves out or holds only a placeholder of, each after the
    nearest one before it that `new` has (or before the nearest after it, or before `new`'s
    first definition); classes in both, member by member."""
    from .pynames import defined_names

    _lines_apart(old, new)
    has = defined_names(ast.Module(body=new, type_ignores=[]))
    if has is None:
        raise _NotASplice
    where = _defined(new)
    gap = [""] * (1 if depth else 2)
    anchor: int | None = None  # a line of the new text to insert after
    pending: list[list[str]] = []  # left-out definitions before the first anchor
    for node in old:
        names = _names(node)
        if not names:  # an import or a statement
            continue
        twin = where.get(names[0])
        if twin is not None and _placeholder(twin, new_lines, node):
            out.append((*_span(twin), depth, old_lines[_first(node):_span(node)[1]]))
            kept.extend(names)
            anchor = _span(twin)[1]
            continue
        if not any(n in has for n in names):
            if all(n in spare for n in names):  # meant to go
                continue
            text = old_lines[_first(node):_span(node)[1]]
            kept.extend(names)
            if anchor is None:
                pending.append(text)
            elif out and out[-1][:3] == (anchor, anchor, depth):  # (one insertion, in order)
                out[-1] = (anchor, anchor, depth, [*out[-1][3], *gap, *text])
            else:
                out.append((anchor, anchor, depth, gap + text))
            continue
        if twin is None:
            continue
        if pending:  # before the first definition both have
            at = _first(twin)
            out.append((at, at, depth, [line for t in pending for line in t + gap]))
            pending = []
        if isinstance(node, ast.ClassDef) and isinstance(twin, ast.ClassDef):
            _members(twin, node)
            _kept(node.body, twin.body, old_lines, new_lines, depth + 1, out, kept, spare)
        anchor = _span(twin)[1]
    if pending:  # `new` has none of `old`'s definitions: before its first, or at its end
        first = next((n for n in new if _names(n)), None)
        if first is not None:
            at = _first(first)
            out.append((at, at, depth, [line for t in pending for line in t + gap]))
        else:
            end = max((_span(n)[1] for n in new), default=0)
            out.append((end, end, depth, [line for t in pending for line in gap + t]))


def restore(old: str, new: str, spare: frozenset[str] = frozenset()
            ) -> tuple[str, list[str]] | None:
    """`new` (a rewrite of the file `old`) with what it leaves out of `old` put back (see the
    module's docstring), and the names put back; None where it leaves nothing out or nothing
    can be put back safely. `spare`: names left out on purpose (not put back)."""
    old_tree, new_tree = _parse(old), _parse(new)
    if old_tree is None or new_tree is None or not new_tree.body:
        return None
    edits: list[Edit] = []
    kept: list[str] = []
    try:
        _kept(old_tree.body, new_tree.body, old.split("\n"), new.split("\n"), 0, edits, kept, spare)
    except _NotASplice:
        return None
    if not kept:
        return None
    out = _apply(new, edits)
    return (out, kept) if _same_shape(out, old_tree, new_tree, spare=spare) else None

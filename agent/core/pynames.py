"""Names other Python files import from an edited module, and whether it still defines them.

An edit that rewrites a module can drop a function that other files import (a small model
that answers with a fragment, or renames what the caller named): the module still compiles
and lints clean, and the break shows only when an importer runs. This module finds, without
running anything, the names the repository's other `.py` files take from a module
(`from m import a, b`, relative imports, `import m as x` then `x.a`) and the ones the module's
new text no longer defines at its top level.

Resolution is by file: an absolute import resolves against the repository root and against
the importer's own folder (a script's folder is on `sys.path`); a relative one against the
importer's package. A module whose names cannot be known statically (a `from x import *`, a
module-level `__getattr__`) is never reported. The walk skips hidden folders, virtual
environments and caches, and stops at `MAX_FILES` files. Files are read through
tools/_paths.read_inside (regular files inside the root, no symlink followed).
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path

from tools._paths import PathError, read_inside

MAX_FILES = 2000
MAX_BYTES = 512 * 1024
SKIP_DIRS = {"__pycache__", "node_modules", "venv", "env", "site-packages", "build", "dist"}


@dataclass(frozen=True)
class Missing:
    importer: str  # the importing file, relative to the root
    names: tuple[str, ...]  # what it takes from the module that the module does not define


def _parse(root: Path, path: Path, needs: tuple[str, ...] = ()) -> ast.Module | None:
    """The syntax tree of `path` (inside `root`); None when it is too big, unreadable, not a
    regular file or broken, or (with `needs`) when its text contains none of those strings
    (so it cannot import the module)."""
    try:
        text = read_inside(root, path.relative_to(root).as_posix(), MAX_BYTES)
        if needs and not any(n in text for n in needs):
            return None
        return ast.parse(text)
    except (OSError, PathError, SyntaxError, ValueError, RecursionError):
        return None


def _targets(node: ast.AST, out: set[str]) -> None:
    if isinstance(node, ast.Name):
        out.add(node.id)
    elif isinstance(node, (ast.Tuple, ast.List)):
        for e in node.elts:
            _targets(e, out)
    elif isinstance(node, ast.Starred):
        _targets(node.value, out)


def defined_names(tree: ast.Module) -> set[str] | None:
    """The names a module defines at its top level (through if/try/with/for/while blocks and
    `global` statements); None when they cannot be known (a star import, `__getattr__`)."""
    out: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        s = todo.pop()
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(s.name)
        elif isinstance(s, ast.Assign):
            for t in s.targets:
                _targets(t, out)
        elif isinstance(s, (ast.AnnAssign, ast.AugAssign)):
            _targets(s.target, out)
        elif isinstance(s, ast.Import):
            out.update(a.asname or a.name.split(".")[0] for a in s.names)
        elif isinstance(s, ast.ImportFrom):
            if any(a.name == "*" for a in s.names):
                return None
            out.update(a.asname or a.name for a in s.names)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            _targets(s.target, out)
        if isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                if item.optional_vars is not None:
                    _targets(item.optional_vars, out)
        for field in ("body", "orelse", "finalbody"):
            if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                todo.extend(getattr(s, field, None) or [])
        for h in getattr(s, "handlers", None) or []:
            todo.extend(h.body)
            if h.name:
                out.add(h.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            out.update(node.names)
        elif isinstance(node, ast.NamedExpr):
            _targets(node.target, out)
    return None if "__getattr__" in out else out


def _module_file(base: Path, dotted: str) -> list[Path]:
    parts = [p for p in dotted.split(".") if p]
    if not parts:
        return [base / "__init__.py"]
    stem = base.joinpath(*parts)
    return [stem.with_suffix(".py"), stem / "__init__.py"]


def _resolves(importer: Path, root: Path, module: str | None, level: int, target: Path) -> bool:
    if level:
        base = importer.parent
        for _ in range(level - 1):
            base = base.parent
        candidates = _module_file(base, module or "")
    else:
        if not module:
            return False
        candidates = _module_file(root, module) + _module_file(importer.parent, module)
    return any(c == target for c in candidates)


def _taken(tree: ast.Module, importer: Path, root: Path, target: Path) -> list[str]:
    """The names `tree` (the file `importer`) takes from the module file `target`."""
    names: list[str] = []
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if _resolves(importer, root, node.module, node.level, target):
                names.extend(a.name for a in node.names if a.name != "*")
        elif isinstance(node, ast.Import):
            for a in node.names:
                bound = a.asname or (a.name if "." not in a.name else "")
                if bound and _resolves(importer, root, a.name, 0, target):
                    aliases.add(bound)
    if aliases:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and isinstance(node.ctx, ast.Load)):
                names.append(node.attr)
    return list(dict.fromkeys(names))


def _python_files(root: Path):
    count = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        for f in sorted(files):
            if f.endswith(".py"):
                count += 1
                if count > MAX_FILES:
                    return
                yield Path(folder) / f


def missing_names(root: Path, rel: str) -> list[Missing]:
    """For the module `rel` (relative to `root`): each other file that imports names from it
    that its current text does not define. [] when none do, or when it cannot be known."""
    root = root.resolve()
    target = (root / rel).resolve()
    tree = _parse(root, target)
    if tree is None:
        return []
    have = defined_names(tree)
    if have is None:
        return []
    package = target.parent if target.name == "__init__.py" else None
    # Every import that can resolve to the module names it, or is relative ("from .").
    needs = (package.name, "from .") if package else (target.stem,)
    out: list[Missing] = []
    for path in _python_files(root):
        if path.resolve() == target:
            continue
        other = _parse(root, path, needs)
        if other is None:
            continue
        gone = [n for n in _taken(other, path.resolve(), root, target) if n not in have
                and not (n.startswith("__") and n.endswith("__"))
                and not (package and _module_file(package, n)[0].exists() or
                         package and (package / n).is_dir())]
        if gone:
            out.append(Missing(str(path.relative_to(root)), tuple(gone)))
    return out

"""Layering: imports only go down, read from the code itself (every import statement, lazy
ones inside functions included), and no two modules import each other, however indirectly.

Each module belongs to a unit (a folder of `agent/`, a top-level module of `agent/`, or
`tools`); ALLOWED says which units each unit may import. The engine imports no UI, no config
and no model store; `tools/` imports nothing of `agent/`; the UIs consume events and never
build a runtime themselves.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"core", "engine", "backends", "ui", "eval", "bench", "serve"}
BASE = {"agent", "agent.choices", "agent.events", "agent.cancel", "agent.exit_codes",
        "agent.safe_input"}  # data, signals and the guarded readers of input
_BELOW_RUNTIME = {"agent.mcp", "agent.backends", "agent.core", "agent.engine", "agent.models", "agent.store",
                  "agent.extensions", "agent.config", "tools", *BASE}
ALLOWED: dict[str, set[str]] = {
    "tools": {"tools"},
    **{b: set(BASE) for b in BASE},
    "agent.engine": set(BASE),
    "agent.store": set(BASE),
    "agent.config": set(BASE),
    "agent.extensions": {"agent.config", *BASE},  # the [mcp] and [hooks] tables
    "agent.models": {"agent.store", "agent.engine", *BASE},
    "agent.core": {"tools", "agent.extensions", "agent.config", "agent.store", *BASE},
    "agent.backends": {"agent.core", "agent.engine", "agent.config", "tools", *BASE},
    "agent.ui": {"agent.core", "agent.extensions", "agent.config", "agent.store", "tools", *BASE},
    "agent.mcp": {"agent.backends", "agent.extensions", "agent.config", "tools", *BASE},
    "agent.runtime": set(_BELOW_RUNTIME),
    "agent.eval": {"agent.runtime", *_BELOW_RUNTIME},
    "agent.bench": {"agent.runtime", "agent.ui", *_BELOW_RUNTIME},
    "agent.serve": {"agent.runtime", *_BELOW_RUNTIME},  # the engine over HTTP, built as the runtime builds
    "agent.headless": {"agent.runtime", "agent.ui", *_BELOW_RUNTIME},
    "agent.commands": {"agent.headless", "agent.runtime", "agent.ui", "agent.eval", "agent.serve",
                       *_BELOW_RUNTIME},
    "agent.cli_checks": {"agent.config", *BASE},
    "agent.cli": {"agent.commands", "agent.headless", "agent.cli_checks", "agent.runtime", "agent.ui",
                  "agent.eval", "agent.bench", "agent.serve", *_BELOW_RUNTIME},
}


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for p in sorted([*root.glob("agent/**/*.py"), *root.glob("tools/**/*.py")]):
        name = ".".join(p.relative_to(root).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def imports(root: Path) -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its code."""
    mods = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        # `if TYPE_CHECKING:` imports never run: names for annotations, not edges
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                       for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                subs = [f"{base}.{a.name}" for a in node.names]
                # `from pkg import mod` needs the module; `from pkg import name` the package
                targets = [*subs, *([base] if any(s not in mods for s in subs) else [])]
            else:
                continue
            edges[name] |= {t for t in targets if t in mods and t != name}
    return edges


def unit(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "tools":
        return "tools"
    if len(parts) > 1 and parts[1] in FOLDERS:
        return ".".join(parts[:2])
    return ".".join(parts[:2])


def upward(edges: dict[str, set[str]]) -> list[str]:
    """Every import whose target's unit the importer's unit may not use."""
    bad = []
    for a, targets in sorted(edges.items()):
        ua = unit(a)
        if ua not in ALLOWED:
            bad.append(f"{a}: unit {ua} has no rule in ALLOWED")
            continue
        bad += [f"{a} -> {b}" for b in sorted(targets) if unit(b) != ua and unit(b) not in ALLOWED[ua]]
    return bad


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_imports_only_go_down():
    assert upward(imports(ROOT)) == []


def test_no_import_cycles():
    assert cycles(imports(ROOT)) == []


def _copy(tmp_path: Path) -> Path:
    for top in ("agent", "tools"):
        shutil.copytree(ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _plant(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n\ndef _planted():\n    {line}\n")


def test_the_checks_fail_on_a_planted_upward_import(tmp_path):
    root = _copy(tmp_path)
    _plant(root / "agent/engine/step.py", "from ..ui import tui  # noqa")
    _plant(root / "tools/grep.py", "from agent.core import approvals  # noqa")
    assert upward(imports(root)) == ["agent.engine.step -> agent.ui.tui", "tools.grep -> agent.core.approvals"]


def test_the_checks_fail_on_a_planted_cycle(tmp_path):
    root = _copy(tmp_path)
    _plant(root / "agent/engine/cache.py", "from .session import Session  # noqa")
    found = cycles(imports(root))
    assert found and all({"agent.engine.cache", "agent.engine.session"} <= set(g) for g in found)


def _import_blocked(blocked_tops: tuple[str, ...], blocked_prefixes: tuple[str, ...],
                    modules: str) -> subprocess.CompletedProcess:
    """Import `modules` in a fresh interpreter where the blocked packages cannot be imported."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {blocked_tops!r} or name.startswith({blocked_prefixes!r}):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        f"import {modules}\n"
        "print('OK')\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_engine_imports_no_ui():
    r = _import_blocked(("textual", "prompt_toolkit"), ("agent.ui",),
                        "agent.engine.loading, agent.engine.session, agent.engine.speculative, "
                        "agent.engine.drafters, agent.bench.spec, agent.engine.pairing, agent.runtime")
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr


def test_core_imports_no_engine_and_no_ui():
    """The conversation core is engine-neutral: no mlx, no UI toolkit (remote backends and
    every UI build on it)."""
    r = _import_blocked(("textual", "prompt_toolkit", "mlx", "mlx_lm"), ("agent.ui", "agent.engine"),
                        "agent.core.conversation, agent.core.callformat, agent.core.prompt, "
                        "agent.core.preview, agent.core.history, agent.cancel, agent.events")
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr

"""The engine's front door: code outside `agent/engine` imports only the names in
`agent.engine.__all__` (read from every import statement, lazy ones inside functions
included); those names resolve; `import agent.engine` loads no MLX; and `make_speculator`
builds a speculator for every speculation setting whose greedy output equals plain decoding.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import agent.engine as engine
from agent.engine import (Combined, DraftModel, PromptLookup, SamplingParams, Session, SettingsError,
                          SpecSettings, make_speculator)

ROOT = Path(__file__).resolve().parents[1]

# Engine modules that are public beside `__all__`, each for a reason:
PUBLIC_MODULES = {
    # size- and depth-bounded readers of untrusted files (not inference): headless input and
    # the grammar backend's file listing read through them, as the engine's loaders do
    "bounded",
}


def private_imports(source: str, module: str) -> list[str]:
    """`line: what` for each import in `source` that reaches past `agent.engine`'s public
    names; `module`: the file's dotted path (`pkg.__init__` for a package's)."""
    package = module.rpartition(".")[0]
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            found = [(base, a.name) for a in node.names]
        else:
            continue
        for target, name in found:
            parts = target.split(".")
            if parts[:2] != ["agent", "engine"]:
                continue
            if len(parts) > 2 and parts[2] not in PUBLIC_MODULES:
                bad.append(f"{node.lineno}: {target}")
            elif len(parts) == 2 and name not in engine.__all__ and name not in PUBLIC_MODULES:
                bad.append(f"{node.lineno}: {target}.{name}")
    return list(dict.fromkeys(bad))


def outside_files() -> list[Path]:
    files = [*ROOT.glob("agent/**/*.py"), *ROOT.glob("tools/**/*.py"), *ROOT.glob("scripts/**/*.py")]
    return sorted(p for p in files if not p.relative_to(ROOT).as_posix().startswith("agent/engine/"))


def test_outside_the_engine_only_public_names_are_imported():
    bad = []
    for path in outside_files():
        rel = path.relative_to(ROOT)
        module = ".".join(rel.with_suffix("").parts)
        bad += [f"{rel}:{b}" for b in private_imports(path.read_text(), module)]
    assert not bad, "imports past agent.engine's public names:\n" + "\n".join(bad)


@pytest.mark.parametrize("source, module, caught", [
    ("from agent.engine.session import Session", "agent.runtime", True),
    ("def f():\n    from ..engine.step import forward", "agent.bench.spec", True),
    ("import agent.engine.drafters", "tools.x", True),
    ("from .engine import drafters", "agent.runtime", True),
    ("from ..engine import NotExported", "agent.bench.spec", True),
    ("from ...engine import tree", "agent.eval.tasks.x", True),
    ("from ..engine import Session, make_speculator", "agent.bench.spec", False),
    ("from .engine.bounded import InputError", "agent.headless", False),
    ("from agent import engine", "agent.cli", False),
    ("from .core.session import x", "agent.runtime", False),
])
def test_the_scan_tells_private_from_public(source, module, caught):
    assert bool(private_imports(source, module)) == caught


def test_all_names_resolve():
    assert len(engine.__all__) == len(set(engine.__all__))
    assert set(engine.__all__) == set(engine._EXPORTS)
    for name in engine.__all__:
        assert getattr(engine, name) is not None, name
    with pytest.raises(AttributeError):
        engine.no_such_name  # noqa: B018


def test_importing_the_engine_loads_no_mlx():
    code = ("import sys, agent.engine as e; e.SpecAgentError; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_settings_defaults_are_the_configs():
    from agent.config import Config

    assert SpecSettings.from_config(Config()) == SpecSettings()
    cfg = Config(speculation="on", drafter="lookup", num_draft_tokens=5, tree="auto", tree_nodes=9)
    assert SpecSettings.from_config(cfg) == SpecSettings(speculation="on", drafter="lookup",
                                                         num_draft_tokens=5, tree="auto", tree_nodes=9)


@pytest.mark.parametrize("bad", [dict(drafter="draft"), dict(speculation="yes"), dict(num_draft_tokens=33),
                                 dict(tree_nodes=1), dict(draft_confidence=1.0)])
def test_bad_settings_are_one_error(bad):
    with pytest.raises(SettingsError, match=next(iter(bad))):
        SpecSettings(**bad)


def test_a_model_drafter_needs_a_draft_model(pair):
    target, _ = pair
    for kind in ("model", "combined"):
        with pytest.raises(SettingsError, match=f"drafter '{kind}' needs"):
            make_speculator(SpecSettings(drafter=kind), target)
    assert make_speculator(SpecSettings(speculation="off"), target) is None


# (settings, with the draft model, the drafter type built)
MODES = [
    (SpecSettings(speculation="on", drafter="lookup", num_draft_tokens=4), False, PromptLookup),
    (SpecSettings(speculation="on", drafter="auto"), False, PromptLookup),
    (SpecSettings(speculation="on", drafter="auto"), True, Combined),
    (SpecSettings(speculation="on", drafter="model", num_draft_tokens=3), True, DraftModel),
    (SpecSettings(speculation="on", drafter="combined"), True, Combined),
    (SpecSettings(speculation="on", drafter="model", tree="auto", tree_nodes=8), True, DraftModel),
    (SpecSettings(speculation="auto", drafter="combined", draft_vocab=0), True, Combined),
]


@pytest.mark.parametrize("settings, with_draft, drafter", MODES)
def test_built_speculator_decodes_as_plain_at_greedy(pair, settings, with_draft, drafter):
    target, draft = pair
    warnings: list[str] = []
    spec = make_speculator(settings, target, draft if with_draft else None, warn=warnings.append)
    assert type(spec.drafter) is drafter
    assert spec.policy.mode == settings.speculation and spec.policy.fixed_k == settings.num_draft_tokens
    assert (spec.tree is not None) == (settings.tree == "auto")
    # a prompt that repeats itself, so that lookup finds matches too
    prompt = Session(target).render([{"role": "user", "content": "def add(a, b):\n    return a + b\n" * 3}])
    want = Session(target).complete(prompt, params=SamplingParams(), max_tokens=48, stop_tokens=set())
    got = Session(target, speculator=spec).complete(prompt, params=SamplingParams(), max_tokens=48,
                                                   stop_tokens=set())
    assert got.tokens == want.tokens
    assert got.stats.speculative and got.stats.rounds > 0

"""Layering: the engine imports no UI toolkit; the conversation core imports neither the
engine nor a UI."""

from __future__ import annotations

import subprocess
import sys


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
                        "agent.engine.drafters, agent.engine.bench, agent.engine.pairing, agent.runtime")
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr


def test_core_imports_no_engine_and_no_ui():
    """The conversation core is engine-neutral: no mlx, no UI toolkit (remote backends and
    every UI build on it)."""
    r = _import_blocked(("textual", "prompt_toolkit", "mlx", "mlx_lm"), ("agent.ui", "agent.engine"),
                        "agent.core.conversation, agent.core.callformat, agent.core.prompt, "
                        "agent.core.preview, agent.core.history, agent.cancel, agent.events")
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr

"""The engine is a library: it imports no UI toolkit."""

from __future__ import annotations

import subprocess
import sys


def test_engine_imports_no_ui():
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('textual', 'prompt_toolkit') or name.startswith('agent.ui'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import agent.engine.loading, agent.engine.session, agent.engine.speculative\n"
        "import agent.engine.drafters, agent.engine.bench, agent.engine.pairing, agent.runtime\n"
        "print('OK')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr


def test_core_imports_no_engine_and_no_ui():
    """The conversation core is engine-neutral: no mlx, no UI toolkit (remote backends and
    every UI build on it)."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        top = name.split('.')[0]\n"
        "        if top in ('textual', 'prompt_toolkit', 'mlx', 'mlx_lm') or name.startswith(('agent.ui', 'agent.engine')):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import agent.core.conversation, agent.core.callformat, agent.core.prompt\n"
        "import agent.core.preview, agent.core.history, agent.cancel, agent.events\n"
        "print('OK')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr

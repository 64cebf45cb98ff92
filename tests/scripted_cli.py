"""`spec-agent` with a scripted model instead of the engine, for tests that drive the CLI
as a program (tests/test_stream_json.py's claude-agent-sdk round trip). The turns come as a
JSON list in SCRIPTED_TURNS; everything else is the real command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from scripted import ScriptedModel  # noqa: E402

from agent import runtime  # noqa: E402


def _load(self) -> None:
    self.model = ScriptedModel(json.loads(os.environ["SCRIPTED_TURNS"]))
    if self.conversation is not None:
        self.conversation.model = self.model


runtime.Runtime.load = _load

if __name__ == "__main__":
    from agent.cli import main

    sys.exit(main(sys.argv[1:]))

"""Test-only launcher: `spec-agent acp` (same parsing, config and server) on a scripted model.

Usage: `python tests/acp_scripted.py SCRIPT.json [acp flags...]`, where SCRIPT.json is a list
of model turns (tests/scripted.py's format), streamed 7 characters every 10 ms. A turn equal
to `SLOW` streams "tick " every 20 ms until the turn is cancelled (or 30 s pass), as a long
generation would. The first model call also prints to stdout, as a chatty library might. Only tests
start this; the installed `spec-agent acp` always runs the real engine.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scripted import ScriptedModel, fake_stats

from agent.cancel import CancelToken
from agent.events import Event, TextDelta

SLOW = "<slow>"
CONTEXT_LIMIT = 2048
DELTA_S = 0.01


class SlowScriptedModel(ScriptedModel):
    """ScriptedModel with context figures in its stats and a turn that runs until cancelled."""

    def generate(self, messages: list[dict], cancel: CancelToken | None = None) -> Iterator[Event]:
        if not self.seen:  # what a chatty library might do: the server must keep it off stdout
            print("stray print from the model")
            os.write(1, b"stray write to fd 1\n")
        if self.turns and self.turns[0] == SLOW:
            self.turns.pop(0)
            self.seen.append([dict(m) for m in messages])
            yield from self._slow(cancel or CancelToken())
            return
        for ev in super().generate(messages, cancel):
            if hasattr(ev, "context_limit"):
                ev = replace(ev, context_tokens=sum(len(m["content"]) for m in messages) // 4,
                             context_limit=CONTEXT_LIMIT)
            else:
                time.sleep(DELTA_S)  # text arrives over time, as from a model
            yield ev

    @staticmethod
    def _slow(cancel: CancelToken) -> Iterator[Event]:
        end, n = time.monotonic() + 30, 0
        while not cancel.cancelled and time.monotonic() < end:
            yield TextDelta("tick ", ())
            n += 1
            time.sleep(0.02)
        reason = "cancelled" if cancel.cancelled else "stop"
        yield replace(fake_stats(generated=n), finish_reason=reason, context_limit=CONTEXT_LIMIT)


def main() -> int:
    from agent.cli import _flags, build_parser
    from agent.config import load_config
    from agent.commands import run_acp

    turns = json.loads(Path(sys.argv[1]).read_text())
    args = build_parser().parse_args(["acp", *sys.argv[2:]])
    flags = _flags(args)
    cfg = load_config(getattr(args, "repo", None), flags)
    return run_acp(args, cfg, flags, model=SlowScriptedModel(turns))


if __name__ == "__main__":
    sys.exit(main())

"""Does the TUI slow decoding down? Decode tok/s of the TUI vs the `-p` path, same task.

Usage: python lab/probes/measure_tui.py [--pairs 3] [--max-tokens 200] [--speculation auto]

Runs the embedded model greedily on one prompt, alternating the two paths in one process
(p, tui, p, tui, ...): `-p` = a `Runtime` and `conversation.send` consumed in a plain loop
(what `spec-agent -p` does); TUI = the Textual App driven headless with `run_test()`, the
model loaded on its engine thread. Each run gets a fresh Runtime (cold cache, same prefill)
in a fresh temporary git repo. Prints one JSON object: each run's decode tok/s (from its
`AgentResult` usage) and, for the TUI, the CPU seconds its UI thread used during the message;
the TUI/-p ratio of each pair and their median (goal: >= 0.98). On a shared 2-core machine
single runs vary by ±15%; the UI thread's CPU share is the steadier figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agent import store
from tools import git
from agent.cancel import CancelToken
from agent.config import Config
from agent.engine.blas import ensure_openblas, loaded_blas
from agent.events import AgentResult
from agent.runtime import Runtime

PROMPT = ("Write a Python function that checks whether a number is prime, with a docstring "
          "and three examples.")


def temp_repo() -> Path:
    root = Path(tempfile.mkdtemp(prefix="measure-tui-")) / "repo"
    root.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.name", "Measure"],
                 ["config", "user.email", "measure@example.com"],
                 ["commit", "-q", "--allow-empty", "-m", "initial"]):
        git.run(root, *args)
    return root


def run_print(cfg: Config) -> tuple[AgentResult, float]:
    """The `-p` path: load, send, consume the events."""
    rt = Runtime(cfg, temp_repo())
    rt.load()
    result = None
    for ev in rt.new_conversation().send(PROMPT, CancelToken()):
        result = ev
    return result, 0.0


def run_tui(cfg: Config) -> tuple[AgentResult, float]:
    """The TUI path: the App headless, the model loaded on its engine thread. Also returns
    the CPU seconds the UI thread used while the message ran."""
    from agent.ui.tui import AgentApp

    app = AgentApp(Runtime(cfg, temp_repo()))
    ui_cpu = 0.0

    async def drive() -> None:
        nonlocal ui_cpu
        async with app.run_test(size=(120, 35)) as pilot:
            while app.busy:  # loading the model
                await asyncio.sleep(0.5)
            start = time.thread_time()  # this thread runs the App
            app.prompt.load_text(PROMPT)
            await pilot.press("enter")
            while app.busy:  # polled rarely: the driver's own wake-ups cost CPU too
                await asyncio.sleep(0.5)
            ui_cpu = time.thread_time() - start

    asyncio.run(drive())
    return app.last_result, ui_cpu


def warm_up() -> None:
    """Import and draw once (markdown with a code fence) so that one-time costs (imports,
    the highlighter's lexers) do not land in the first measured TUI run."""
    from textual.app import App
    from textual.widgets import Markdown

    class Warm(App):
        def compose(self):
            yield Markdown("# x\n\n```python\ndef f():\n    return 1\n```\n\n- a `b`\n")

    async def drive() -> None:
        async with Warm().run_test() as pilot:
            await pilot.pause(0.2)

    asyncio.run(drive())
    import agent.ui.tui  # noqa: F401


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--speculation", choices=["auto", "on", "off"], default="auto")
    args = p.parse_args()
    if not store.is_present():
        sys.exit(f"embedded model missing (run: {store.PULL_HINT})")
    warning = ensure_openblas("auto", store.home() / "blas-coretype.json")  # as the CLI does; may re-exec this script
    if warning:
        print(warning, file=sys.stderr)
    cfg = Config(model=str(store.model_path()), device="cpu", approval_mode="full-auto",
                 temperature=0.0, max_tokens=args.max_tokens, max_turns=1,
                 speculation=args.speculation)
    warm_up()
    runs, ratios = [], []
    for i in range(args.pairs):
        pair = {}
        for path, fn in (("p", run_print), ("tui", run_tui)):
            t0 = time.perf_counter()
            result, ui_cpu = fn(cfg)
            u = result.usage
            pair[path] = u["decode_tps"]
            runs.append({"pair": i, "path": path, "decode_tps": round(u["decode_tps"], 2),
                         "output_tokens": u["output_tokens"], "stop_reason": result.stop_reason,
                         "acceptance_rate": round(u["acceptance_rate"], 3),
                         "message_s": round(u["duration_s"], 1),
                         "ui_thread_cpu_s": round(ui_cpu, 2),
                         "wall_s": round(time.perf_counter() - t0, 1)})
            print(json.dumps(runs[-1]), file=sys.stderr)
        ratios.append(pair["tui"] / pair["p"] if pair["p"] else 0.0)
    print(json.dumps({
        "prompt": PROMPT, "max_tokens": args.max_tokens, "speculation": args.speculation,
        "blas": loaded_blas(), "runs": runs, "ratios": [round(r, 3) for r in ratios],
        "median_ratio": round(statistics.median(ratios), 3),
        "median_tps": {path: round(statistics.median(r["decode_tps"] for r in runs
                                                     if r["path"] == path), 2)
                       for path in ("p", "tui")},
    }, indent=1))


if __name__ == "__main__":
    main()

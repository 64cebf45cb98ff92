"""What the CLI's commands do once arguments are parsed (kept apart from parsing).

Exit codes of a run come from its `AgentResult.stop_reason`: 0 answered (or stopped at
--max-turns), 1 error (model or git failure, or a turn stopped because the model kept repeating
itself: stop_reason "repetition"), 2 usage/config error, including a run stopped
because a tool call needed an approval that no one could give (rerun with --yes /
--approval-mode), 130 cancelled (Ctrl-C). `agent.cli.main` adds 141 when the output pipe
closed early (`| head`), quietly, as a shell reports SIGPIPE.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from .config import Config, ConfigError

EXIT_CODES = {"answered": 0, "max_turns": 0, "error": 1, "repetition": 1, "approval_required": 2,
              "cancelled": 130}


def workspace(args) -> Path:
    root = Path(getattr(args, "repo", None) or Path.cwd())
    if not root.is_dir():
        raise ConfigError(f"{root}: not a directory")
    return root.resolve()


class _CancelOnSigint:
    """The first Ctrl-C sets the cancel token (the turn stops between rounds, caches stay
    consistent); a second one raises KeyboardInterrupt as usual."""

    def __init__(self, cancel):
        self.cancel, self.previous = cancel, None

    def _handle(self, signum, frame) -> None:
        if self.cancel.cancelled:
            raise KeyboardInterrupt
        self.cancel.cancel()

    def __enter__(self):
        try:
            self.previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread (tests): no handler
            self.previous = None
        return self

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def run_task(task: str, args, cfg: Config, model=None) -> int:
    """Run the agent on `task` non-interactively; events rendered per --output-format.
    `model` replaces the local engine (tests)."""
    from .cancel import CancelToken
    from .runtime import Runtime
    from .ui.render import Renderer

    renderer = Renderer(getattr(args, "output_format", "text"), sys.stdout, sys.stderr,
                        bool(getattr(args, "stats", False)))
    runtime = Runtime(cfg, workspace(args), model=model)
    if model is None:
        runtime.load()
    conversation = runtime.new_conversation()
    cancel = CancelToken()
    result = None
    with _CancelOnSigint(cancel):
        for ev in conversation.send(task, cancel):
            renderer.handle(ev)
            result = ev
    runtime.close()  # the MCP servers (an exception stops them at exit: see Runtime.start_mcp)
    return EXIT_CODES.get(getattr(result, "stop_reason", ""), 1)


def config_show(args, flags: dict) -> int:
    """Print every key's effective value and where it came from (a bad key or value raises
    ConfigError naming the key and the file: exit 2)."""
    from .config import describe_config, load_config_sources

    cfg, sources = load_config_sources(getattr(args, "repo", None), flags)
    rows = describe_config(cfg, sources)
    width = max(len(k) for k, _, _ in rows)
    vwidth = min(max(len(v) for _, v, _ in rows), 40)
    for key, value, source in rows:
        print(f"{key:{width}} = {value:{vwidth}}  # {source}")
    return 0


def textual_usable() -> bool:
    """Can this terminal run the full-screen UI? (A dumb or unknown terminal cannot.)"""
    import os

    term = os.environ.get("TERM", "")
    return bool(term) and term not in ("dumb", "unknown")


def has_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def interactive(args, cfg: Config) -> int:
    """The interactive UIs: Textual by default, the prompt-toolkit REPL with --plain or when
    the terminal cannot run Textual. --continue / --resume ID pick up a stored conversation."""
    from .core.history import HistoryStore
    from .runtime import Runtime

    root = workspace(args)
    if not has_terminal():
        print('spec-agent: error: the interactive UI needs a terminal; give a task with -p "..."',
              file=sys.stderr)
        return 2
    runtime = Runtime(cfg, root, history=HistoryStore(root))
    resume = "last" if getattr(args, "continue_last", False) else getattr(args, "resume", None)
    if resume:
        runtime.resume(resume)  # a missing or corrupt conversation: one error, exit 2
    if getattr(args, "plain", False) or not textual_usable():
        from .ui.repl import run_repl

        return run_repl(runtime)
    from .ui.tui import run_tui

    return run_tui(runtime)


def undo(args, cfg: Config) -> int:
    """`spec-agent undo [ID] [--list]`: restore a snapshot (agent/core/snapshots.py)."""
    from .core.snapshots import SnapshotError, SnapshotStore, undo_text

    store = SnapshotStore.open(workspace(args), cfg.snapshot_max_count, cfg.snapshot_max_age_days)
    try:
        if getattr(args, "list_snapshots", False):
            print(store.listing())
        else:
            print(undo_text(store, getattr(args, "snapshot", "")))
    except SnapshotError as e:
        print(f"spec-agent: error: {e}", file=sys.stderr)
        return 1
    return 0

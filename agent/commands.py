"""What the CLI's commands do once arguments are parsed (kept apart from parsing).

Exit codes: agent/exit_codes.py (a run's comes from its `stop_reason`); headless runs
themselves are agent/headless.py.
"""

from __future__ import annotations

import sys

from .config import Config, workspace
from .exit_codes import BY_STOP_REASON as EXIT_CODES  # noqa: F401 - stop_reason -> exit code


def run_task(task: str, args, cfg: Config, model=None) -> int:
    """Run the agent on `task` non-interactively (agent/headless.py); `model` replaces the
    local engine (tests)."""
    from .headless import run_headless

    return run_headless(task, args, cfg, model=model)


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


def run_acp(args, cfg: Config, flags: dict, model=None) -> int:
    """`spec-agent acp`: serve until the client closes stdin. `model` replaces the local
    engine (tests)."""
    import asyncio
    import logging

    from .core.history import HistoryStore
    from .runtime import Runtime
    from .ui.acp import SpecAgent, protocol_stdout, serve

    log = logging.getLogger("spec-agent.acp")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, force=True,
                        format="spec-agent acp: %(levelname)s: %(message)s")
    out = protocol_stdout()
    root = workspace(args)
    warn = lambda m: log.warning("%s", m)  # noqa: E731
    primary = Runtime(cfg, root, model=model, history=HistoryStore(root), warn=warn)
    agent = SpecAgent(primary, flags, lambda c, where: Runtime(c, where, history=HistoryStore(where), warn=warn))
    log.info("serving %s with %s (loading it in the background)", root, primary.model_name)
    try:
        asyncio.run(serve(agent, out))
    finally:
        agent.close()
    return 0


def serve(args, cfg: Config) -> int:
    """`spec-agent serve`: the engine behind an OpenAI-compatible API until Ctrl-C (agent/serve)."""
    from .config import ConfigError
    from .serve.app import ServeOptions
    from .serve.server import run

    port = getattr(args, "port", 8080)
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535, got {port}")
    opts = ServeOptions(host=getattr(args, "host", "127.0.0.1"), port=port,
                        api_key=getattr(args, "api_key", ""), log=getattr(args, "log", None),
                        record=getattr(args, "record", None))
    return run(cfg, opts)

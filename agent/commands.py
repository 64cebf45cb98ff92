"""What the CLI's commands do once arguments are parsed (kept apart from parsing).

Exit codes of a run: 0 answered (or stopped at --max-turns), 1 error (model or git failure),
2 usage/config error, including a run stopped because a tool call needed an approval that no
one could give (rerun with --yes / --approval-mode), 130 interrupted. `agent.cli.main` adds
141 when the output pipe closed early (`| head`), quietly, as a shell reports SIGPIPE.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .config import Config, ConfigError

EXIT_CODES = {"answered": 0, "max_turns": 0, "error": 1, "approval_required": 2, "interrupted": 130}


def _workspace(args) -> Path:
    root = Path(getattr(args, "repo", None) or Path.cwd())
    if not root.is_dir():
        raise ConfigError(f"{root}: not a directory")
    return root.resolve()


def run_task(task: str, args, cfg: Config) -> int:
    """Run the agent on `task` non-interactively; events rendered per --output-format."""
    from .llm import SessionModel
    from .loop import Agent
    from .render import Renderer
    from .runtime import open_session, sampling_params

    root = _workspace(args)
    renderer = Renderer(getattr(args, "output_format", "text"), sys.stdout, sys.stderr,
                        bool(getattr(args, "stats", False)))
    params = sampling_params(cfg)
    session = open_session(cfg)
    model = SessionModel(session, params, cfg.max_tokens, constrain=cfg.constrained_calls,
                         tool_choice=cfg.tool_choice)
    agent = Agent(model, root, cfg)
    model.ctx = agent.ctx
    try:
        for ev in agent.run(task):
            renderer.handle(ev)
    except KeyboardInterrupt:
        for ev in agent.interrupted():
            renderer.handle(ev)
        return EXIT_CODES["interrupted"]
    return EXIT_CODES.get(renderer.stop_reason, 1)


def undo(args, cfg: Config) -> int:
    """Revert the agent's last commit (refuses when it is not the agent's)."""
    from .git import GitGuard, GitSafetyError

    guard = GitGuard.open(_workspace(args))
    try:
        print(guard.undo())
    except GitSafetyError as e:
        print(f"spec-agent: error: {e}", file=sys.stderr)
        return 1
    return 0

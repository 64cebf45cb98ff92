"""Options given where they would do nothing are refused in one line (exit 2), never dropped.

`refuse_unused(args)` compares what was given on the command line (a value other than the
parser's default) with what the chosen command reads. Imports nothing heavy.
"""

from __future__ import annotations

from .config import ConfigError

# Options that only a conversation reads: -p (headless) or the interactive UIs.
RUN_ONLY = {"max_turns": "--max-turns", "approval_mode": "--approval-mode", "yes": "--yes",
            "permission_mode": "--permission-mode",
            "dirty_files": "--dirty-files", "shell_timeout_s": "--shell-timeout-s",
            "sandbox": "--sandbox", "allow_network": "--allow-network",
            "auto_commit": "--no-auto-commit", "constrained_calls": "--no-constrained-calls",
            "tool_choice": "--tool-choice", "attach_mentioned": "--no-attach-mentioned",
            "edit_format": "--edit-format", "tool_format": "--tool-format"}
HEADLESS_ONLY = {"output_format": "--output-format", "input_format": "--input-format",
                 "verbose": "--verbose", "system_prompt": "--system-prompt", "stats": "--stats"}
INTERACTIVE_ONLY = {"plain": "--plain"}
SESSION = {"continue_last": "-c/--continue", "resume": "--resume"}
ENGINE = {"model": "-m/--model", "draft_model": "--draft-model", "num_draft_tokens": "-K",
          "speculation": "--speculation", "drafter": "--drafter", "temperature": "--temperature",
          "top_p": "--top-p", "top_k": "--top-k", "min_p": "--min-p",
          "repetition_penalty": "--repetition-penalty", "max_tokens": "--max-tokens",
          "device": "--device", "blas": "--blas", "engine": "--engine", "base_url": "--base-url"}
BENCH = {"quick": "--quick", "tokens": "--tokens", "subset": "--subset",
         "through_eos": "--through-eos", "pair": "--pair", "eps": "--eps", "record": "--record",
         "sessions": "--sessions", "repeat": "--repeat", "modes": "--modes", "out": "--out",
         "prompts": "--prompts", "write_config": "--write-config"}
DEFAULTS = {"output_format": "text", "input_format": "text", "subset": "all", "pair": "auto",
            "eps": 0.5, "sessions": "", "repeat": 1, "modes": "", "out": ""}

# What each bench reads (agent/bench/spec.py, cache.py, lookup.py, grammar.py, agentic.py),
# besides --json.
BENCH_READS = {
    "spec": {"quick", "tokens", "pair", "eps", "num_draft_tokens", "temperature", "top_p",
             "speculation", "repeat"},
    "cache": {"model", "draft_model", "device", "blas", "speculation", "drafter",
              "num_draft_tokens"},
    "lookup": {"quick", "tokens", "subset", "through_eos", "model", "device", "blas"},
    "grammar": {"model", "device", "blas"},
    "agentic": {"quick", "tokens", "record", "sessions", "subset", "model", "draft_model",
                "device", "blas", "speculation", "num_draft_tokens", "repeat", "modes", "out"},
}
# What `bench spec --prompts FILE` reads (agent/bench/prompts.py): the user's models and
# sampling, every speculation setting the configurations start from.
PROMPTS_READS = {"prompts", "write_config", "tokens", "model", "draft_model", "device", "blas",
                 "drafter", "speculation", "temperature", "top_p", "top_k", "min_p"}
# What `bench agentic --record` does not read (it runs the agent, it replays nothing).
AGENTIC_REPLAY_ONLY = {"quick": "--quick", "tokens": "--tokens", "repeat": "--repeat",
                       "modes": "--modes", "out": "--out"}


def _given(args, names: dict[str, str]) -> list[str]:
    out = []
    for dest, flag in names.items():
        value = getattr(args, dest, None)
        if value is not None and value is not False and value != DEFAULTS.get(dest):
            out.append(flag)
    return out


def _refuse(flags: list[str], where: str) -> None:
    if flags:
        s = "s" if len(flags) > 1 else ""
        raise ConfigError(f"option{s} {', '.join(flags)} {'do' if s else 'does'} nothing "
                          f"with {where}; leave {'them' if s else 'it'} out")


def refuse_unused(args) -> None:
    """ConfigError naming the options the chosen command would ignore (or contradict)."""
    cmd = args.command
    if getattr(args, "permission_mode", None) and (getattr(args, "approval_mode", None)
                                                    or getattr(args, "yes", False)):
        raise ConfigError("give one of --permission-mode, --approval-mode and --yes")
    session = {**RUN_ONLY, **HEADLESS_ONLY, **INTERACTIVE_ONLY, **SESSION}
    if cmd in ("models", "undo"):
        _refuse(_given(args, {**session, **ENGINE}), f"`spec-agent {cmd}`")
    elif cmd == "config":
        _refuse(_given(args, {**HEADLESS_ONLY, **INTERACTIVE_ONLY, **SESSION}), "`config show`")
    elif cmd == "serve":
        _refuse(_given(args, {**session, "engine": "--engine", "base_url": "--base-url"}), "`serve`")
    elif cmd in ("eval", "acp"):
        _refuse(_given(args, {**HEADLESS_ONLY, **INTERACTIVE_ONLY, **SESSION}), f"`{cmd}`")
    elif cmd == "bench":
        prompts = args.what == "spec" and getattr(args, "prompts", None) is not None
        reads = PROMPTS_READS if prompts else BENCH_READS[args.what]
        unused = {k: v for k, v in {**ENGINE, **BENCH}.items() if k not in reads}
        _refuse(_given(args, {**session, **unused}),
                "`bench spec --prompts`" if prompts else f"`bench {args.what}`")
        if args.what == "agentic" and getattr(args, "record", False):
            _refuse(_given(args, AGENTIC_REPLAY_ONLY), "`bench agentic --record`")
    if cmd is not None and getattr(args, "prompt", None) is not None:
        _refuse(["-p"], f"`spec-agent {cmd}`")
    if cmd is None:
        headless = args.prompt is not None or getattr(args, "input_format", "text") != "text"
        _refuse(_given(args, INTERACTIVE_ONLY if headless else HEADLESS_ONLY),
                "-p" if headless else "the interactive UI (give a task with -p)")

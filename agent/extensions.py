"""The `[mcp]` and `[hooks]` tables of the config files: what they may hold, and who may set them.

Both start programs, so both belong to the user's own config file
(`~/.config/spec-agent/config.toml`). A repository's `.specrc` comes with the code, possibly
from a stranger: it may only *name* MCP servers the user declared (`[mcp] enable = [...]`) and
may not add hooks. Everything else there is a `ConfigError` (one line, exit 2).

    [mcp.servers.time]                  # stdio: a program speaking MCP on stdin/stdout
    command = "mcp-server-time"
    args = ["--local-timezone", "UTC"]
    env = { TZ = "UTC" }
    allow = true                        # its tools run without asking (else: approval)
    allow_tools = ["get_current_time"]  # or only these
    tools = ["get_current_time"]        # offer only these to the model (default: all)
    enabled = true                      # false: only where a repo's .specrc enables it
    startup_timeout_s = 20
    call_timeout_s = 30

    [mcp.servers.docs]                  # streamable HTTP
    url = "http://127.0.0.1:8000/mcp"

    [[hooks.PreToolUse]]
    matcher = "run_shell"               # regex on the tool name; "" or "*" = every tool
    command = "~/.config/spec-agent/hooks/guard.sh"
    timeout_s = 10
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .config import ConfigError, _read_toml, check_repo_tables, user_config_path

NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")  # a server's name, as in mcp__NAME__TOOL
HOOK_EVENTS = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop")
DEFAULT_PROMPT_CHARS = 6000  # of tool descriptions and schemas all MCP tools may add
_SERVER_KEYS = {"command", "args", "env", "cwd", "url", "allow", "allow_tools", "tools",
                "enabled", "startup_timeout_s", "call_timeout_s"}
_HOOK_KEYS = {"matcher", "command", "timeout_s"}


def _error(msg: str) -> Exception:
    return ConfigError(msg)


@dataclass(frozen=True)
class ServerSpec:
    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    url: str = ""
    allow: bool = False
    allow_tools: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()  # () = all the server lists
    enabled: bool = True
    startup_timeout_s: float = 20.0
    call_timeout_s: float = 30.0

    def allowed(self, tool: str) -> bool:
        """May `tool` of this server run without asking?"""
        return self.allow or tool in self.allow_tools


@dataclass(frozen=True)
class HookSpec:
    event: str
    command: str
    matcher: str = ""
    timeout_s: float = 30.0

    def matches(self, tool: str) -> bool:
        if self.matcher in ("", "*"):
            return True
        try:
            return re.fullmatch(self.matcher, tool) is not None
        except re.error:
            return False


@dataclass(frozen=True)
class Extensions:
    """The servers to start (user-declared and enabled), every declared one, and the hooks."""

    servers: tuple[ServerSpec, ...] = ()
    declared: tuple[str, ...] = ()
    hooks: tuple[HookSpec, ...] = ()
    prompt_chars: int = DEFAULT_PROMPT_CHARS


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _error(f"{where} must be a list of strings")
    return tuple(value)


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
        raise _error(f"{where} must be a number of seconds in (0, 3600], got {value!r}")
    return float(value)


def _server(name: str, t: Any, where: str) -> ServerSpec:
    at = f"{where}: [mcp.servers.{name}]"
    if not NAME.match(name):
        raise _error(f"{at}: a server name may only have letters, digits, '_' and '-'")
    if not isinstance(t, dict):
        raise _error(f"{at} must be a table")
    unknown = sorted(set(t) - _SERVER_KEYS)
    if unknown:
        raise _error(f"{at}: unknown key '{unknown[0]}' (one of {', '.join(sorted(_SERVER_KEYS))})")
    command, url = t.get("command", ""), t.get("url", "")
    if not isinstance(command, str) or not isinstance(url, str) or bool(command) == bool(url):
        raise _error(f"{at} needs either command = \"program\" (stdio) or url = \"http...\"")
    if url and not url.startswith(("http://", "https://")):
        raise _error(f"{at}: url must be an http:// or https:// URL")
    env = t.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise _error(f"{at}: env must be a table of strings")
    for key in ("allow", "enabled"):
        if key in t and not isinstance(t[key], bool):
            raise _error(f"{at}: {key} must be true or false")
    return ServerSpec(
        name, command, _strs(t.get("args", []), f"{at} args"), tuple(sorted(env.items())),
        str(t.get("cwd", "")), url, bool(t.get("allow", False)),
        _strs(t.get("allow_tools", []), f"{at} allow_tools"), _strs(t.get("tools", []), f"{at} tools"),
        bool(t.get("enabled", True)),
        _seconds(t.get("startup_timeout_s", 20.0), f"{at} startup_timeout_s"),
        _seconds(t.get("call_timeout_s", 30.0), f"{at} call_timeout_s"))


def _hooks(table: Any, where: str) -> list[HookSpec]:
    if not isinstance(table, dict):
        raise _error(f"{where}: [hooks] must be a table of events")
    out = []
    for event, entries in table.items():
        if event not in HOOK_EVENTS:
            raise _error(f"{where}: unknown hook event '{event}' (one of {', '.join(HOOK_EVENTS)})")
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise _error(f"{where}: hooks.{event} must be an array of tables ([[hooks.{event}]])")
        for e in entries:
            unknown = sorted(set(e) - _HOOK_KEYS)
            if unknown:
                raise _error(f"{where}: hooks.{event}: unknown key '{unknown[0]}'")
            if not isinstance(e.get("command"), str) or not e["command"].strip():
                raise _error(f"{where}: hooks.{event} needs command = \"...\"")
            matcher = e.get("matcher", "")
            if not isinstance(matcher, str):
                raise _error(f"{where}: hooks.{event} matcher must be a string")
            try:
                re.compile(matcher if matcher != "*" else "")
            except re.error as err:
                raise _error(f"{where}: hooks.{event} matcher {matcher!r} is not a regex: {err}") from None
            out.append(HookSpec(event, e["command"], matcher,
                                _seconds(e.get("timeout_s", 30.0), f"{where}: hooks.{event} timeout_s")))
    return out


def parse(user_values: dict[str, Any], user: Path, repo_enable: list[str], specrc: Path) -> Extensions:
    """The extensions from the user file's tables and the names a repo enables."""
    where = str(user)
    mcp = user_values.get("mcp", {})
    if not isinstance(mcp, dict):
        raise _error(f"{where}: [mcp] must be a table")
    unknown = sorted(set(mcp) - {"servers", "prompt_chars", "enable"})
    if unknown:
        raise _error(f"{where}: [mcp]: unknown key '{unknown[0]}' (servers, prompt_chars, enable)")
    table = mcp.get("servers", {})
    if not isinstance(table, dict):
        raise _error(f"{where}: [mcp.servers] must be a table of servers")
    declared = [_server(name, t, where) for name, t in table.items()]
    names = {s.name for s in declared}
    enable = list(_strs(mcp.get("enable", []), f"{where}: [mcp] enable")) + repo_enable
    for name in repo_enable:
        if name not in names:
            raise _error(f"{specrc}: [mcp] enable names '{name}', which {user} does not declare "
                         "([mcp.servers." + name + "]); a repository may only enable your servers")
    chars = mcp.get("prompt_chars", DEFAULT_PROMPT_CHARS)
    if isinstance(chars, bool) or not isinstance(chars, int) or chars < 0:
        raise _error(f"{where}: [mcp] prompt_chars must be an integer >= 0")
    servers = tuple(s for s in declared if s.enabled or s.name in enable)
    hooks = tuple(_hooks(user_values.get("hooks", {}), where))
    return Extensions(servers, tuple(sorted(names)), hooks, chars)


def load(repo: Path | None) -> Extensions:
    """Read the user file and the repo's `.specrc` (as agent/config.py finds them)."""
    user, specrc = user_config_path(), (repo or Path.cwd()) / ".specrc"
    user_values = _read_toml(user) if user.is_file() else {}
    repo_enable = check_repo_tables(_read_toml(specrc), specrc, user) if specrc.is_file() else []
    return parse(user_values, user, repo_enable, specrc)


def specs_from_acp(servers: list[Any] | None, warn: Callable[[str], None]) -> tuple[ServerSpec, ...]:
    """ServerSpecs for the `mcpServers` an ACP client passes with a session (the client is the
    user's own editor: it may start programs). Stdio and streamable HTTP servers without
    headers are taken; the others are reported through `warn` and left out."""
    out = []
    for s in servers or []:
        name = str(getattr(s, "name", "") or "")
        if not NAME.match(name):
            warn(f"MCP server {name!r} from the client left out: its name may only have "
                 "letters, digits, '_' and '-'")
            continue
        command, url = getattr(s, "command", None), getattr(s, "url", None)
        if command:
            env = tuple((e.name, e.value) for e in getattr(s, "env", None) or [])
            out.append(ServerSpec(name, command, tuple(getattr(s, "args", None) or ()), env))
        elif url and getattr(s, "type", "http") == "http" and not getattr(s, "headers", None):
            out.append(ServerSpec(name, url=url))
        else:
            warn(f"MCP server '{name}' from the client left out: only stdio servers and HTTP "
                 "servers without headers are supported")
    return tuple(out)

"""One frozen `Config`, built once: defaults < user file < repo `.specrc` < env < flags.

Files are TOML (`~/.config/spec-agent/config.toml`, then `.specrc` at the repo root); env vars
are `SPEC_AGENT_<KEY>` in upper case. `.specrc.example` documents every key. A repo's
`.specrc` comes with the code, possibly from a stranger, so it may not set the keys that
decide what runs without asking (`REPO_FORBIDDEN`): those belong to the user (file, env,
flags). Every value is range-checked once here. `load_config_sources` also says where each
value came from and `describe_config` turns that into rows for `spec-agent config show`
(printing them is the CLI's job). Imports nothing heavy: `--help` and `--version` stay fast.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from .choices import CHOICES, RANGES
from .safe_input import loads_toml


class ConfigError(Exception):
    exit_code = 2


# The model the agent runs when none is named: chosen by measured pass rate on `spec-agent eval`
# (the embedded SmolLM2-135M passed none of its tasks). With the openai engine an unset model
# means the server's first model instead.
DEFAULT_MODEL = "qwen2.5-coder-0.5b"


@dataclass(frozen=True)
class Config:
    model: str = "qwen2.5-coder-0.5b"  # DEFAULT_MODEL
    draft_model: str = ""
    device: str = "auto"  # auto | cpu | gpu
    blas: str = "auto"  # auto | off  (Linux CPU: preload OpenBLAS)
    speculation: str = "auto"  # auto | on | off
    drafter: str = "auto"  # auto | model | lookup | combined
    num_draft_tokens: int = 0  # 0 = K set by the draft's confidence (or adaptive), else pinned
    # The draft model ends a round once its own estimate that all the round's drafts are right
    # (the product of its probabilities of its drafts, before temperature) falls below this;
    # 0 = fixed-length rounds.
    draft_confidence: float = 0.5
    draft_vocab: int = 32768  # draft head over the first N ids + ids seen; 0 = full head
    # Token trees: several candidates per round, verified in one pass, sized by the measured
    # verify cost (auto) | off (one chain per round).
    tree: str = "off"
    tree_nodes: int = 32  # at most this many draft nodes per tree
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0  # 1 = off; > 1 makes tokens of the last 64 less likely
    max_tokens: int = 1024
    max_turns: int = 10
    approval_mode: str = "suggest"  # suggest | auto-edit | full-auto
    auto_commit: bool = True
    dirty_files: str = "commit"  # commit | stash | refuse: what to do with the user's uncommitted edits
    memory_headroom_gb: float = 8.0
    shell_timeout_s: float = 60.0
    constrained_calls: bool = True  # decode tool calls under a grammar (llguidance)
    tool_choice: str = "auto"  # auto | first (first turn opens with a call) | required (every turn)
    sandbox: str = "auto"  # auto (shell commands in an OS sandbox) | off (unsandboxed: dangerous)
    allow_network: bool = False  # shell commands may use the network inside the sandbox
    prefix_cache_mb: int = 1024  # KV caches of prompt prefixes kept in memory (0 = off)
    disk_cache_mb: int = 4096  # ... and on disk under <home>/prefix-cache (0 = off)
    kv_bits: int = 0  # 0 = full-precision KV cache; 4 or 8 = quantized (mlx-lm QuantizedKVCache)
    snapshot_max_count: int = 200  # work-tree snapshots kept (refs/spec-agent/snapshots)
    snapshot_max_age_days: float = 14.0  # ... and for how long
    engine: str = "local"  # local (in-process MLX) | openai (an OpenAI-compatible server)
    base_url: str = ""  # engine openai: the server, e.g. http://127.0.0.1:8080/v1
    connect_timeout_s: float = 10.0  # engine openai: connecting to the server
    read_timeout_s: float = 300.0  # engine openai: longest wait for the next bytes (first byte too)
    max_retries: int = 3  # engine openai: retries on connection errors and HTTP 429/503
    tool_format: str = "auto"  # auto (the model's own where it has one) | native | text
    # whole (reply with the whole new file) | diff (SEARCH/REPLACE blocks in the reply) |
    # auto (whole under 100 lines, else diff; core/searchreplace.py) | tool (edit_file/write_file)
    edit_format: str = "whole"
    attach_mentioned: bool = True  # files a message names are attached to it
    # with attach_mentioned, a larger repository's first message carries a map of the files
    # most relevant to it (their definitions), at most this many tokens; 0 = off
    repo_map_tokens: int = 1024
    # with attach_mentioned, files a message does not name but mentions names defined in
    # (never docs, change logs, licences, metadata or lock files) are attached up to this many
    # tokens in all (characters / 3); the rest are listed as not attached. 0 = none
    auto_attach_tokens: int = 4096
    suffix_index: bool = True  # lookup also drafts from this repository's earlier replies
    # environment variables shell commands get beyond the allowlist (tools/environ.py), e.g.
    # "MY_TOOL_TOKEN, NPM_*"; credentials (*_KEY, *_TOKEN, *_SECRET, ...) only when named here
    shell_env_passthrough: str = ""
    # The lint-and-test loop (agent/core/checks.py): after the agent edits files, compile the
    # edited .py files (and ruff's fatal rules when installed), run lint_cmd on the edited
    # files and test_cmd; a failure goes back to the model, at most max_fix_rounds times.
    auto_lint: bool = True
    lint_cmd: str = ""
    auto_test: bool = True  # run test_cmd (when set) after edits
    test_cmd: str = ""
    # With no test_cmd: a message that shows failing tests of files in the repository (pasted
    # pytest or unittest output) has those tests run after each edit (agent/core/testcmd.py;
    # only where the approval mode runs a sandboxed shell command without asking).
    infer_test_cmd: bool = True
    max_fix_rounds: int = 2  # per message; 0 = the loop is off
    # A reply that loops or repeats an earlier reply (word for word, or its code) is sampled
    # again at this temperature (agent/core/resample.py); 0 = never (the default: on the
    # Exercism tune subset it doubled the tokens and passed nothing more).
    resample_temperature: float = 0.0
    # What a failed test run (or a reply whose code was not applied, or one that only writes
    # the files as they stand to a message asking for a change) leads to while fix rounds
    # are left (agent/core/attempts.py):
    # "repair" (the failure goes back to the model), "resample" (a fresh reply to the
    # message, sampled without the failed attempts; the tests pick the best) or "auto"
    # (resample with edit_format "whole", repair otherwise). Either way the best tested
    # attempt of a message is kept when a later one is worse.
    fix_mode: str = "auto"
    # On, a whole-file code block not applied because it is a snippet (small models copy an
    # example from the message as the file) is answered, while fix rounds are left, by a reply
    # that begins with the file's path, an opening fence and the file's first line, so that
    # it writes the file (the fresh sample where fix_mode resamples; agent/core/conversation.py;
    # backends that cannot begin a reply, and fix rounds that are spent, answer as before).
    lead_refused: bool = False  # off: on 10 Exercism exercises it passed none more




# Keys that loosen safety: a cloned repo must not grant itself full-auto, longer commands,
# an unsandboxed shell or the network.
# Nor may it send the code (and the user's API key) to a server of its choosing, or make
# the snapshots that undo relies on expire early (a .specrc the agent itself wrote, too).
REPO_FORBIDDEN = ("approval_mode", "dirty_files", "shell_timeout_s", "sandbox", "allow_network",
                  "engine", "base_url", "snapshot_max_count", "snapshot_max_age_days",
                  "shell_env_passthrough", "lint_cmd", "test_cmd")  # the last three run commands or pass secrets

# key: (test, what the value must be)


def check_value(key: str, value: Any, where: str) -> Any:
    """`value` converted to `key`'s type and range-checked; ConfigError naming key and `where`."""
    types = {f.name: f.type for f in fields(Config)}
    if key not in types:
        raise ConfigError(f"{where}: unknown key '{key}' (see .specrc.example)")
    kind = types[key]
    try:
        if kind == "bool":
            if isinstance(value, str):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(value)
                value = value.lower() in ("1", "true", "yes", "on")
            value = bool(value)
        elif kind == "int":
            value = int(value)
        elif kind == "float":
            value = float(value)
        else:
            value = str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: '{key}' must be {kind}, got {value!r}") from None
    if key in CHOICES and value not in CHOICES[key]:
        raise ConfigError(f"{where}: '{key}' must be one of {sorted(CHOICES[key])}, got {value!r}")
    ok, must = RANGES.get(key, (None, ""))
    if ok is not None and (value != value or not ok(value)):  # value != value: NaN
        raise ConfigError(f"{where}: '{key}' must be {must}, got {value!r}")
    return value


def _read_toml(path: Path) -> dict[str, Any]:
    import tomllib

    try:
        return loads_toml(path.read_text())
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: {e}") from None


def workspace(args) -> Path:
    """The repository a command works in: `-C DIR` or the current folder."""
    root = Path(getattr(args, "repo", None) or Path.cwd())
    if not root.is_dir():
        raise ConfigError(f"{root}: not a directory")
    return root.resolve()


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "spec-agent" / "config.toml"


TABLES = ("mcp", "hooks")  # tables agent/extensions.py reads; not flat keys


def check_repo_tables(values: dict[str, Any], specrc: Path, user: Path) -> list[str]:
    """The server names a repo's `.specrc` enables; ConfigError for anything else it sets
    in `[mcp]` or `[hooks]`."""
    if "hooks" in values:
        raise ConfigError(f"{specrc}: hooks may not be set by a repository's .specrc (a cloned repo "
                     f"must not run programs); declare them in {user}")
    mcp = values.get("mcp", {})
    if not isinstance(mcp, dict):
        raise ConfigError(f"{specrc}: [mcp] must be a table")
    other = sorted(set(mcp) - {"enable"})
    if other:
        raise ConfigError(f"{specrc}: [mcp] may only name servers declared in {user} (enable = [...]); "
                     f"'{other[0]}' is not allowed: a cloned repo must not start a program")
    enable = mcp.get("enable", [])
    if not isinstance(enable, list) or not all(isinstance(n, str) for n in enable):
        raise ConfigError(f"{specrc}: [mcp] enable must be a list of strings")
    return list(enable)



def _file_layers(repo: Path | None) -> list[tuple[str, dict[str, Any]]]:
    """The user file then the repo's .specrc, each (path, values), where present."""
    layers: list[tuple[str, dict[str, Any]]] = []
    user, specrc = user_config_path(), (repo or Path.cwd()) / ".specrc"
    if user.is_file():
        values = _read_toml(user)
        layers.append((str(user), {k: v for k, v in values.items() if k not in TABLES}))
    if specrc.is_file():
        values = _read_toml(specrc)
        check_repo_tables(values, specrc, user)
        values = {k: v for k, v in values.items() if k not in TABLES}
        for key in REPO_FORBIDDEN:
            if key in values:
                raise ConfigError(
                    f"{specrc}: '{key}' may not be set by a repository's .specrc (a cloned repo "
                    f"could loosen its own safety); set it in {user}, with SPEC_AGENT_{key.upper()} "
                    f"or with --{key.replace('_', '-')}")
        layers.append((str(specrc), values))
    return layers


def load_config_sources(
    repo: Path | None = None, flags: dict[str, Any] | None = None
) -> tuple[Config, dict[str, str]]:
    """The Config of `load_config` plus, per field, where its value came from.

    A source is "default", the user file's path, the .specrc's path,
    "environment (SPEC_AGENT_<KEY>)" or "command line"; the last layer setting a key wins.
    """
    layers = _file_layers(repo)
    for f in fields(Config):
        var = f"SPEC_AGENT_{f.name.upper()}"
        if var in os.environ:  # one layer per variable: errors and sources name it
            layers.append((f"environment ({var})", {f.name: os.environ[var]}))
    layers.append(("command line", {k: v for k, v in (flags or {}).items() if v is not None}))
    cfg = Config()
    sources = {f.name: "default" for f in fields(Config)}
    for where, values in layers:
        cfg = replace(cfg, **{k: check_value(k, v, where) for k, v in values.items()})
        sources.update(dict.fromkeys(values, where))
    if cfg.engine == "openai" and sources["model"] == "default":
        cfg = replace(cfg, model="default")  # a server's own first model, not a local one
    return cfg, sources


def load_config(repo: Path | None = None, flags: dict[str, Any] | None = None) -> Config:
    """Build the Config: defaults < user file < repo .specrc < env < flags (None = unset)."""
    return load_config_sources(repo, flags)[0]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    return repr(value)


def describe_config(cfg: Config, sources: dict[str, str]) -> list[tuple[str, str, str]]:
    """(key, value as TOML text, source) for every field, in declaration order."""
    return [(f.name, _toml_value(getattr(cfg, f.name)), sources.get(f.name, "default"))
            for f in fields(Config)]

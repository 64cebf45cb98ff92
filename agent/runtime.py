"""Build what a command needs from the Config, and keep it for the UIs: models, drafter,
session, the model adapter, the tool context, git, and the conversation.

`Runtime` is what every UI (`-p`, the TUI, the REPL) drives: one `ToolContext` built once and
handed to both the model adapter and the conversation, settings that can change between
messages (`/model`, `/draft`, `/k`, `/speculation`, `/mode`), and resumable conversations.
Loading models is slow: UIs call the loading methods off their UI thread.
"""

from __future__ import annotations

import atexit
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tools import ToolContext, git
from tools.environ import parse_passthrough
from tools.sandbox import resolve as resolve_sandbox

from . import store
from .choices import BLOCK_EDIT_FORMATS
from .config import Config, ConfigError, check_value
from .core.git import GitGuard
from .core.snapshots import UNTRACKED_FILE_MAX

if TYPE_CHECKING:
    from .core.conversation import Conversation
    from .core.history import HistoryStore
    from .engine import LoadedModel, PrefixStore, Session, SuffixFile


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80]


def prefix_store(cfg: Config, warn: Callable[[str], None] | None = None):
    """The prefix store the config asks for, under the store's home (None when both tiers are off)."""
    from .engine import PrefixStore

    if cfg.prefix_cache_mb <= 0 and cfg.disk_cache_mb <= 0:
        return None
    return PrefixStore(store.home() / "prefix-cache", cfg.prefix_cache_mb, cfg.disk_cache_mb, warn)


def sampling_params(cfg: Config):
    from .engine import SamplingParams

    return SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k, cfg.min_p,
                          repetition_penalty=cfg.repetition_penalty)


def tool_format(cfg: Config) -> str:
    """The tool format in effect: "auto" means the model's own format, except for the local
    engine with code-block edits ("whole", "diff", "auto"), where it means text (measured with
    Qwen2.5-Coder-0.5B and "whole" on the eval's tune tasks: its template's JSON schemas led it
    to answer with schema-like JSON instead of code). Servers keep their native `tools`
    parameter."""
    if cfg.tool_format == "auto" and cfg.edit_format in BLOCK_EDIT_FORMATS and cfg.engine == "local":
        return "text"
    return cfg.tool_format


def open_openai(cfg: Config, tools: Any = None):
    """The OpenAI-compatible backend for `cfg` (no request is made until the first turn)."""
    from .backends.openai import ApiOptions, OpenAIBackend, api_key_from_env

    if not cfg.base_url:
        raise ConfigError("engine 'openai' needs a server: --base-url URL (e.g. http://127.0.0.1:8080/v1)")
    opts = ApiOptions(cfg.base_url, cfg.model, api_key_from_env(), cfg.connect_timeout_s,
                      cfg.read_timeout_s, cfg.max_retries, native_tools=tool_format(cfg) != "text",
                      temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                      tool_choice=cfg.tool_choice)
    if tools is None:
        from .core.prompt import tools_for

        tools = tools_for(cfg.edit_format)
    return OpenAIBackend(opts, tools)


# Settings a UI may change between messages, and what changing them needs.
LIVE_KEYS = {"model": "reload", "draft_model": "reload", "num_draft_tokens": "speculator",
             "speculation": "speculator", "drafter": "speculator", "tree": "speculator",
             "tree_nodes": "speculator", "approval_mode": "conversation",
             "temperature": "sampling", "max_tokens": "sampling",
             "repetition_penalty": "sampling"}


class Runtime:
    """The engine, the tools and the conversation for one workspace.

    `model` may be given (tests pass a scripted one); otherwise the local MLX engine is
    loaded from `cfg` by `load()`. `history` (agent.core.history.HistoryStore) makes
    conversations persistent."""

    def __init__(self, cfg: Config, root: Path, *, model: Any = None, history: HistoryStore | None = None,
                 approver: Any = None, warn: Callable[[str], None] | None = None):
        self.cfg, self.root = cfg, root.resolve()
        self.warn = warn or (lambda m: print(f"spec-agent: warning: {m}", file=sys.stderr))
        self.git = GitGuard.open(self.root, cfg.dirty_files, cfg.auto_commit)
        sandbox, why = resolve_sandbox(cfg.sandbox)
        if why:
            self.warn(why)
        self.ctx = ToolContext(self.root, cfg.shell_timeout_s, in_git=self.git.enabled,
                               sandbox=sandbox, allow_network=cfg.allow_network,
                               env_passthrough=parse_passthrough(cfg.shell_env_passthrough),
                               keep_unsaved_over=UNTRACKED_FILE_MAX if self.git.enabled else 0,
                               repo_map_tokens=cfg.repo_map_tokens)
        self.history, self.approver = history, approver
        self.session: Session | None = None
        self.model = model
        self.draft: LoadedModel | None = None  # the loaded draft model, kept across speculator rebuilds
        self.store: PrefixStore | None = None  # the PrefixStore, kept across model reloads
        self.conversation: Conversation | None = None
        self.suffix: SuffixFile | None = None  # the suffix index of earlier replies (local engine)
        from .extensions import load as load_extensions

        self.ext = load_extensions(self.root)  # [mcp] servers and [hooks]: ConfigError if bad
        self.mcp: Any = None  # agent.mcp.McpManager once started
        self._mcp_lock = threading.Lock()  # ACP may start servers while the model loads
        self.notices: list[str] = []  # what starting the MCP servers reported, for the UIs

    # ---- engine ---------------------------------------------------------------------------

    def load(self) -> None:
        """Open the backend the config names: load the local models (slow) and build the model
        adapter, or connect to an OpenAI-compatible server (`engine = "openai"`)."""
        if self.cfg.engine == "openai":
            self.start_mcp()
            self.use_model(open_openai(self.cfg))
            return
        from .backends.local import LocalModel
        from .core.prompt import tools_for
        from . import models
        from .engine import Session, preload_warnings, select_device

        cfg = self.cfg
        self.start_mcp()  # before the model adapter: the grammar admits the servers' tools
        target_at = str(models.resolve(cfg.model)[1])  # a model not pulled: one error, before loading
        draft_at = str(models.resolve(cfg.draft_model)[1]) if cfg.draft_model else None
        for w in preload_warnings(target_at, draft_at, select_device(cfg.device), cfg.memory_headroom_gb):
            self.warn(w)
        target = models.load(cfg.model, device=cfg.device)
        self.draft = models.load(cfg.draft_model, device=cfg.device) if cfg.draft_model else None
        if self.store is None:
            self.store = prefix_store(cfg, self.warn)
        self.suffix = self._suffix_file(target)
        self.session = Session(target, speculator=self._speculator(target), store=self.store,
                               kv_bits=cfg.kv_bits)
        model = LocalModel(self.session, sampling_params(cfg), cfg.max_tokens, self.ctx,
                                constrain=cfg.constrained_calls, tool_choice=cfg.tool_choice,
                                tool_format=tool_format(cfg), tools=tools_for(cfg.edit_format),
                                suffix=self.suffix)
        if cfg.tool_format == "native" and not model.native_tools:
            self.warn(f"{target.name}'s chat template has no tool-call format; tools are "
                      "described in the system prompt instead")
        self.use_model(model)  # (a conversation resumed before the models were loaded too)

    def _speculator(self, target: LoadedModel):
        """The engine's speculator for the config's speculation settings over `target` and the
        loaded draft model (None: plain decoding)."""
        from .engine import SpecSettings, make_speculator

        suffix = self.suffix.index if self.suffix is not None else None
        return make_speculator(SpecSettings.from_config(self.cfg), target, self.draft, warn=self.warn,
                               suffix=suffix)

    def _suffix_file(self, target: LoadedModel):
        """The suffix index of this repository's earlier replies with `target`, beside its
        conversations (None when off or without saved conversations)."""
        if not self.cfg.suffix_index or self.history is None:
            return None
        from .engine import SuffixFile

        key = f"{target.name}-{target.vocab_size}"
        found, why = SuffixFile.open(self.history.dir / f"suffix-{_safe_name(key)}.json", key)
        if why:
            self.warn(why)
        return found

    def use_model(self, model: Any) -> None:
        """Talk to `model` from now on, in the current conversation too."""
        self.model = model
        if self.conversation is not None:
            self.conversation.set_model(model)

    @property
    def model_name(self) -> str:
        if self.session is not None:
            return self.session.target.name
        # a server: "openai host:port · model" (agent/core/backend.py)
        label = self.model.capabilities.label if self.model is not None else ""
        return label if label and label != "local" else self.cfg.model

    @property
    def draft_name(self) -> str:
        if self.draft is not None:
            return self.draft.name
        spec = getattr(self.session, "speculator", None)
        return spec.drafter.name if spec is not None else ""

    def set(self, key: str, value: Any) -> str:
        """Change one live setting (see LIVE_KEYS); returns what changed. Raises ConfigError
        for an unknown key or a bad value. `model`/`draft_model` reload weights (slow)."""
        if key not in LIVE_KEYS:
            raise ConfigError(f"'{key}' cannot be changed while running")
        self.cfg = replace(self.cfg, **{key: check_value(key, value, "command")})
        need = LIVE_KEYS[key]
        if self.conversation is not None:
            self.conversation.set_config(self.cfg)
        if self.cfg.engine == "openai" and need in ("reload", "sampling"):
            self.load()  # a new client with the new settings (the conversation keeps its history)
        if self.session is None:  # a server or a scripted model: only the config changes
            return f"{key} = {getattr(self.cfg, key)!r}"
        if need == "reload":
            self.load()
        elif need == "speculator":
            self.session.set_speculator(self._speculator(self.session.target))
        elif need == "sampling":
            self.model.set_sampling(sampling_params(self.cfg), self.cfg.max_tokens)
        return f"{key} = {getattr(self.cfg, key)!r}"

    # ---- conversations ----------------------------------------------------------------------

    def set_approver(self, approver: Any) -> None:
        """Who answers approvals from now on (the UI's dialog or prompt), in this conversation
        and the next ones."""
        self.approver = approver
        if self.conversation is not None:
            self.conversation.approver = approver

    def hooks(self, session_id: str) -> Any:
        """The user's hooks for conversation `session_id`, or None when there are none."""
        if not self.ext.hooks:
            return None
        from .core.hooks import HookRunner

        return HookRunner(self.ext.hooks, session_id, self.root)

    # ---- MCP servers ------------------------------------------------------------------------

    def start_mcp(self, extra: tuple = ()) -> None:
        """Start the configured MCP servers (once per Runtime; `extra`: ServerSpecs an ACP client
        passed) and offer their tools: to the model adapter and to a conversation that has no
        user message yet (its system prompt is rebuilt). Problems become warnings."""
        with self._mcp_lock:
            self._start_mcp(extra)

    def _start_mcp(self, extra: tuple) -> None:
        if self.mcp is None:
            if not self.ext.servers and not extra:
                return
            from . import store
            from .mcp import McpManager

            self.mcp = McpManager(self.ext, store.home() / "mcp", self._notice)
            atexit.register(self.close)  # the UIs close it themselves; this covers the rest
        if self.mcp.started and not extra:
            return
        self.mcp.start(tuple(extra))
        from .core.prompt import system_prompt, tools_for

        if self.model is not None:  # what the backend's grammar and tool schemas admit
            self.model.tools = tools_for(self.cfg.edit_format)
        conv = self.conversation
        if conv is not None and conv.user_messages == 0 and conv.messages:
            native = conv.model is not None and conv.model.capabilities.native_tools
            conv.messages[0] = {"role": "system", "content": system_prompt(
                self.root, native, self.cfg.edit_format)}

    def _notice(self, message: str) -> None:
        self.notices.append(message)
        self.warn(message)

    def close(self) -> None:
        """Stop the MCP servers (the UIs call this on exit)."""
        mcp = getattr(self, "mcp", None)  # a Runtime made without __init__ (tests) has none
        if mcp is not None:
            mcp.close()
            self.mcp = None

    def new_conversation(self, messages: list[dict[str, str]] | None = None, conv_id: str = ""):
        """Start (or, with `messages`, resume) the conversation UIs send to. With a model
        already there (a scripted one, or after `load`), the MCP servers are started first."""
        from .core.conversation import Conversation, new_id

        if self.model is not None:
            self.start_mcp()

        conv_id = conv_id or new_id()
        record = self.history.recorder(conv_id) if self.history is not None else None
        if messages and record is None:
            raise ConfigError("resuming needs the history store")
        self.conversation = Conversation(self.model, self.ctx, self.cfg, git=self.git,
                                         approver=self.approver, messages=messages,
                                         conv_id=conv_id, on_message=record)
        self.conversation.hooks = self.hooks(self.conversation.id)
        return self.conversation

    def resume(self, which: str) -> Conversation:
        """Resume conversation `which` ("last" = the newest one for this repository)."""
        from .core.history import HistoryError

        if self.history is None:
            raise ConfigError("no conversation history store")
        conv_id = self.history.latest() if which == "last" else which
        for w in self.history.warnings:
            self.warn(w)
        self.history.warnings.clear()
        if conv_id is None:
            raise HistoryError(f"no earlier conversation in {self.root}")
        return self.new_conversation(self.history.load(conv_id), conv_id)

    # ---- workspace --------------------------------------------------------------------------

    def git_info(self) -> tuple[str, int]:
        """(branch, number of files with uncommitted changes); ("", 0) outside git."""
        if not self.git.enabled:
            return "", 0
        branch = git.run(self.root, "rev-parse", "--abbrev-ref", "HEAD", check=False, timeout=5).stdout.strip()
        status = git.run(self.root, "status", "--porcelain", "--untracked-files=normal", check=False, timeout=5).stdout
        return branch, sum(1 for line in status.splitlines() if line.strip())

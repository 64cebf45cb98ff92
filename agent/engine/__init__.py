"""The inference engine: loading, sampling, plain and speculative decoding, sessions.

A library: it yields events from `agent.events` and imports no UI toolkit. Everything outside
the engine imports from here, never from its modules (tests/test_engine_api.py checks it):

    lm = load_model(path)
    session = Session(lm, speculator=make_speculator(SpecSettings(drafter="lookup"), lm))
    prompt = render_chat(lm.tokenizer, messages)
    for event in session.generate(prompt, SamplingParams()): ...  # agent.events
    text = session.complete(prompt).text  # the same turn, collected

The names load on first use (PEP 562 `__getattr__`), so `import agent.engine` loads no MLX:
the command line's `--help` and `ensure_openblas` (which must run before MLX loads) stay fast.
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it as True)

__all__ = [
    # loading
    "LoadedModel", "load_model", "resolve_model", "select_device", "preload_warnings",
    "release_streams",
    # sessions: chat rendering, streaming generation, the prefix store, the suffix index
    "Session", "render_chat", "PrefixStore", "SuffixFile", "SuffixIndex",
    # sampling
    "SamplingParams", "apply_mask",
    # speculation: settings and their builder, and the parts it builds from
    "SpecSettings", "make_speculator", "Speculator", "SpecPolicy", "TreeBudget", "VerifyCost",
    "Drafter", "DraftModel", "PromptLookup", "Combined",
    # the layers below a session: one forward pass, a prefill, a KV cache
    "forward", "prefill", "make_cache",
    # the CPU's BLAS
    "ensure_openblas", "loaded_blas",
    # errors (each with its `exit_code`)
    "SpecAgentError", "ModelLoadError", "ModelNotFoundError", "PairingError", "SettingsError",
    "ContextOverflowError", "InputError",
]

# name -> (module under agent.engine, attribute there)
_EXPORTS: dict[str, tuple[str, str]] = {
    "LoadedModel": ("loading", "LoadedModel"),
    "load_model": ("loading", "load_model"),
    "resolve_model": ("loading", "resolve"),
    "select_device": ("loading", "select_device"),
    "release_streams": ("loading", "release_streams"),
    "preload_warnings": ("pairing", "preload_warnings"),
    "Session": ("session", "Session"),
    "render_chat": ("session", "render_chat"),
    "PrefixStore": ("prefix_store", "PrefixStore"),
    "SuffixFile": ("suffix", "SuffixFile"),
    "SuffixIndex": ("suffix", "SuffixIndex"),
    "SamplingParams": ("sampling", "SamplingParams"),
    "apply_mask": ("sampling", "apply_mask"),
    "SpecSettings": ("settings", "SpecSettings"),
    "make_speculator": ("settings", "make_speculator"),
    "Speculator": ("speculative", "Speculator"),
    "SpecPolicy": ("speculative", "SpecPolicy"),
    "TreeBudget": ("tree", "TreeBudget"),
    "VerifyCost": ("tree", "VerifyCost"),
    "Drafter": ("drafters", "Drafter"),
    "DraftModel": ("drafters", "DraftModel"),
    "PromptLookup": ("drafters", "PromptLookup"),
    "Combined": ("drafters", "Combined"),
    "forward": ("step", "forward"),
    "prefill": ("step", "prefill"),
    "make_cache": ("cache", "make_cache"),
    "ensure_openblas": ("blas", "ensure_openblas"),
    "loaded_blas": ("blas", "loaded_blas"),
    "SpecAgentError": ("errors", "SpecAgentError"),
    "ModelLoadError": ("errors", "ModelLoadError"),
    "ModelNotFoundError": ("errors", "ModelNotFoundError"),
    "PairingError": ("errors", "PairingError"),
    "SettingsError": ("errors", "SettingsError"),
    "ContextOverflowError": ("session", "ContextOverflowError"),
    "InputError": ("bounded", "InputError"),
}


def __getattr__(name: str) -> object:
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(import_module(f".{module}", __name__), attr)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from .blas import ensure_openblas, loaded_blas
    from .bounded import InputError
    from .cache import make_cache
    from .drafters import Combined, Drafter, DraftModel, PromptLookup
    from .errors import (ModelLoadError, ModelNotFoundError, PairingError, SettingsError,
                         SpecAgentError)
    from .loading import LoadedModel, load_model, select_device
    from .loading import resolve as resolve_model
    from .pairing import preload_warnings
    from .prefix_store import PrefixStore
    from .sampling import SamplingParams, apply_mask
    from .session import ContextOverflowError, Session, render_chat
    from .settings import SpecSettings, make_speculator
    from .speculative import SpecPolicy, Speculator
    from .step import forward, prefill
    from .suffix import SuffixFile, SuffixIndex
    from .tree import TreeBudget, VerifyCost

"""Models by name: the store's names (`spec-agent models list`) resolved to their files, then
the engine's loader, handed where converted weights are cached and the files' known digests.

The engine itself knows nothing of the store; everything that loads a model by name (the
runtime, the benches, the tests) comes through here. A path or Hub id passes through as is.
"""

from __future__ import annotations

from pathlib import Path

from . import store
from .engine import LoadedModel, ModelNotFoundError, load_model
from .engine import resolve_model as resolve_path

_EMBEDDED_NAMES = (None, "", "default", "embedded")


def resolve(ref: str | None) -> tuple[str, Path | str]:
    """('gguf'|'mlx', path or hub id) for a store name, a path or a Hub id; a store model
    not pulled yet is a ModelNotFoundError that says how to fetch it."""
    if ref in _EMBEDDED_NAMES or ref in store.KNOWN:
        m = store.lookup(ref)
        p = store.model_path(m)
        if not p.is_file():
            which = "the embedded model" if m is store.DEFAULT_MODEL else "model"
            hint = f"{store.PULL_HINT} {'embedded' if m is store.DEFAULT_MODEL else m.name}"
            raise ModelNotFoundError(f"{which} '{m.name}' is not downloaded yet; fetch it with: {hint}")
        return "gguf", p
    return resolve_path(ref)


def load(ref: str | None = None, device: str = "auto", dense: bool | None = None) -> LoadedModel:
    """Load the model `ref` names (None: the embedded SmolLM2) for the engine."""
    _, where = resolve(ref)
    return load_model(str(where), device=device, dense=dense, cache=store.converted_root(),
                      sha256=store.pinned_sha256(Path(where)) if isinstance(where, Path) else "",
                      name=ref if ref in store.KNOWN else "")

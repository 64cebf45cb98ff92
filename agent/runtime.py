"""Build the engine a command needs from the Config: models, drafter, session, sampling."""

from __future__ import annotations

import sys
from typing import Callable

from .config import Config, ConfigError


def sampling_params(cfg: Config):
    from .engine.sampling import SamplingParams

    try:
        return SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k, cfg.min_p).validate()
    except ValueError as e:
        raise ConfigError(str(e)) from None


def make_speculator(cfg: Config, target, draft=None, warn: Callable[[str], None] | None = None):
    """The Speculator the config asks for, or None for plain decoding."""
    from .engine.drafters import Combined, DraftModel, PromptLookup
    from .engine.pairing import check_tokenizers, pairing_warnings
    from .engine.session import ModelCache
    from .engine.speculative import SpecPolicy, Speculator

    say = warn or (lambda m: print(f"spec-agent: warning: {m}", file=sys.stderr))
    if cfg.speculation == "off":
        return None
    for lm in (target, draft):
        if lm is not None and not ModelCache(lm).rewindable:
            say(f"speculation off: {lm.name}'s cache cannot drop rejected tokens "
                "(sliding-window or recurrent layers)")
            return None
    if cfg.num_draft_tokens < 0 or cfg.num_draft_tokens > 32:
        raise ConfigError("num_draft_tokens must be between 0 (adaptive) and 32")
    kind = cfg.drafter
    if kind == "auto":
        kind = "combined" if draft is not None else "lookup"
    if kind in ("model", "combined") and draft is None:
        raise ConfigError(f"drafter '{kind}' needs --draft-model")
    if draft is not None:
        check_tokenizers(target, draft)
        limit = int(getattr(target.model.args, "max_position_embeddings", 0) or 4096)
        for w in pairing_warnings(target, draft, limit, cfg.memory_headroom_gb):
            say(w)
    if not 0.0 <= cfg.draft_confidence < 1.0:
        raise ConfigError("draft_confidence must be in [0, 1)")
    if kind != "lookup":
        # Same tokenizer, but embedding tables may be padded to different widths.
        model = DraftModel(draft, cfg.draft_confidence, min(target.vocab_size, draft.vocab_size))
    drafter = (PromptLookup() if kind == "lookup" else model if kind == "model"
               else Combined(model, PromptLookup()))
    policy = SpecPolicy(mode=cfg.speculation, fixed_k=cfg.num_draft_tokens)
    return Speculator(drafter, policy)


def open_session(cfg: Config, warn: Callable[[str], None] | None = None):
    """Load the target (and draft) models and return a fresh `Session`."""
    from .engine.loading import load_model
    from .engine.session import Session

    target = load_model(cfg.model, device=cfg.device)
    draft = load_model(cfg.draft_model, device=cfg.device) if cfg.draft_model else None
    return Session(target, speculator=make_speculator(cfg, target, draft, warn))

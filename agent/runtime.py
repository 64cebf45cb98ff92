"""Build the engine a command needs from the Config: models, session, sampling parameters."""

from __future__ import annotations

from .config import Config


def sampling_params(cfg: Config):
    from .engine.sampling import SamplingParams

    try:
        return SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k, cfg.min_p).validate()
    except ValueError as e:
        from .config import ConfigError

        raise ConfigError(str(e)) from None


def open_session(cfg: Config):
    """Load the target (and draft) models and return a fresh `Session`."""
    from .engine.loading import load_model
    from .engine.session import Session

    target = load_model(cfg.model, device=cfg.device)
    return Session(target)

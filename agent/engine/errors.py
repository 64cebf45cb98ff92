"""Errors the engine raises for bad input; the CLI turns each into one line and its `exit_code`
(2 for a bad model reference, file or pairing; 1 for the rest)."""


class SpecAgentError(Exception):
    """Base for expected failures that get one clear message, no traceback."""

    exit_code = 1


class ModelLoadError(SpecAgentError):
    """A model reference could not be resolved or its files are unusable."""

    exit_code = 2


class ModelNotFoundError(ModelLoadError):
    pass


class PairingError(SpecAgentError):
    """A draft model cannot be paired with the target (e.g. different tokenizers)."""

    exit_code = 2


class SettingsError(SpecAgentError):
    """Engine settings that cannot work together (a model drafter without a draft model) or
    out of range."""

    exit_code = 2

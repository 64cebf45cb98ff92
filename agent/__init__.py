"""spec-agent: a local coding agent on MLX with an exact speculative-decoding engine."""

import os as _os

# transformers (imported for its tokenizers) advises on import that PyTorch is missing; the
# agent never uses PyTorch, so that line is noise on every run's stderr. Set before any
# import of transformers; a user's own setting wins.
_os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

__version__ = "0.1.0"

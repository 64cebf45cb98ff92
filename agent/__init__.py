"""spec-agent: a local coding agent on MLX with an exact speculative-decoding engine."""

__version__ = "0.1.0"

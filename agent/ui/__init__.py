"""The user interfaces: `render` (the `-p` output), `tui` (Textual), `repl` (prompt-toolkit),
and `slash` (the slash commands both interactive UIs share). They consume events only."""

from __future__ import annotations

import sys


def free_mlx_streams() -> None:
    """Free the calling thread's MLX streams, if MLX is loaded. MLX frees them only on the
    thread that made them; a thread that ran model work and ends holding them can abort the
    process at exit ("terminate called without an active exception"). The engine's
    `release_streams` does the same below the UIs; a UI calls this on its engine thread as
    that thread's last MLX work."""
    mx = sys.modules.get("mlx.core")
    if mx is not None and hasattr(mx, "clear_streams"):
        mx.clear_streams()

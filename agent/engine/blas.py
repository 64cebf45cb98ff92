"""Make MLX's CPU BLAS calls go to OpenBLAS on Linux.

The Linux `mlx-cpu` wheel links the reference (netlib) BLAS, which does not block matrix
products: verifying 8 tokens costs ~8 single steps and speculation cannot win. Debian's
OpenBLAS, preloaded before the process starts, takes over those cblas symbols (FACTS §1).
LD_PRELOAD only works at exec time, so the CLI re-executes itself once. Imports nothing heavy.
"""

from __future__ import annotations

import glob
import os
import platform
import sys

_REEXEC_FLAG = "SPEC_AGENT_BLAS_REEXEC"


def openblas_library() -> str | None:
    """Path of Debian's pthread OpenBLAS, if installed."""
    machine = platform.machine()
    for pattern in (
        f"/usr/lib/{machine}-linux-gnu/openblas-pthread/libopenblas.so.0",
        "/usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0",
        "/usr/lib64/libopenblas.so.0",
    ):
        hits = glob.glob(pattern)
        if hits:
            return hits[0]
    return None


def loaded_blas() -> str:
    """Which BLAS this process has mapped: 'openblas', 'reference', or 'system' (macOS)."""
    if sys.platform == "darwin":
        return "system"
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return "unknown"
    if "libopenblas" in maps:
        return "openblas"
    return "reference" if "libblas" in maps else "not loaded"


def ensure_openblas(mode: str = "auto") -> str | None:
    """Re-exec this process with OpenBLAS preloaded when useful; returns a warning or None.

    `mode`: "auto" (preload when available), "off" (keep the reference BLAS).
    Returns only when no re-exec happened.
    """
    if sys.platform != "linux" or mode == "off":
        return None
    if "libopenblas" in os.environ.get("LD_PRELOAD", ""):
        return None
    if os.environ.get(_REEXEC_FLAG):
        return "spec-agent: OpenBLAS preload did not take effect; CPU decoding uses the reference BLAS"
    lib = openblas_library()
    if lib is None:
        return (
            "spec-agent: warning: OpenBLAS not found; CPU decoding runs ~3x slower and speculation "
            "cannot pay off (install Debian's libopenblas0-pthread)"
        )
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    env[_REEXEC_FLAG] = "1"
    argv = [sys.executable, *sys.orig_argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
    return None  # not reached

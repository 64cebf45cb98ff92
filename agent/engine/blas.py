"""Make MLX's CPU BLAS calls go to OpenBLAS on Linux.

The Linux `mlx-cpu` wheel links the reference (netlib) BLAS, which does not block matrix
products: verifying 8 tokens costs ~8 single steps and speculation cannot win. Debian's
OpenBLAS, preloaded before the process starts, takes over those cblas symbols.
LD_PRELOAD only works at exec time, so the CLI re-executes itself once. Imports nothing heavy.

Debian's OpenBLAS 0.3.21 does not recognise recent Xeons and falls back to its generic
"Prescott" kernels, ~5x slower for prefill-sized products than "SkylakeX". So the
re-exec also sets `OPENBLAS_CORETYPE` from the CPU's flags, unless the user set it, and only
after a one-off check (a subprocess, its verdict cached under the store) that a matrix product
through MLX with that kernel set matches a float64 reference.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from .bounded import InputError, read_json

_REEXEC_FLAG = "SPEC_AGENT_BLAS_REEXEC"
_MAX_REL_ERROR = 1e-4


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


def ensure_openblas(mode: str = "auto", verdicts: Path | None = None) -> str | None:
    """Re-exec this process with OpenBLAS preloaded when useful; returns a warning or None.

    `mode`: "auto" (preload when available), "off" (keep the reference BLAS); `verdicts`: the
    file `verified_coretype` keeps its checks in.
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
    if "OPENBLAS_CORETYPE" not in env:
        coretype = verified_coretype(lib, verdicts)
        if coretype:
            env["OPENBLAS_CORETYPE"] = coretype
    argv = [sys.executable, *sys.orig_argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
    return None  # not reached


# --- OpenBLAS kernel choice -----------------------------------------------------------------


def cpu_info() -> tuple[str, set[str]]:
    """(model name, flags) of the first CPU in /proc/cpuinfo; ("", set()) where unreadable."""
    name, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not name:
                    name = value.strip()
                elif key == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return name, flags


def coretype_for(flags: set[str]) -> str | None:
    """The OpenBLAS kernel set these CPU flags can run, or None (let OpenBLAS detect)."""
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


# Run in a subprocess with the candidate environment: an sgemm through MLX at the shapes of a
# prefill chunk, a verify pass and a decode step, plain and transposed, against float64.
_CHECK = """
import mlx.core as mx
import numpy as np
mx.set_default_device(mx.cpu)
rng = np.random.default_rng(0)
worst = 0.0
for m, k, n in ((512, 576, 1536), (8, 576, 1536), (1, 576, 1536), (130, 64, 300)):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    for got in (mx.matmul(mx.array(a), mx.array(b).T), mx.matmul(mx.array(b), mx.array(a).T).T):
        worst = max(worst, float(np.abs(np.array(got) - ref).max() / np.abs(ref).max()))
maps = open("/proc/self/maps").read()
print(worst if "libopenblas" in maps else "no-openblas")
"""


def check_coretype(lib: str, coretype: str, timeout: float = 120.0) -> float | None:
    """Largest relative error of MLX matrix products with `lib` preloaded under `coretype`;
    None when the check could not run (crash, timeout, OpenBLAS not mapped)."""
    env = {**os.environ, "LD_PRELOAD": lib, "OPENBLAS_CORETYPE": coretype}
    env.pop(_REEXEC_FLAG, None)
    try:
        proc = subprocess.run([sys.executable, "-c", _CHECK], env=env, capture_output=True,
                              text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    try:
        return float(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (IndexError, ValueError):
        return None


def verified_coretype(lib: str, verdicts: Path | None = None) -> str | None:
    """The coretype to force for `lib` on this CPU, or None; checked once, then cached on disk.

    The cache key names the CPU model, the kernel set and the real library file (a new
    OpenBLAS version is checked again) in the `verdicts` file (None: not kept; the CLI's is
    `<store>/blas-coretype.json`). A failed check is remembered too: delete it to check again.
    """
    name, flags = cpu_info()
    coretype = coretype_for(flags)
    if coretype is None:
        return None
    key = f"{name}|{coretype}|{os.path.realpath(lib)}"
    path = verdicts
    try:
        seen = read_json(path, 1 << 20, follow=False) if path else {}  # a cache: bounded, no FIFO
    except (OSError, InputError):
        seen = {}
    if not isinstance(seen, dict) or not isinstance(seen.get(key, {}), dict):
        seen = {}  # not ours: start again
    if key not in seen:
        error = check_coretype(lib, coretype)
        seen[key] = {"ok": error is not None and error < _MAX_REL_ERROR, "rel_error": error}
        try:
            if path:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(seen, indent=1))
                tmp.replace(path)
        except OSError:
            pass  # unwritable store: check again next time
    return coretype if seen[key].get("ok") else None


if __name__ == "__main__":  # `python -m agent.engine.blas coretype LIB [VERDICTS]`: for the Makefile
    if len(sys.argv) in (3, 4) and sys.argv[1] == "coretype":
        print(verified_coretype(sys.argv[2], Path(sys.argv[3]) if len(sys.argv) == 4 else None) or "")
    else:
        sys.exit("usage: python -m agent.engine.blas coretype LIBOPENBLAS [VERDICTS_FILE]")

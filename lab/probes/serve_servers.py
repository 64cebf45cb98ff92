"""Servers for the serve-goal probes: `spec-agent serve` and `mlx_lm server` as child processes
on free loopback ports, their RSS, and MLX folders of the store's models for mlx-lm.

Only the probes in lab/probes/serve_*.py import this.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

import httpx

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(os.environ.get("SERVE_GOALS_WORK", "/tmp/serve-goals"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mem_available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1 << 20)
    return 0.0


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


class Server:
    """A server child process; `url` is its API root."""

    def __init__(self, label: str, cmd: list[str], env: dict[str, str], port: int):
        WORK.mkdir(parents=True, exist_ok=True)
        self.label, self.port = label, port
        self.url = f"http://127.0.0.1:{port}/v1"
        self.log = WORK / f"{label}-{port}.log"
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
                                     env=env, cwd=ROOT)

    def wait(self, timeout: float = 600.0) -> Server:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.label} did not start: {self.log.read_text()[-3000:]}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_mb(self) -> float:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def ours(label: str, *args: str, env: dict[str, str] | None = None) -> Server:
    """`spec-agent serve ARGS` (the CLI preloads OpenBLAS itself)."""
    port = free_port()
    cmd = [str(ROOT / ".venv/bin/spec-agent"), "serve", "--port", str(port), *args]
    return Server(label, cmd, {**os.environ, **(env or {})}, port)


def mlx_env() -> dict[str, str]:
    """mlx_lm server's environment: OpenBLAS preloaded with the verified kernel set, as the
    CLI runs the engine (tests/test_mlx_server.py does the same); no Hub access."""
    from agent import store
    from agent.engine import blas

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LD_PRELOAD": ""}
    lib = blas.openblas_library() if sys.platform == "linux" else None
    if lib:
        env["LD_PRELOAD"] = lib
        coretype = blas.verified_coretype(lib, store.home() / "blas-coretype.json")
        if coretype:
            env["OPENBLAS_CORETYPE"] = coretype
    return env


def mlx_lm(label: str, model: Path, *args: str) -> Server:
    port = free_port()
    cmd = [sys.executable, "-m", "mlx_lm", "server", "--model", str(model), "--host", "127.0.0.1",
           "--port", str(port), *args]
    return Server(label, cmd, mlx_env(), port)


def _safetensors_keys(path: Path) -> set[str]:
    import struct

    with path.open("rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return set(json.loads(f.read(n))) - {"__metadata__"}


def mlx_folder(name: str) -> Path:
    """An MLX folder of store model `name` with the weights the engine runs: the store's
    converted safetensors linked when its tensors are the model's parameters (one copy in the
    page cache), else the parameters written out."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import save_config

    from agent import models, store

    folder = WORK / f"mlx-{name}"
    if (folder / "config.json").exists():
        return folder
    lm = models.load(name, device="cpu")
    params = dict(tree_flatten(lm.model.parameters()))
    tmp = folder.with_suffix(".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    converted = [p / "model.safetensors" for p in store.converted_for(store.lookup(name).file_sha256)]
    converted = [p for p in converted if p.exists() and _safetensors_keys(p) == set(params)]
    target = tmp / "model.safetensors"
    target.unlink(missing_ok=True)
    if converted:
        target.symlink_to(converted[0])
    else:
        mx.save_safetensors(str(target), params)
    save_config(dataclasses.asdict(lm.model.args), tmp / "config.json")
    lm.tokenizer._tokenizer.save_pretrained(str(tmp))
    tmp.rename(folder)
    return folder

"""Starting the server: load the models, bind the socket, run uvicorn.

`run(cfg, opts)` serves until Ctrl-C (the `spec-agent serve` command); `start(cfg, opts)`
serves from a background thread and returns a handle to stop it (tests, embedding). The
socket is bound before uvicorn starts, so a port in use is one error, and port 0 picks a
free one.
"""

from __future__ import annotations

import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..config import Config
from .app import ServeOptions, build_app
from .metrics import Metrics
from .worker import ModelWorker


class ServeError(Exception):
    exit_code = 1


def served_names(cfg: Config) -> tuple[str, ...]:
    """The model's id in the API (a store name as is, a path by its last part), then aliases."""
    ref = cfg.model
    name = Path(ref).name.removesuffix(".gguf") if ("/" in ref or ref.endswith(".gguf")) else ref
    return tuple(dict.fromkeys([name, ref]))


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


@dataclass
class Running:
    """A server serving from a background thread."""

    url: str  # the API root, http://host:port/v1
    server: object
    thread: threading.Thread
    worker: ModelWorker
    metrics: Metrics

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.worker.stop()


def _prepare(cfg: Config, opts: ServeOptions, say: Callable[[str], None]):
    import uvicorn

    for path in (opts.log, opts.record):
        try:
            if path is not None:
                path.open("a").close()
        except OSError as e:
            raise ServeError(f"cannot write {path}: {e.strerror or e}") from None
    metrics = Metrics()
    worker = ModelWorker(cfg, metrics, lambda m: say(f"warning: {m}"))
    worker.start()  # loads the models (slow); raises what loading raised
    sock = _bind(opts.host, opts.port)
    served = served_names(cfg)
    app = build_app(worker, opts, metrics, served, say)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=5)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"
    return uvicorn.Server(config), sock, worker, metrics, url, served


def _stderr(message: str) -> None:
    print(f"spec-agent serve: {message}", file=sys.stderr, flush=True)


def run(cfg: Config, opts: ServeOptions, say: Callable[[str], None] = _stderr) -> int:
    """Serve until interrupted; returns the exit code."""
    server, sock, worker, _, url, served = _prepare(cfg, opts, say)
    key = " (API key required)" if opts.api_key else ""
    say(f"serving {served[0]} at {url}{key}; Ctrl-C stops")
    try:
        server.run(sockets=[sock])
    finally:
        worker.stop()
        sock.close()
    return 0


def start(cfg: Config, opts: ServeOptions, say: Callable[[str], None] = _stderr) -> Running:
    """Serve from a background thread (returns once the models are loaded and it listens)."""
    server, sock, worker, metrics, url, _ = _prepare(cfg, opts, say)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name="spec-agent-serve")
    thread.start()
    while not server.started and thread.is_alive():
        threading.Event().wait(0.02)
    return Running(url, server, thread, worker, metrics)

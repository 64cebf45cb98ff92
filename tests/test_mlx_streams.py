"""Every thread that runs MLX work frees its MLX streams as it ends.

MLX frees a thread's streams only on that thread; one left holding them can abort the process
at exit ("terminate called without an active exception", exit 134 after a run that
succeeded). A freed thread can no longer compute on the arrays it made: that is what these
tests observe, on the thread itself, after its body returned."""

from __future__ import annotations

import subprocess
import sys
import threading
from types import SimpleNamespace

import mlx.core as mx
import pytest

from agent.config import Config
from agent.serve.metrics import Metrics
from agent.serve.worker import ModelWorker
from agent.ui.tui_engine import EngineBridge


def _streams_freed_after(body, setup) -> bool:
    """Run `setup()` (MLX work that returns an array) then `body()` on one new thread; True
    when MLX work on that thread's array fails afterwards (its streams were freed)."""
    out: dict[str, object] = {}

    def thread() -> None:
        made = setup()
        body()
        try:
            mx.eval(made + 1)
            out["freed"] = False
        except RuntimeError as e:
            out["freed"] = "Stream" in str(e)

    t = threading.Thread(target=thread)
    t.start()
    t.join(60)
    return bool(out.get("freed"))


def _work() -> mx.array:
    a = mx.ones((8, 8))
    mx.eval(a @ a)
    return a


def test_the_tui_engine_thread_frees_its_streams_when_it_ends():
    bridge = EngineBridge(SimpleNamespace(git_info=lambda: {}), post=lambda m: None)
    bridge.submit("work", _work)
    bridge.stop()
    assert _streams_freed_after(bridge.run, _work)


def test_the_servers_model_thread_frees_its_streams_when_it_stops(monkeypatch):
    worker = ModelWorker(Config(), Metrics(), warn=lambda m: None)
    monkeypatch.setattr(worker, "_load", lambda: None)
    worker._jobs.put(None)
    assert _streams_freed_after(worker._run, _work)


def test_a_thread_that_never_frees_keeps_its_streams():
    """The observation above can fail: without a release the array stays usable."""
    assert not _streams_freed_after(lambda: None, _work)


@pytest.mark.embedded
def test_a_process_that_loaded_a_model_frees_the_main_threads_streams_at_exit():
    code = ("import atexit, mlx.core as mx\n"
            "from agent import models\n"
            "lm = models.load(None)\n"
            "a = mx.ones((4, 4)); mx.eval(a @ a)\n"
            "atexit._run_exitfuncs()\n"  # what the interpreter runs at exit, run now
            "try:\n"
            "    mx.eval(a + 1); print('kept')\n"
            "except RuntimeError as e:\n"
            "    print('freed' if 'Stream' in str(e) else repr(e))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "freed"

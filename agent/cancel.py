"""A cancel token: the UI sets it, the engine and the conversation check it between steps.

Checked between prefill chunks, between decoding rounds (plain or speculative) and between
tool calls; a check never interrupts a forward pass, so caches stay consistent. Thread-safe
(a UI thread cancels while the engine thread decodes). Imports nothing heavy.
"""

from __future__ import annotations

import signal
import threading


class CancelToken:
    """Set once by whoever wants the current turn to stop; never cleared (make a new one)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def __bool__(self) -> bool:  # a token is always truthy; use `.cancelled`
        return True


class CancelOnSigint:
    """The first Ctrl-C sets the cancel token (the turn stops between rounds, caches stay
    consistent); a second one raises KeyboardInterrupt as usual."""

    def __init__(self, cancel):
        self.cancel, self.previous = cancel, None

    def _handle(self, signum, frame) -> None:
        if self.cancel.cancelled:
            raise KeyboardInterrupt
        self.cancel.cancel()

    def __enter__(self):
        try:
            self.previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread (tests): no handler
            self.previous = None
        return self

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

"""What the conversation talks to: a `Backend` producing assistant turns, the record of what
it can do (`Capabilities`), the sampling one call asks for (`Sampling`), and its one error.

The local engine and OpenAI-compatible servers (agent/backends/) implement it; scripted
models in the tests do too. The conversation reads a backend's `capabilities` and never
probes it for attributes; it passes a `Sampling` with the one call that wants other
sampling than the backend's own settings, and never changes the backend's settings. Nothing
here knows how a turn is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

from tools.environ import redact

from ..cancel import CancelToken
from ..events import Event


class ModelError(Exception):
    """The backend could not produce a turn (context full, server down, HTTP error); ends
    the message with this text as its error. The text never holds a credential of our
    environment (a server that echoes the Authorization header would otherwise get the API
    key printed): every such value is redacted here, where each backend error is made."""

    def __init__(self, message: object = "", *args: object):
        super().__init__(redact(str(message)), *args)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, as it declares it.

    `label`: what status bars show ("local", "openai 127.0.0.1:8080 · model").
    `native_tools`: the tool schemas reach the model through its own tool format (the
    system prompt then does not list them).
    `leads`: `generate` takes `lead=TEXT`, a text the reply begins with.
    `sampling`: `generate` takes `sampling=Sampling(...)` and draws the same reply again for
    the same seed (what resampling a stuck reply needs: core/resample.py).
    `count_tokens`: the prompt tokens of a list of messages, exactly (None: not known; the
    context budget is then off and /context estimates).
    `context_limit`: the model's window in tokens (0: not known); `reply_reserve`: the
    tokens one reply may take (max_tokens)."""

    label: str = ""
    native_tools: bool = False
    leads: bool = False
    sampling: bool = False
    count_tokens: Callable[[list[dict[str, str]]], int] | None = None
    context_limit: int = 0
    reply_reserve: int = 0


@dataclass(frozen=True)
class Sampling:
    """Sampling for one `generate` call, in place of the backend's own settings (its other
    settings, top-p and the rest, stay): `temperature`, and `seed` for the sampler."""

    temperature: float
    seed: int


class Backend(Protocol):
    """Produces assistant turns; `capabilities` says what else it takes and tells."""

    @property
    def capabilities(self) -> Capabilities: ...

    def generate(self, messages: list[dict[str, str]], cancel: CancelToken) -> Iterator[Event]:
        """Stream one assistant turn: `TextDelta`s (calls as `<tool_call>` text), progress
        events, then exactly one `GenerationStats` (finish_reason "cancelled" when `cancel`
        stopped it). Raises ModelError when no turn can be produced. Keywords, only where
        `capabilities` declares them: `lead=TEXT` (`leads`): the turn begins with (a prefix
        of) TEXT, streamed first, and the model continues after it; `sampling=Sampling`
        (`sampling`): this turn samples so."""
        ...

"""What the conversation talks to: a `Backend` producing assistant turns, and its one error.

The local engine and OpenAI-compatible servers (agent/backends/) implement it; scripted
models in the tests do too. Nothing here knows how a turn is made.
"""

from __future__ import annotations

from typing import Iterator, Protocol

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


class Backend(Protocol):
    """Produces assistant turns. `native_tools`: the tool schemas reach the model through
    its own tool format (the system prompt then does not list them). `label`: what status
    bars show, e.g. "local" or "openai 127.0.0.1:8080"."""

    native_tools: bool
    label: str

    def generate(self, messages: list[dict[str, str]], cancel: CancelToken) -> Iterator[Event]:
        """Stream one assistant turn: `TextDelta`s (calls as `<tool_call>` text), progress
        events, then exactly one `GenerationStats` (finish_reason "cancelled" when `cancel`
        stopped it). Raises ModelError when no turn can be produced. A backend with `leads`
        true also takes `lead=TEXT`: the turn begins with (a prefix of) TEXT, streamed first,
        and the model continues after it."""
        ...

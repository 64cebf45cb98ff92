"""An OpenAI-compatible chat-completions server as the backend: vLLM, SGLang, llama.cpp's
llama-server, mlx_lm.server, or any service speaking the same protocol.

Each turn is one streamed `POST {base_url}/chat/completions` (httpx, server-sent events via
httpx-sse). Tools reach the model either through the `tools` parameter (`native_tools`: the
server renders them in the model's own format and returns `tool_calls`) or as text in the
system prompt (the model writes `<tool_call>` blocks, parsed like the local engine's). Calls
come back to the conversation as `<tool_call>` text either way; the conversation validates
arguments with jsonschema before a tool runs. Where a call is required (`tool_choice`), the
server's structured output is used: `tool_choice: "required"` with `tools`, or a JSON-schema
`response_format` in text mode.

Faults: connect and read timeouts; connection errors and HTTP 429/503 are retried with
exponential backoff, honouring `Retry-After`, but only before the stream has started; every
other failure is a `ModelError` with one line of text. A cancel returns within ~50 ms and
shuts the connection so the server stops generating. The API key comes from the environment
only (`SPEC_AGENT_API_KEY`, else `OPENAI_API_KEY`). Not here: parsing the stream into
events and figures (openai_stream.py).
"""

from __future__ import annotations

import email.utils
import os
import queue
import random
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping
from urllib.parse import urlsplit

import httpx

from ..cancel import CancelToken
from ..core.backend import Capabilities, Sampling
from ..core.callformat import CLOSE, OPEN, is_first_turn
from ..events import Event, TextDelta, Warning
from .base import ModelError, tool_specs, wire_messages
from .openai_stream import StreamLimits, StreamState, one_line

API_KEY_VARS = ("SPEC_AGENT_API_KEY", "OPENAI_API_KEY")
MAX_RETRY_AFTER_S = 60.0  # a longer Retry-After is cut to this
POLL_S = 0.05  # how often a waiting turn looks at its cancel token


class ServerError(ModelError):
    """The server cannot be used at all (down, refused the request); exit code 1 in `-p`."""

    exit_code = 1

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status  # the HTTP status, 0 when there was no response


def api_key_from_env(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return next((env[v] for v in API_KEY_VARS if env.get(v)), "")


@dataclass(frozen=True)
class ApiOptions:
    base_url: str
    model: str = "default"  # "default": the first model the server lists
    api_key: str = ""
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0
    max_retries: int = 3
    backoff_s: float = 0.5  # first retry delay; doubles per retry (capped at 8 s), plus jitter
    native_tools: bool = True
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 1024
    tool_choice: str = "auto"  # auto | first | required (as Config.tool_choice)


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_text(resp: httpx.Response) -> str:
    """The server's own error message, on one line."""
    try:
        body = resp.json()
        err = body.get("error", body) if isinstance(body, dict) else body
        msg = err.get("message", err) if isinstance(err, dict) else err
        return one_line(str(msg))
    except ValueError:
        return one_line(resp.text) or resp.reason_phrase


class OpenAIBackend:
    """Chat completions over HTTP as a `Backend`."""

    def __init__(self, opts: ApiOptions, tools: Mapping[str, Any] | None = None):
        from tools import TOOLS

        self.opts = opts
        self.tools = TOOLS if tools is None else tools
        self.native_tools = opts.native_tools
        self.url = opts.base_url.rstrip("/")
        self.host = urlsplit(self.url).netloc or self.url
        self.model = "" if opts.model in ("", "default") else opts.model
        self._asked = bool(self.model)  # whether the model name is settled
        headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
        timeout = httpx.Timeout(opts.read_timeout_s, connect=opts.connect_timeout_s)
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self.requests: list[dict[str, Any]] = []  # bodies sent (the last few), for inspection
        self.last_cut = ""  # why the last stream was cut by a client-side limit ('' if not)

    @property
    def label(self) -> str:
        """"openai host:port · model" (a Hub id or a path shortened to its last part)."""
        return f"openai {self.host}" + (f" · {self.model.rsplit('/', 1)[-1]}" if self.model else "")

    @property
    def capabilities(self) -> Capabilities:
        """Neither leads nor token counts; per-call sampling is taken (`generate`), but not
        declared: a server's `seed` is a hint, so a rerun need not draw the same reply, and
        the conversation resamples only where it does (agent/core/resample.py)."""
        return Capabilities(self.label, self.native_tools)

    def close(self) -> None:
        self.client.close()

    # ---- requests -------------------------------------------------------------------------

    def _send(self, method: str, path: str, cancel: CancelToken, body: Any = None) -> httpx.Response | None:
        """The response (status < 400, body not read yet), after retries; None when cancelled."""
        problem = ""
        for attempt in range(self.opts.max_retries + 1):
            if cancel.cancelled:
                return None
            request = self.client.build_request(method, path, json=body)
            delay = None
            try:
                resp = self._send_once(request, cancel)
                if resp is None:
                    return None
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError,
                    httpx.ReadError, httpx.WriteError) as e:
                problem = f"cannot reach the server at {self.url} ({one_line(str(e) or type(e).__name__, 120)})"
            except httpx.TimeoutException:
                raise ServerError(f"{self.host}: no response within {self.opts.read_timeout_s:g} s "
                                  "(read_timeout_s)") from None
            else:
                if resp.status_code < 400:
                    return resp
                resp.read()
                resp.close()
                problem = f"{self.host}: HTTP {resp.status_code}: {_error_text(resp)}"
                if resp.status_code not in (429, 503):
                    raise ServerError(problem, resp.status_code)
                delay = _retry_after(resp)
            if attempt == self.opts.max_retries:
                break
            if delay is None:
                delay = min(self.opts.backoff_s * 2 ** attempt, 8.0) * (1 + 0.25 * random.random())
            if _wait(min(delay, MAX_RETRY_AFTER_S), cancel):
                return None
        raise ServerError(problem + (f" (after {self.opts.max_retries} retries)" if self.opts.max_retries else ""))

    def _send_once(self, request: httpx.Request, cancel: CancelToken) -> httpx.Response | None:
        """Send `request` from a helper thread; None as soon as `cancel` is set (a response
        that arrives later is closed on arrival). A server can take long to start answering
        (a long prompt), and a cancel must not wait for it."""
        box: queue.Queue = queue.Queue()

        def send() -> None:
            try:
                box.put(("ok", self.client.send(request, stream=True)))
            except Exception as e:  # noqa: BLE001 - a thread boundary: the caller re-raises it
                box.put(("error", e))

        threading.Thread(target=send, daemon=True).start()
        while True:
            try:
                kind, value = box.get(timeout=POLL_S)
            except queue.Empty:
                if cancel.cancelled:
                    threading.Thread(target=_close_on_arrival, args=(box,), daemon=True).start()
                    return None
                continue
            if kind == "error":
                raise value
            return value

    def resolve_model(self, cancel: CancelToken | None = None) -> bool:
        """Settle the model name: the configured one, else the first the server lists, else
        none (requests then leave `model` out and the server uses its own, as llama-server
        and mlx_lm.server do). False when cancelled first."""
        if self._asked:
            return True
        try:
            resp = self._send("GET", "/models", cancel or CancelToken())
        except ServerError as e:
            if e.status in (0, 401, 403):  # down, or not allowed: a request would fail too
                raise
            resp = None  # no usable /models: the server's default model
        else:
            if resp is None:
                return False
        if resp is not None:
            try:
                resp.read()
                data = resp.json().get("data") or []
                self.model = str(data[0]["id"]) if data else ""
            except (ValueError, KeyError, TypeError, AttributeError, httpx.HTTPError):
                self.model = ""
            finally:
                resp.close()
        self._asked = True
        return True

    def _forced(self, messages: list[dict[str, str]]) -> bool:
        choice = self.opts.tool_choice
        return choice == "required" or (choice == "first" and is_first_turn(messages))

    def body(self, messages: list[dict[str, str]], sampling: Sampling | None = None) -> dict[str, Any]:
        """The request for one turn (append-only: a pure function of the history)."""
        o = self.opts
        body: dict[str, Any] = {
            "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": o.max_tokens, "temperature": o.temperature, "top_p": o.top_p,
        }
        if sampling is not None:
            body["temperature"], body["seed"] = sampling.temperature, sampling.seed
        if self.model:
            body["model"] = self.model
        forced = self._forced(messages)
        if self.native_tools:
            body["messages"] = wire_messages(messages)
            body["tools"] = tool_specs(self.tools)
            body["tool_choice"] = "required" if forced else "auto"
        else:
            body["messages"] = [dict(m) for m in messages]
            if forced:
                body["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": "tool_call", "schema": call_schema(self.tools), "strict": True}}
        return body

    # ---- one turn -------------------------------------------------------------------------

    def generate(self, messages: list[dict[str, str]], cancel: CancelToken | None = None,
                 sampling: Sampling | None = None) -> Iterator[Event]:
        """One assistant turn; `sampling`: this request's temperature and seed."""
        cancel = cancel or CancelToken()
        started = time.perf_counter()
        state = StreamState(started)
        if not self.resolve_model(cancel):
            yield state.stats(self.label, cancelled=True)
            return
        body = self.body(messages, sampling)
        self.requests = (self.requests + [body])[-8:]
        wrap = not self.native_tools and "response_format" in body
        resp = self._send("POST", "/chat/completions", cancel, body)
        if resp is None:
            yield state.stats(self.label, cancelled=True)
            return
        if wrap:
            yield TextDelta(OPEN, ())
        self.last_cut = ""
        try:
            cancelled = yield from self._read(resp, state, cancel)
        finally:
            _shut(resp)
        if self.last_cut:
            yield Warning(self.last_cut)
        if wrap and not cancelled:
            yield TextDelta(CLOSE, ())
        for text in state.call_texts() if not cancelled else []:
            yield TextDelta(text, ())
        yield state.stats(self.label, cancelled)

    def _read(self, resp: httpx.Response, state: StreamState, cancel: CancelToken) -> Iterator[Event]:
        """Stream the events of `resp`; returns True when `cancel` stopped it."""
        items: queue.Queue = queue.Queue(maxsize=256)  # the reader waits when we fall behind
        limits = StreamLimits.for_tokens(self.opts.max_tokens)
        reader = threading.Thread(target=_pump, args=(resp, items), daemon=True)
        reader.start()
        while True:
            try:
                kind, value = items.get(timeout=POLL_S)
            except queue.Empty:
                if cancel.cancelled:
                    return True
                continue
            if cancel.cancelled:
                return True
            if kind == "data":
                if value.strip() == "[DONE]":
                    return False
                yield from state.feed(value)
                over = state.over_limit(limits)
                if over:  # the server ignores max_tokens: end the turn here, as it should have
                    self.last_cut = f"{self.host}: the stream passed {over}; hung up"
                    state.finish = "length"
                    return False
                progress = state.progress()
                if progress is not None:
                    yield progress
            elif kind == "end":  # closed without [DONE]: complete only if it said it finished
                if not state.finish:
                    raise ModelError(f"{self.host}: the stream ended before the answer was complete")
                return False
            else:
                raise ModelError(self._stream_problem(value, state))

    def _stream_problem(self, e: BaseException, state: StreamState) -> str:
        if isinstance(e, httpx.TimeoutException):
            return f"{self.host}: no data for {self.opts.read_timeout_s:g} s (read_timeout_s)"
        where = "mid-answer" if state.deltas else "before answering"
        return f"{self.host}: the stream broke {where} ({one_line(str(e) or type(e).__name__, 120)})"


def _pump(resp: httpx.Response, items: queue.Queue) -> None:
    """Reader thread: SSE `data` payloads of `resp` into `items`, then ("end"|"error", ...)."""
    from httpx_sse import EventSource

    try:
        for sse in EventSource(resp).iter_sse():
            if sse.data and not _put(items, ("data", sse.data), resp):
                return
        _put(items, ("end", None), resp)
    except Exception as e:  # noqa: BLE001 - a thread boundary: every failure goes to the turn
        _put(items, ("error", e), resp)


def _put(items: queue.Queue, item: tuple, resp: httpx.Response) -> bool:
    """Put `item` once there is room; False when the turn hung up meanwhile."""
    while True:
        try:
            items.put(item, timeout=POLL_S)
            return True
        except queue.Full:
            if resp.is_closed:
                return False


def _shut(resp: httpx.Response) -> None:
    """Close `resp` now, also while the reader thread is blocked in it: shutting the socket
    wakes that read and tells the server to stop generating."""
    stream = resp.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    try:
        resp.close()
    except (httpx.HTTPError, OSError, RuntimeError):
        pass


def _close_on_arrival(box: queue.Queue) -> None:
    kind, value = box.get()
    if kind == "ok":
        _shut(value)


def _wait(seconds: float, cancel: CancelToken) -> bool:
    """Sleep `seconds` unless cancelled first; True when cancelled."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cancel.cancelled:
            return True
        time.sleep(min(POLL_S, max(0.0, end - time.monotonic())))
    return cancel.cancelled


def call_schema(tools: Mapping[str, Any]) -> dict[str, Any]:
    """JSON Schema of one call object `{"name": ..., "arguments": {...}}` for any of `tools`."""
    return {"anyOf": [{"type": "object", "additionalProperties": False,
                       "required": ["name", "arguments"],
                       "properties": {"name": {"const": t.name}, "arguments": t.schema}}
                      for t in tools.values()]}

"""A scripted OpenAI-compatible server on loopback for tests: real HTTP, real SSE.

`FakeServer(replies)` serves `GET /v1/models` and, for each `POST /v1/chat/completions`, the
next `Reply` of its script (then a plain "Done." answer). Streams use HTTP/1.1 chunked
encoding like real servers; a reply can delay its first byte, pause between chunks, cut the
connection mid-stream or send raw (malformed) data. Every request body is recorded, and
whether the client hung up early.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    chunks: list[Any] = field(default_factory=list)  # dict → JSON data line; str → raw data
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None  # for an error status: the JSON body
    delay_first: float = 0.0  # seconds before the response starts
    delay_each: float = 0.0  # seconds between chunks
    cut_after: int | None = None  # close the connection after this many chunks
    done: bool = True  # send `data: [DONE]` at the end


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def usage_chunk(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage}


def text_reply(text: str, pieces: int = 4, cached: int | None = 7, **kw) -> Reply:
    """`text` streamed in `pieces` content deltas, a finish chunk and a usage chunk."""
    n = max(1, len(text) // pieces)
    parts = [text[i:i + n] for i in range(0, len(text), n)] or [""]
    chunks: list[Any] = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"content": p}) for p in parts]
    chunks += [_chunk({}, "stop"), usage_chunk(50, len(parts), cached)]
    return Reply(chunks=chunks, **kw)


def tool_reply(name: str, arguments: Any, text: str = "", split: bool = True) -> Reply:
    """A call in the `tool_calls` format (the arguments string split over two deltas)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    cut = len(args) // 2 if split else len(args)
    chunks: list[Any] = [_chunk({"role": "assistant", "content": text})] if text else []
    chunks.append(_chunk({"tool_calls": [{"index": 0, "id": "x1", "type": "function",
                                          "function": {"name": name, "arguments": args[:cut]}}]}))
    if args[cut:]:
        chunks.append(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[cut:]}}]}))
    chunks += [_chunk({}, "tool_calls"), usage_chunk(60, 12, 40)]
    return Reply(chunks=chunks)


class FakeServer:
    """The server; use as a context manager. `url` is the API root (…/v1)."""

    def __init__(self, replies: list[Reply] | None = None, models: tuple[str, ...] = ("fake-model",)):
        self.replies = list(replies or [])
        self.models = models
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.disconnected = threading.Event()  # the client hung up mid-stream
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "FakeServer":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _next(self) -> Reply:
        return self.replies.pop(0) if self.replies else text_reply("Done.")

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": m} for m in server.models]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                server.requests.append(json.loads(self.rfile.read(length)))
                server.headers.append(dict(self.headers))
                reply = server._next()
                time.sleep(reply.delay_first)
                if reply.status != 200:
                    self._json(reply.status, reply.body or {"error": {"message": "scripted"}},
                               reply.headers)
                    return
                self._stream(reply)

            def _write(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _stream(self, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for i, c in enumerate(reply.chunks):
                        if reply.cut_after is not None and i >= reply.cut_after:
                            self.close_connection = True
                            return  # no terminating chunk: the body is cut
                        if i:
                            time.sleep(reply.delay_each)
                        data = c if isinstance(c, str) else json.dumps(c)
                        self._write(f"data: {data}\n\n".encode())
                    if reply.done:
                        self._write(b"data: [DONE]\n\n")
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    server.disconnected.set()
                    self.close_connection = True

        return Handler

"""The HTTP routes (Starlette): OpenAI's chat and text completions, models, health, metrics.

Handlers read and check the request on the event loop, prepare it on a worker thread
(`asyncio.to_thread`: template, tokenizer and grammar, no MLX), queue it on the model's
thread and relay what it emits, streamed as server-sent events (sse-starlette) or as one JSON
object. A client that goes away cancels its job: sse-starlette cancels the stream's
generator, and a non-streamed request watches its connection. Errors are OpenAI's error
object with a 4xx/5xx status; every request is one log line (`RequestLog`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..events import GenerationStats
from ..safe_input import loads
from .metrics import CONTENT_TYPE_LATEST, Metrics
from .protocol import (
    ApiError,
    Sampling,
    chat_chunk,
    chat_response,
    completion_response,
    finish_reason,
    new_id,
    parse_chat,
    parse_completion,
    tool_call_json,
    usage_chunk,
)
from .turn import Call, Done, Text
from .worker import Job, ModelWorker

MAX_BODY = 32 << 20  # bytes of one request body
CLIENT_CLOSED = 499  # the status logged for a request whose client left (nginx's)
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics")


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str = ""  # "": no key asked
    log: Path | None = None  # JSON lines, one per request, besides the stderr line
    record: Path | None = None  # chat requests' messages appended as JSON lines


class RequestLog:
    """One line per request on stderr (through `say`), and a JSON line in `path` if given."""

    def __init__(self, say: Callable[[str], None], path: Path | None, metrics: Metrics):
        self.say, self.path, self.metrics = say, path, metrics
        self._lock = threading.Lock()

    def __call__(self, method: str, path: str, status: int, started: float,
                 stats: GenerationStats | None = None, error: str = "", **extra: Any) -> None:
        took = time.perf_counter() - started
        endpoint = path if path in ENDPOINTS else "other"  # (a label per unknown path would grow)
        self.metrics.requests.labels(endpoint, str(status)).inc()
        rec: dict[str, Any] = {"time": round(time.time(), 3), "method": method, "path": path,
                               "status": status, "seconds": round(took, 3), **extra}
        line = f"{method} {path} {status} {took:.2f}s"
        if stats is not None:
            rec.update(prompt_tokens=stats.prompt_tokens, cached_tokens=stats.cached_tokens,
                       completion_tokens=stats.generated_tokens, finish=stats.finish_reason,
                       tok_per_s=round(stats.decode_tps, 2), rounds=stats.rounds,
                       acceptance=round(stats.acceptance_rate, 3))
            line += (f" prompt={stats.prompt_tokens} cached={stats.cached_tokens} "
                     f"gen={stats.generated_tokens} tok/s={stats.decode_tps:.1f} "
                     f"finish={stats.finish_reason}")
            if stats.rounds:
                line += f" accepted/round={stats.mean_accepted:.2f}"
        if error:
            rec["error"] = error
            line += f" error: {error}"
        self.say(line)
        if self.path is not None:
            with self._lock, self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")


def _append_jsonl(path: Path, obj: dict[str, Any], lock: threading.Lock) -> None:
    with lock, path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(obj, ensure_ascii=False) + "\n")


def build_app(worker: ModelWorker, opts: ServeOptions, metrics: Metrics, served: tuple[str, ...],
              say: Callable[[str], None]) -> Starlette:
    """The Starlette app serving `worker`'s model under the names `served` (the first is its id)."""
    cfg = worker.cfg
    defaults = Sampling(cfg.temperature, cfg.top_p, cfg.top_k, cfg.min_p, None, (), cfg.max_tokens)
    log = RequestLog(say, opts.log, metrics)
    record_lock = threading.Lock()

    def authorize(request: Request) -> None:
        if not opts.api_key:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {opts.api_key}".encode()):
            raise ApiError(401, "Invalid API key: send 'Authorization: Bearer KEY'", code="invalid_api_key")

    async def body_of(request: Request) -> Any:
        if int(request.headers.get("content-length") or 0) > MAX_BODY:
            raise ApiError(413, f"the request body is larger than {MAX_BODY >> 20} MiB")
        raw = await request.body()
        if len(raw) > MAX_BODY:
            raise ApiError(413, f"the request body is larger than {MAX_BODY >> 20} MiB")
        try:
            return loads(raw)
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, nesting
            raise ApiError(400, f"the request body is not valid JSON: {e}") from None

    def job_for(plan: Any) -> tuple[Job, asyncio.Queue]:
        loop = asyncio.get_running_loop()
        channel: asyncio.Queue = asyncio.Queue()

        def emit(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(channel.put_nowait, item)
            except RuntimeError:  # the loop is closed: the server is stopping
                job.cancel.cancel()

        job = Job(plan, emit)
        worker.submit(job)
        return job, channel

    async def relay(channel: asyncio.Queue) -> AsyncIterator[Any]:
        """The job's items up to and including `Done` (an ApiError is raised)."""
        while True:
            item = await channel.get()
            if isinstance(item, ApiError):
                raise item
            yield item
            if isinstance(item, Done):
                return

    async def watch_disconnect(request: Request, job: Job) -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                job.cancel.cancel()
                return

    async def collect(request: Request, job: Job, channel: asyncio.Queue) -> tuple[str, list, Done]:
        watcher = asyncio.ensure_future(watch_disconnect(request, job))
        text, calls, done = "", [], None
        try:
            async for item in relay(channel):
                if isinstance(item, Text):
                    text += item.text
                elif isinstance(item, Call):
                    calls.append(tool_call_json(item.index, item.id, item.name, item.arguments, False))
                else:
                    done = item
        finally:
            watcher.cancel()
            job.cancel.cancel()  # (a no-op once done)
        return text, calls, done

    def gone(request: Request, started: float, stats: GenerationStats, model: str) -> Response:
        log("POST", request.url.path, CLIENT_CLOSED, started, stats, model=model)
        return Response(status_code=CLIENT_CLOSED)

    def finished(request: Request, job: Job, stats: GenerationStats | None, status: int, error: str,
                 started: float, model: str) -> None:
        """Log a stream once its generation has ended (later, when the client left early)."""
        path = request.url.path
        if stats is not None or error:
            log("POST", path, status, started, stats, error, model=model, stream=True)
        else:
            job.then(lambda s: log("POST", path, CLIENT_CLOSED, started, s, model=model, stream=True))

    async def chat(request: Request) -> Response:
        started = time.perf_counter()
        authorize(request)
        req = parse_chat(await body_of(request), served, defaults)

        def prepare() -> Any:
            plan = worker.prepare_chat(req)
            if opts.record is not None:
                _append_jsonl(opts.record, {"messages": req.raw["messages"]}, record_lock)
            return plan

        plan = await asyncio.to_thread(prepare)
        job, channel = job_for(plan)
        rid = new_id("chatcmpl")
        if req.stream:
            return EventSourceResponse(stream_chat(request, job, channel, rid, req.model,
                                                   req.include_usage, started), sep="\n")
        text, calls, done = await collect(request, job, channel)
        if done.finish == "cancelled":  # the client left
            return gone(request, started, done.stats, req.model)
        log("POST", request.url.path, 200, started, done.stats, model=req.model)
        return JSONResponse(chat_response(rid, req.model, text, calls,
                                          finish_reason(done.finish, done.calls), done.stats))

    async def stream_chat(request: Request, job: Job, channel: asyncio.Queue, rid: str, model: str,
                          include_usage: bool, started: float) -> AsyncIterator[dict]:
        stats, status, error = None, 200, ""
        try:
            yield {"data": json.dumps(chat_chunk(rid, model, {"role": "assistant", "content": ""}))}
            async for item in relay(channel):
                if isinstance(item, Text):
                    yield {"data": json.dumps(chat_chunk(rid, model, {"content": item.text}))}
                elif isinstance(item, Call):
                    call = tool_call_json(item.index, item.id, item.name, item.arguments, True)
                    yield {"data": json.dumps(chat_chunk(rid, model, {"tool_calls": [call]}))}
                else:
                    stats = item.stats
                    finish = finish_reason(item.finish, item.calls)
                    yield {"data": json.dumps(chat_chunk(rid, model, {}, finish))}
                    if include_usage:
                        yield {"data": json.dumps(usage_chunk(rid, model, "chat.completion.chunk", stats))}
            yield {"data": "[DONE]"}
        except ApiError as e:
            status, error = e.status, e.message
            yield {"data": json.dumps(e.body())}
        finally:
            job.cancel.cancel()  # the client left mid-stream (or a no-op: the job is done)
            finished(request, job, stats, status, error, started, model)

    async def completions(request: Request) -> Response:
        started = time.perf_counter()
        authorize(request)
        req = parse_completion(await body_of(request), served, defaults)
        plan = await asyncio.to_thread(worker.prepare_completion, req)
        job, channel = job_for(plan)
        rid = new_id("cmpl")
        if req.stream:
            return EventSourceResponse(stream_completion(request, job, channel, rid, req.model,
                                                         req.include_usage, started), sep="\n")
        text, _, done = await collect(request, job, channel)
        if done.finish == "cancelled":
            return gone(request, started, done.stats, req.model)
        log("POST", request.url.path, 200, started, done.stats, model=req.model)
        return JSONResponse(completion_response(rid, req.model, text,
                                                finish_reason(done.finish, 0), done.stats))

    async def stream_completion(request: Request, job: Job, channel: asyncio.Queue, rid: str,
                                model: str, include_usage: bool, started: float) -> AsyncIterator[dict]:
        stats, status, error = None, 200, ""
        try:
            async for item in relay(channel):
                if isinstance(item, Text):
                    yield {"data": json.dumps(completion_response(rid, model, item.text, None, None, True))}
                elif isinstance(item, Done):
                    stats = item.stats
                    yield {"data": json.dumps(completion_response(
                        rid, model, "", finish_reason(item.finish, 0), None, True))}
                    if include_usage:
                        yield {"data": json.dumps(usage_chunk(rid, model, "text_completion", stats))}
            yield {"data": "[DONE]"}
        except ApiError as e:
            status, error = e.status, e.message
            yield {"data": json.dumps(e.body())}
        finally:
            job.cancel.cancel()
            finished(request, job, stats, status, error, started, model)

    async def models(request: Request) -> Response:
        authorize(request)
        return JSONResponse({"object": "list", "data": [
            {"id": served[0], "object": "model", "created": int(started_at), "owned_by": "spec-agent"}]})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def prometheus(request: Request) -> Response:
        authorize(request)
        return Response(metrics.text(), media_type=CONTENT_TYPE_LATEST)

    async def api_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, ApiError):
            err = exc
        elif isinstance(exc, HTTPException):
            err = ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")
        else:
            err = ApiError(500, f"internal error: {exc}", kind="server_error")
        log(request.method, request.url.path, err.status, time.perf_counter(), error=err.message)
        return JSONResponse(err.body(), status_code=err.status)

    started_at = time.time()
    routes = [Route("/v1/chat/completions", chat, methods=["POST"]),
              Route("/v1/completions", completions, methods=["POST"]),
              Route("/v1/models", models, methods=["GET"]),
              Route("/health", health, methods=["GET"]),
              Route("/metrics", prometheus, methods=["GET"])]
    handlers = {ApiError: api_error, HTTPException: api_error, Exception: api_error}
    return Starlette(routes=routes, exception_handlers=handlers)

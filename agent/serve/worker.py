"""The model's one thread: it loads the models, owns the engine's `Session`, and runs the
queued requests one at a time, first come first served.

MLX runs on this thread only (models are loaded here too: MLX's streams belong to the thread
that made them). The HTTP side prepares a request off the event loop (`prepare_chat`,
`prepare_completion`: template, tokenizer, grammar; no MLX), `submit`s a `Job`, and reads
what the job `emit`s: `Text`, `Call`, then `Done` or an `ApiError`. One session serves every
client: each request starts from the longest prefix its prompt shares with the session's
history or the prefix store (memory and disk), so a client resending its whole conversation
re-reads only the new messages. A job whose client has gone is cancelled through its
`CancelToken` (checked between rounds) or skipped if it has not started.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ..cancel import CancelToken
from ..config import Config
from .metrics import Metrics
from .prompt import calls_grammar, json_grammar, template_messages, tool_specs
from .protocol import ApiError, ChatRequest, CompletionRequest, Sampling
from .turn import Done, Plan, decode

log = logging.getLogger("spec-agent.serve")
SEED_MASK = (1 << 62) - 1  # keyed draws take a non-negative seed below 2**62


@dataclass
class Job:
    plan: Plan
    emit: Callable[[Any], None]  # called on the model's thread; must not block
    cancel: CancelToken = field(default_factory=CancelToken)
    stats: Any = None  # the generation's final GenerationStats, once it has ended
    _then: Callable[[Any], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def settle(self, stats: Any) -> None:
        """The generation ended (the model's thread): run what `then` asked for."""
        with self._lock:
            self.stats, then = stats, self._then
        if then is not None:
            then(stats)

    def then(self, fn: Callable[[Any], None]) -> None:
        """Call `fn(stats)` when the generation ends (now, if it has): a client that left
        mid-stream still gets its request logged with what was generated."""
        with self._lock:
            if self.stats is None:
                self._then = fn
                return
        fn(self.stats)


class ModelWorker:
    def __init__(self, cfg: Config, metrics: Metrics, warn: Callable[[str], None]):
        self.cfg, self.metrics, self.warn = cfg, metrics, warn
        self.session: Any = None
        self.tokenizer: Any = None
        self.native_tools = False  # the chat template renders `tools` and `<tool_call>` calls
        self.context_limit = 0
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._ll: Any = None  # llguidance's tokenizer, built on first use (~0.5 s)
        self._ll_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="spec-agent-model", daemon=True)

    # ---- lifetime ---------------------------------------------------------------------------

    def start(self) -> None:
        """Load the models on the model's thread; raises what loading raised."""
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)

    def _load(self) -> None:
        from .. import models
        from ..backends.local import template_takes_tools
        from ..engine import Session, SpecSettings, make_speculator
        from ..runtime import prefix_store

        cfg = self.cfg
        target = models.load(cfg.model, device=cfg.device)
        draft = models.load(cfg.draft_model, device=cfg.device) if cfg.draft_model else None
        speculator = make_speculator(SpecSettings.from_config(cfg), target, draft, warn=self.warn)
        self.session = Session(target, speculator=speculator, store=prefix_store(cfg, self.warn),
                               kv_bits=cfg.kv_bits)
        self.tokenizer = target.tokenizer
        self.native_tools = template_takes_tools(target.tokenizer)
        self.context_limit = self.session.context_limit

    def _run(self) -> None:
        from ..engine import release_streams

        try:
            self._work()
        finally:
            release_streams()  # the thread's MLX streams go with it, however it ends

    def _work(self) -> None:
        try:
            self._load()
        except BaseException as e:  # noqa: BLE001 - handed to start(), which raises it
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        while True:
            job = self._jobs.get()
            self.metrics.queue_depth.set(self._jobs.qsize())
            if job is None:
                return
            if job.cancel.cancelled:  # its client left while it waited
                job.emit(ApiError(499, "the client closed the request"))
                continue
            self.metrics.busy.set(1)
            try:
                self._serve(job)
            finally:
                self.metrics.busy.set(0)

    def _serve(self, job: Job) -> None:
        from ..engine import ContextOverflowError

        try:
            for item in decode(self.session, job.plan, job.cancel):
                if isinstance(item, Done):
                    self.metrics.generation(item.stats)
                    job.settle(item.stats)
                job.emit(item)
        except ContextOverflowError as e:
            job.emit(ApiError(400, str(e), "messages", "context_length_exceeded"))
        except Exception as e:  # noqa: BLE001 - one failed generation must not stop the server
            log.exception("generation failed")
            job.emit(ApiError(500, f"generation failed: {e}", kind="server_error"))

    def submit(self, job: Job) -> None:
        self._jobs.put(job)
        self.metrics.queue_depth.set(self._jobs.qsize())

    # ---- preparing requests (any thread but the event loop's; no MLX) ----------------------

    def ll_tokenizer(self) -> Any:
        from ..backends.grammar import ll_tokenizer

        with self._ll_lock:
            if self._ll is None:
                self._ll = ll_tokenizer(self.tokenizer)
            return self._ll

    def _constraint(self, grammar: str, what: str) -> Any:
        from ..backends.grammar import GrammarConstraint

        c = GrammarConstraint(self.ll_tokenizer(), grammar, self.session.target.vocab_size)
        if c.error:
            raise ApiError(400, f"{what} cannot be enforced: {c.error.strip()}", what, "invalid_schema")
        return c

    def _params(self, s: Sampling) -> Any:
        from ..engine import SamplingParams

        seed = s.seed & SEED_MASK if s.seed is not None and s.temperature > 0 else -1
        try:
            return SamplingParams(s.temperature, s.top_p, s.top_k, s.min_p,
                                  repetition_penalty=self.cfg.repetition_penalty, noise_seed=seed)
        except ValueError as e:
            raise ApiError(400, str(e)) from None

    def _fits(self, prompt: list[int], param: str) -> None:
        if self.context_limit and len(prompt) >= self.context_limit:
            raise ApiError(400, f"This model's maximum context length is {self.context_limit} tokens; "
                           f"the prompt has {len(prompt)}", param, "context_length_exceeded")

    def prepare_chat(self, req: ChatRequest) -> Plan:
        """The request's plan: prompt tokens, sampling, mode and grammar (ApiError if bad)."""
        import jinja2

        from ..engine import render_chat

        tools = req.tools if req.tool_choice != "none" else ()
        chosen = [t for t in tools if t.name == req.tool_choice] or list(tools)
        msgs = template_messages(req.messages, tools, self.native_tools)
        try:
            prompt = render_chat(self.tokenizer, msgs, tool_specs(tools) if tools and self.native_tools else None)
        except (jinja2.TemplateError, ValueError, TypeError) as e:
            raise ApiError(400, f"the chat template cannot render these messages: {e}", "messages") from None
        self._fits(prompt, "messages")
        params, s = self._params(req.sampling), req.sampling
        if tools and req.tool_choice != "auto":  # required, or one named function
            return Plan(prompt, params, s.max_tokens, (), "calls",
                        self._constraint(calls_grammar(chosen, req.parallel_tool_calls), "tools"))
        if req.response_schema is not None:
            return Plan(prompt, params, s.max_tokens, s.stop, "text",
                        self._constraint(json_grammar(req.response_schema), "response_format"))
        if tools:
            return Plan(prompt, params, s.max_tokens, s.stop, "auto",
                        self._constraint(calls_grammar(tools, req.parallel_tool_calls), "tools"))
        return Plan(prompt, params, s.max_tokens, s.stop)

    def prepare_completion(self, req: CompletionRequest) -> Plan:
        if isinstance(req.prompt, str):
            prompt = list(self.tokenizer.encode(req.prompt))
        else:
            vocab = self.session.target.vocab_size
            if any(not 0 <= t < vocab for t in req.prompt):
                raise ApiError(400, f"token ids must be in [0, {vocab})", "prompt")
            prompt = list(req.prompt)
        if not prompt:
            raise ApiError(400, "the prompt has no tokens", "prompt")
        self._fits(prompt, "prompt")
        return Plan(prompt, self._params(req.sampling), req.sampling.max_tokens, req.sampling.stop)

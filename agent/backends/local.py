"""The in-process backend: the conversation's `Model` on the engine's `Session`, with
grammar-constrained tool calls.

One assistant turn is up to two `Session.generate` calls on the same, growing prompt:
1. free text until the model writes `<tool_call>` (a stop string) or ends its answer;
2. if it opened a call: the prompt plus the text so far (the session's prefix cache makes
   this nearly free), decoded under `agent.backends.grammar.tool_call_grammar` — schema-valid
   arguments, `edit_file` `old` texts taken from the files — until `</tool_call>`.
A reply that is a call written without its markers (opening with `{"name"`, pretty-printed
too, or such an object alone in a JSON code block naming a tool) is not kept: step 2 decodes
the call under the grammar instead.
With `constrain=False` step 2 runs unconstrained and the loop validates the call afterwards.
When the model's chat template takes `tools` and asks for Hermes-style calls
(`<tool_call>{"name": ..., "arguments": ...}</tool_call>`: Qwen2.5, Hermes, and others), the
tool schemas are rendered through the template and results go back as `tool` messages
(`native_tools`); other templates (SmolLM2's) get the tools listed in the system prompt.
The turn's two `GenerationStats` are merged into one; a cancel stops either part between
rounds. Not here: parsing and running calls (agent/core).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from tools import ToolContext

from ..cancel import CancelToken
from ..core.backend import Capabilities, Sampling
from ..core.callformat import CLOSE, OPEN, RESULT_OPEN, call_bodies, is_first_turn, read_paths
from ..events import Event, GenerationStats, TextDelta, Warning
from .base import ModelError, tool_specs, wire_messages
from .grammar import GrammarConstraint, candidate_files, ll_tokenizer, tool_call_grammar

if TYPE_CHECKING:
    from ..engine import SamplingParams, Session, SuffixFile

_PROBE = "spec_agent_probe_tool"
BARE_CALL = '{"name"'  # a reply opening like this is a call written without its markers
# ... or in a JSON code block; compared with whitespace removed ('{\n  "name"' counts too)
BARE_CALLS = (BARE_CALL, '```json{"name"', '```{"name"')


def _squash(text: str) -> str:
    return "".join(text.split())


def is_bare_call(text: str) -> bool:
    """Is `text` a call written without its markers: opening with `{"name"`, or a JSON code
    block holding only a call object that names a tool (a JSON answer is not a call)?"""
    squashed = _squash(text)
    if squashed.startswith(BARE_CALL):
        return True
    return squashed.startswith(BARE_CALLS[1:]) and bool(call_bodies(text))


def template_takes_tools(tokenizer: Any) -> bool:
    """Does `tokenizer`'s chat template render a `tools` list and ask for `<tool_call>` JSON
    calls? (Rendered once with a probe tool and once without, and compared.)"""
    import jinja2

    tool = {"type": "function", "function": {"name": _PROBE, "description": "probe",
                                             "parameters": {"type": "object", "properties": {}}}}
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    try:
        with_tools = tokenizer.apply_chat_template(msgs, tools=[tool], tokenize=False,
                                                   add_generation_prompt=True)
        without = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    except (jinja2.TemplateError, ValueError, TypeError, KeyError, AttributeError):
        return False
    return isinstance(with_tools, str) and with_tools != without and _PROBE in with_tools \
        and OPEN in with_tools and CLOSE in with_tools


def merge_stats(a: GenerationStats, b: GenerationStats) -> GenerationStats:
    """One turn's figures from its free and constrained parts (prompt figures from the first)."""
    gen = a.generated_tokens + b.generated_tokens
    decode_s = a.decode_s + b.decode_s + b.prefill_s  # the second prefill is a few cached tokens
    return replace(
        a,
        generated_tokens=gen,
        decode_s=decode_s,
        decode_tps=gen / decode_s if decode_s > 0 else 0.0,
        finish_reason=b.finish_reason,
        context_tokens=b.context_tokens,
        peak_memory_gb=max(a.peak_memory_gb, b.peak_memory_gb),
        rounds=a.rounds + b.rounds,
        drafted=a.drafted + b.drafted,
        accepted=a.accepted + b.accepted,
        forced_tokens=a.forced_tokens + b.forced_tokens,
        draft_s=a.draft_s + b.draft_s,
        verify_s=a.verify_s + b.verify_s,
        speculative=a.speculative or b.speculative,
        drafter=a.drafter or b.drafter,
        k=b.k or a.k,
    )


class LocalModel:
    """Adapts `Session` to the conversation's `Model` protocol."""

    label = "local"

    def __init__(self, session: Session, params: SamplingParams, max_tokens: int, ctx: ToolContext | None,
                 constrain: bool = True, tools: Mapping[str, Any] | None = None,
                 tool_choice: str = "auto", tool_format: str = "auto", suffix: SuffixFile | None = None):
        from tools import TOOLS

        self.session, self.params, self.max_tokens = session, params, max_tokens
        self.ctx = ctx  # where edit_file's files are read for the grammar (None: no files)
        self.constrain = constrain
        self.tools = TOOLS if tools is None else tools  # what the grammar admits
        self.tool_choice = tool_choice  # "first": the first turn opens with a call; "required": all
        self._ll_tok = None
        self.suffix = suffix  # each finished reply is added to it (engine/suffix.py)
        self.last_grammar = ""
        # "native" asks for the model's own format; a template without one keeps the text format.
        self.native_tools = tool_format != "text" and template_takes_tools(session.tokenizer)

    def set_sampling(self, params: SamplingParams, max_tokens: int) -> None:
        """Sample with `params`, at most `max_tokens` per turn, from the next turn on."""
        self.params, self.max_tokens = params, max_tokens

    def for_workspace(self, ctx: ToolContext) -> "LocalModel":
        """The same engine and caches, reading another workspace's files for the grammar."""
        other = copy.copy(self)
        other.ctx = ctx
        return other

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        """Prompt tokens for `messages` (tool schemas through the template when native)."""
        if not self.native_tools:
            return self.session.render(messages)
        return self.session.render(wire_messages(messages, raw_calls=True), tool_specs(self.tools))

    @property
    def capabilities(self) -> Capabilities:
        """Leads, seeded per-call sampling, exact token counts (agent/core/backend.py)."""
        return Capabilities(self.label, self.native_tools, leads=True, sampling=True,
                            count_tokens=self.count_tokens, context_limit=self.context_limit,
                            reply_reserve=self.reply_reserve)

    # ---- the context budget (agent/core/budget.py) ----------------------------------------

    def count_tokens(self, messages: list[dict[str, str]]) -> int:
        return len(self.render(messages))

    @property
    def context_limit(self) -> int:
        return int(self.session.context_limit or 0)

    @property
    def reply_reserve(self) -> int:
        return int(self.max_tokens)

    def _stream(self, prompt: list[int], out: list, cancel: CancelToken, params: SamplingParams,
                holds: tuple[str, ...] = (), **kw) -> Iterator[Event]:
        """One `Session.generate`; a degenerate loop ends it right after the token that shows
        it (finish_reason "repetition", after a `Warning`). Text deltas at the start of the
        reply that could begin one of `holds` are held back: dropped if the reply stops at it
        or is a bare call, passed on as soon as the text goes another way."""
        from ..core.repetition import STOP_REASON, RepetitionGuard
        from ..engine import ContextOverflowError

        guard = RepetitionGuard()
        reply: list[int] = []
        held: list[TextDelta] = []
        holding = bool(holds)

        def watch(token: int) -> str | None:
            return STOP_REASON if guard.add(token) else None

        try:
            for ev in self.session.generate(prompt, params=params, max_tokens=self.max_tokens,
                                            cancel=cancel, watch=watch, **kw):
                if isinstance(ev, GenerationStats):
                    if ev.finish_reason == STOP_REASON:
                        yield Warning(guard.reason())
                    elif self.suffix is not None and ev.finish_reason != "cancelled":
                        why = self.suffix.remember(reply)  # (a loop is not worth drafting from)
                        if why:
                            yield Warning(why)
                    start = "".join(d.text for d in held).lstrip()
                    if holding and ev.finish_reason != "stop_string" and not is_bare_call(start):
                        yield from held  # the reply ended without writing what was held
                    out.append(ev)
                    continue
                if isinstance(ev, TextDelta):
                    reply += ev.tokens
                    out.append(ev.text)
                    if holding:
                        held.append(ev)
                        start = _squash("".join(d.text for d in held))
                        if any(h.startswith(start) or start.startswith(h) for h in holds):
                            continue
                        holding = False
                        yield from held
                        continue
                yield ev
        except ContextOverflowError as e:
            raise ModelError(str(e)) from None

    def constraint(self, messages: list[dict[str, str]]) -> GrammarConstraint | None:
        """The grammar for the call being written now (None when constraints are off)."""
        if not self.constrain:
            return None
        if self._ll_tok is None:
            self._ll_tok = ll_tokenizer(self.session.tokenizer)
        files, complete = (candidate_files(self.ctx, read_paths(messages)) if self.ctx is not None
                           else ({}, False))
        self.last_grammar = tool_call_grammar(self.tools, files, generic_edit=not complete)
        return GrammarConstraint(self._ll_tok, self.last_grammar, self.session.target.vocab_size)

    def _params(self, sampling: Sampling | None) -> SamplingParams:
        """The settings of one turn: the model's own, or `sampling`'s temperature with the
        sampler seeded from it (agent/core/resample.py draws a reply again so)."""
        if sampling is None:
            return self.params
        import mlx.core as mx

        mx.random.seed(sampling.seed)
        return replace(self.params, temperature=sampling.temperature)

    def generate(self, messages: list[dict[str, str]], cancel: CancelToken | None = None,
                 lead: str = "", sampling: Sampling | None = None) -> Iterator[Event]:
        """One assistant turn. `lead`: text the reply begins with, as if the model had written
        it (`leads`): it is streamed first and the model continues after it. `sampling`: this
        turn's temperature and seed instead of the model's settings."""
        cancel = cancel or CancelToken()
        params = self._params(sampling)
        prompt = self.render(messages)
        first_turn = is_first_turn(messages)
        if not lead and (self.tool_choice == "required" or (self.tool_choice == "first" and first_turn)):
            yield TextDelta(OPEN, (), (), ())
            yield from self._call(messages, prompt, OPEN, None, cancel, params)
            return
        first: list = []
        holds = BARE_CALLS if self.native_tools else (_squash(RESULT_OPEN), *BARE_CALLS)
        stops = [OPEN] if self.native_tools else [OPEN, RESULT_OPEN]
        if lead:  # a reply that begins with `lead` is no call written without its markers
            lead, ids = self._lead(lead)
            yield TextDelta(lead, (), (), ())
            yield from self._stream(list(prompt) + ids, first, cancel, params, stop_strings=stops)
            stats = first.pop()
            text = lead + "".join(first)
            if stats.finish_reason == "stop_string" and text.endswith(OPEN):
                yield from self._call(messages, prompt, text, stats, cancel, params)
            else:
                yield stats
            return
        yield from self._stream(prompt, first, cancel, params, holds, stop_strings=stops)
        stats = first.pop()
        text = "".join(first).strip()
        mimic = stats.finish_reason == "stop_string" and text == RESULT_OPEN
        if mimic or is_bare_call(text):
            # Small models imitate a tool result after a call (only tools write those), or
            # write a call's JSON without its markers: either way they want a call, so the
            # text is dropped and a call is decoded under the grammar instead.
            yield TextDelta(OPEN, (), (), ())
            yield from self._call(messages, prompt, OPEN, stats, cancel, params)
            return
        if stats.finish_reason != "stop_string" or not text.endswith(OPEN):
            yield stats
            return
        yield from self._call(messages, prompt, text, stats, cancel, params)

    def _lead(self, lead: str) -> tuple[str, list[int]]:
        """`lead` as the reply's start: (its text, its tokens) without its last token, which
        the model writes (a lead cut inside what is one token for the model, `):` of `):\n`,
        would start it from a split it was never trained on), when that is a prefix of it."""
        tok = self.session.tokenizer
        ids = list(tok.encode(lead, add_special_tokens=False))
        if len(ids) > 1:
            head = tok.decode(ids[:-1])
            if head.strip() and lead.startswith(head):
                return head, ids[:-1]
        return lead, ids

    def _call(self, messages: list[dict[str, str]], prompt: list[int], text: str,
              stats: GenerationStats | None, cancel: CancelToken,
              params: SamplingParams) -> Iterator[Event]:
        """Decode the call after `text` (which ends with `<tool_call>`), under the grammar."""
        constraint = self.constraint(messages)
        if constraint is not None and constraint.error:
            yield Warning(f"tool-call grammar rejected ({constraint.error}); calls are checked afterwards")
            constraint = None
        encode = getattr(self.session.tokenizer, "encode")
        prompt2 = list(prompt) + list(encode(text, add_special_tokens=False))
        second: list = []
        yield from self._stream(prompt2, second, cancel, params, stop_strings=[CLOSE],
                                constraint=constraint)
        yield merge_stats(stats, second[-1]) if stats is not None else second[-1]

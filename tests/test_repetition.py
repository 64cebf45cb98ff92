"""Degenerate repetition: the guard trips on a looping model and ends the turn with a clear
stop reason; ordinary text does not trip it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from scripted import conversation, fake_stats, git_repo  # noqa: F401

from agent.backends.local import LocalModel
from agent.core.backend import Capabilities
from agent.core.repetition import RepetitionGuard
from agent.events import (AgentResult, GenerationStats, RunStopped, TextDelta, Warning)
from agent.engine.sampling import SamplingParams

SENTENCE = list(range(100, 123))  # a 23-token sentence


def test_guard_trips_on_a_repeated_sentence_and_names_the_period():
    g = RepetitionGuard()
    fed = 0
    for _ in range(40):
        for t in SENTENCE:
            fed += 1
            if g.add(t):
                break
        if g.period:
            break
    assert g.period == len(SENTENCE)
    assert fed <= 160  # stopped after about five copies, not after the token limit
    assert "23-token" in g.reason()


def test_guard_ignores_ordinary_text_and_short_repeats():
    source = Path(__file__).parents[1] / "agent" / "core" / "conversation.py"
    g = RepetitionGuard()
    assert not g.add_all(ord(c) for c in source.read_text())
    g = RepetitionGuard()
    assert not g.add_all(SENTENCE * 2 + list(range(500, 700)) + SENTENCE * 2)


class LoopingSession:
    """A session whose model repeats one sentence until it is cancelled or its `watch`
    hook ends the turn (as `Session.generate` does, right after that token)."""

    tokenizer = object()

    def __init__(self):
        self.generated = 0

    def render(self, messages, tools=None):
        return [1, 2, 3]

    def generate(self, prompt, params=None, max_tokens=0, cancel=None, watch=None, **kw):
        reason = "length"
        while not cancel.cancelled and self.generated < max_tokens:
            tok = SENTENCE[self.generated % len(SENTENCE)]
            self.generated += 1
            yield TextDelta(f"w{tok} ", (tok,))
            why = watch(tok) if watch is not None else None
            if why:
                reason = why
                break
        reason = "cancelled" if cancel.cancelled else reason
        yield replace(fake_stats(generated=self.generated), finish_reason=reason)


def test_local_model_stops_a_looping_turn_with_reason_repetition():
    session = LoopingSession()
    model = LocalModel(session, SamplingParams(), 1024, None, constrain=False)
    events = list(model.generate([{"role": "user", "content": "What does make test do?"}]))
    stats = [e for e in events if isinstance(e, GenerationStats)]
    assert len(stats) == 1 and stats[0].finish_reason == "repetition"
    assert any(isinstance(e, Warning) and "repeating" in e.message for e in events)
    assert session.generated < 200  # not the 1,024-token limit


class RepeatingModel:
    capabilities = Capabilities()  # (agent/core/backend.py: nothing beyond turns)

    def generate(self, messages, cancel=None):
        yield TextDelta("The Makefile runs tests. " * 6, ())
        yield replace(fake_stats(), finish_reason="repetition")


def test_conversation_ends_the_message_with_stop_reason_repetition(git_repo):
    conv = conversation(git_repo, RepeatingModel())
    events = list(conv.send("What does the Makefile's test target do?"))
    stops = [e for e in events if isinstance(e, RunStopped)]
    result = events[-1]
    assert stops and stops[0].reason == "repetition"
    assert isinstance(result, AgentResult) and result.stop_reason == "repetition"
    assert result.is_error and "repeating" in result.error


class FakeTokenizer:
    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


class ScriptSession:
    """A session that writes `replies` in turn (one per generate call), honouring stop strings."""

    tokenizer = FakeTokenizer()

    def __init__(self, replies):
        self.replies, self.prompts = list(replies), []

    def render(self, messages, tools=None):
        return [1, 2, 3]

    def generate(self, prompt, params=None, max_tokens=0, cancel=None, stop_strings=(), **kw):
        self.prompts.append(prompt)
        text = self.replies.pop(0)
        finish = "stop"
        for s in stop_strings:
            if s in text:
                text, finish = text[: text.index(s) + len(s)], "stop_string"
        for i in range(0, len(text), 3):
            yield TextDelta(text[i : i + 3], (7,))
        yield replace(fake_stats(), finish_reason=finish)


def _texts(events):
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_a_reply_that_imitates_a_tool_result_becomes_a_call():
    session = ScriptSession(['<tool_result name="read_file">\nok', '{"name":"git_status","arguments":{}}</tool_call>'])
    model = LocalModel(session, SamplingParams(), 64, None, constrain=False)
    events = list(model.generate([{"role": "user", "content": "x"}]))
    assert _texts(events) == '<tool_call>{"name":"git_status","arguments":{}}</tool_call>'
    assert len(session.prompts) == 2
    assert session.prompts[1] == [1, 2, 3] + [ord(c) for c in "<tool_call>"]  # the result is gone


def test_ordinary_replies_are_not_held_back():
    for reply in ["The answer is 7.", "<b>bold</b> text", "", '{"a": 1}', '{"names": []}']:
        model = LocalModel(ScriptSession([reply]), SamplingParams(), 64, None, constrain=False)
        assert _texts(model.generate([{"role": "user", "content": "x"}])) == reply


def test_a_bare_json_call_without_markers_becomes_a_call():
    session = ScriptSession(['{"name": "change_port", "arguments": {"port": 9090}}',
                             '{"name":"git_status","arguments":{}}</tool_call>'])
    model = LocalModel(session, SamplingParams(), 64, None, constrain=False)
    events = list(model.generate([{"role": "user", "content": "x"}]))
    assert _texts(events) == '<tool_call>{"name":"git_status","arguments":{}}</tool_call>'
    assert session.prompts[1] == [1, 2, 3] + [ord(c) for c in "<tool_call>"]

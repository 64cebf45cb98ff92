"""The context budget: compaction keeps the stable start and the last messages, elides old
tool outputs first, tells the user, keeps the prompt append-only afterwards, and on the real
engine a long conversation stays inside a small window with warm turns re-reading only new
tokens."""

from __future__ import annotations

import pytest
from scripted import ScriptedModel, call, conversation, git_repo  # noqa: F401

from agent.core import budget
from agent.core.budget import Budget
from agent.core.callformat import format_result
from agent.events import ContextCompacted, GenerationStats, TurnStats
from tools import ToolResult


def chars(messages) -> int:
    return sum(len(m["content"]) for m in messages) // 4  # a stand-in tokenizer


def history(n_results: int, size: int = 4000) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "S" * 800}, {"role": "user", "content": "task " * 100}]
    for i in range(n_results):
        msgs.append({"role": "assistant", "content": call("read_file", path=f"f{i}.py")})
        out = ToolResult(True, f"line of file {i}\n" * (size // 16))
        msgs.append({"role": "user", "content": format_result("read_file", out)})
    return msgs


def test_no_compaction_below_the_threshold():
    msgs = history(2, size=400)
    view, done = Budget().fit(msgs, chars, limit=10_000, reserve=100)
    assert done is None and view == msgs


def test_compaction_elides_old_outputs_first_and_keeps_start_and_tail():
    msgs = history(8)
    b = Budget()
    before = chars(msgs)
    view, done = b.fit(msgs, chars, limit=int(before / 0.9), reserve=100)
    assert done is not None and done.tokens_before == before
    assert done.tokens_after <= budget.LOW * done.limit - 100 < done.tokens_before
    assert view[:2] == msgs[:2]  # system prompt and first user message untouched
    assert view[-budget.KEEP_LAST:] == msgs[-budget.KEEP_LAST:]  # the latest exchange whole
    changed = [i for i, (a, m) in enumerate(zip(view, msgs)) if a != m]
    assert changed == sorted(changed) and changed[0] == 3  # the oldest tool output first
    assert all(msgs[i]["content"].startswith("<tool_result") for i in changed)
    for i in changed:  # still a well-formed result that says what happened
        assert view[i]["content"].startswith('<tool_result name="read_file" status="ok">\n')
        assert view[i]["content"].endswith("</tool_result>")
        assert "elided to fit the context window" in view[i]["content"]


def test_after_compaction_the_prompt_is_append_only_again():
    msgs = history(8)
    b = Budget()
    limit = int(chars(msgs) / 0.9)
    first, done = b.fit(msgs, chars, limit, reserve=100)
    assert done is not None
    msgs = msgs + [{"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}]
    second, again = b.fit(msgs, chars, limit, reserve=100)
    assert again is None and second[: len(first)] == first


def test_long_texts_are_elided_when_outputs_are_not_enough():
    msgs = [{"role": "system", "content": "S" * 100}, {"role": "user", "content": "go"}]
    msgs += [{"role": "assistant", "content": "x" * 5000}, {"role": "user", "content": "y" * 5000}] * 3
    msgs += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}] * 2
    view, done = Budget().fit(msgs, chars, limit=int(chars(msgs) / 0.9), reserve=0)
    assert done is not None and done.messages >= 2
    assert all(len(m["content"]) < 400 for m in view[2:4])


class Counting(ScriptedModel):
    """A scripted model with a window: counts tokens as characters / 4."""

    context_limit = 3000
    reply_reserve = 200

    def count_tokens(self, messages) -> int:
        return chars(messages)


def test_conversation_compacts_tells_the_user_and_keeps_the_saved_history(git_repo):
    big = "x = 1\n" * 1500
    (git_repo / "big.py").write_text(big)
    turns = [call("read_file", path="big.py"), call("read_file", path="calc.py"),
             call("read_file", path="big.py"), "done"]
    model = Counting(turns)
    conv = conversation(git_repo, model)
    events = list(conv.send("read them"))
    notes = [e for e in events if isinstance(e, ContextCompacted)]
    assert notes and notes[0].elided >= 1 and notes[0].tokens_after < notes[0].tokens_before
    assert "elided" in notes[0].message
    last_seen = model.seen[-1]
    assert chars(last_seen) + model.reply_reserve <= model.context_limit
    # the history that is saved and resumed is whole
    whole = lambda ms: sum(m["content"].count("x = 1") >= 1000 for m in ms)  # noqa: E731
    assert whole(conv.messages) == 2 and whole(last_seen) <= 1


def test_engine_conversation_stays_in_a_small_window(llama, git_repo):
    """The real local backend with a 6,000-token window (the system prompt takes ~2,300): tool outputs that would overflow it
    are elided; after a compaction each turn re-reads only its new tokens."""
    from agent.backends.local import LocalModel
    from agent.core.backend import Capabilities
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session

    (git_repo / "big.py").write_text("value = compute(1, 2, 3)\n" * 60)
    session = Session(llama)
    session.context_limit = 6000
    local = LocalModel(session, SamplingParams(), max_tokens=8, ctx=None, constrain=False)
    script = ScriptedModel([call("read_file", path="big.py")] * 9 + ["done"])

    class Hybrid:
        """Decides like the script, but every turn runs the engine on the real prompt."""

        capabilities = Capabilities("local", count_tokens=local.count_tokens,
                                    context_limit=local.context_limit,
                                    reply_reserve=local.reply_reserve)

        def generate(self, messages, cancel=None):
            real = [e for e in local.generate(messages, cancel) if isinstance(e, GenerationStats)]
            for e in script.generate(messages, cancel):
                yield real[-1] if isinstance(e, GenerationStats) else e

    conv = conversation(git_repo, Hybrid())
    events = list(conv.send("read big.py again and again"))
    assert any(isinstance(e, ContextCompacted) for e in events)
    stats = [e.stats for e in events if isinstance(e, TurnStats)]
    assert len(stats) == 10 and all(s.finish_reason != "error" for s in stats)
    assert max(s.prompt_tokens for s in stats) < 6000
    compacted_at = [i for i, e in enumerate(events) if isinstance(e, ContextCompacted)]
    # a turn with no compaction before it re-reads only what was appended since the last turn
    turn_of = [i for i, e in enumerate(events) if isinstance(e, TurnStats)]
    checked = 0
    for j in range(1, len(turn_of)):
        if not any(turn_of[j - 1] < c < turn_of[j] for c in compacted_at):
            grew = stats[j].prompt_tokens - stats[j - 1].prompt_tokens
            assert stats[j].reread_tokens <= grew + 1
            checked += 1
    assert checked >= 2

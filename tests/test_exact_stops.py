"""Stops inside accepted drafts end the turn exactly where plain decoding ends it, and auto
mode's plain stretches run on plain decoding's own (pipelined) path."""

from __future__ import annotations

import pytest

from agent.engine import speculative
from agent.engine.drafters import Combined, DraftModel, PromptLookup
from agent.engine.session import Session
from agent.engine.speculative import SpecPolicy, Speculator
from agent.events import GenerationStats, SpeculationChanged, TextDelta

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n"


def drafter(kind: str, draft):
    if kind == "model":
        return DraftModel(draft)
    if kind == "lookup":
        return PromptLookup(max_n=3, min_n=1)
    return Combined(DraftModel(draft), PromptLookup(max_n=3, min_n=1), confident_n=2)


def run(session: Session, prompt, **kw) -> dict:
    deltas, stats, events = [], None, []
    for e in session.generate(prompt, **kw):
        events.append(e)
        if isinstance(e, TextDelta):
            deltas.append(e)
        elif isinstance(e, GenerationStats):
            stats = e
    return dict(tokens=[t for d in deltas for t in d.tokens], text="".join(d.text for d in deltas),
                flags=[f for d in deltas for f in d.from_draft], deltas=deltas, stats=stats,
                history=list(session.tokens), events=events)


def inner_drafted_positions(deltas) -> list[int]:
    """Output positions of accepted draft tokens that are not the last token of their batch
    (a stop there leaves accepted tokens after it in the same batch)."""
    out, pos = [], 0
    for d in deltas:
        for j, f in enumerate(d.from_draft):
            if f and j < len(d.from_draft) - 1:
                out.append(pos + j)
        pos += len(d.tokens)
    return out


def streamed_texts(tokenizer, tokens) -> list[str]:
    """The text a streaming detokenizer has produced after each token."""
    detok = tokenizer.detokenizer
    detok.reset()
    out, text = [], ""
    for t in tokens:
        detok.add_token(t)
        text += detok.last_segment
        out.append(text)
    return out


def spec_session(target, draft, kind: str, k: int = 6) -> Session:
    return Session(target, speculator=Speculator(drafter(kind, draft), SpecPolicy(mode="on", fixed_k=k)))


# Lookup drafts on this random model only inside repeated text, where no string is new; the
# stop handling is the session's and does not depend on the drafter.
@pytest.mark.parametrize("kind", ["model", "combined"])
def test_stop_string_inside_accepted_drafts(pair, kind):
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": PROMPT}])
    free = run(spec_session(target, draft, kind), prompt, max_tokens=96, stop_tokens=set())
    texts = streamed_texts(target.tokenizer, free["tokens"])

    def stop_at(i: int) -> str | None:
        """A printable stop string that token i completes for the first time."""
        head = texts[i]
        for n in (4, 3, 2, 1):
            stop = head[-n:]
            new = len(head) > len(texts[i - 1]) if i else bool(head)
            if new and stop.isascii() and stop.isprintable() and head.find(stop) == len(head) - n:
                return stop
        return None

    for i in inner_drafted_positions(free["deltas"]):
        stop = stop_at(i)
        if stop:
            break
    else:
        pytest.skip("no drafted token in the middle of a batch completes a new string")
    plain = run(Session(target), prompt, max_tokens=96, stop_tokens=set(), stop_strings=[stop])
    got = run(spec_session(target, draft, kind), prompt, max_tokens=96, stop_tokens=set(),
              stop_strings=[stop])
    assert plain["stats"].finish_reason == got["stats"].finish_reason == "stop_string"
    assert got["tokens"] == plain["tokens"] == free["tokens"][: i + 1]
    assert got["text"] == plain["text"] and got["text"].endswith(stop)
    assert stop not in got["text"][:-1]
    assert got["history"] == plain["history"]
    assert got["stats"].generated_tokens == plain["stats"].generated_tokens == i + 1
    assert got["stats"].accepted == sum(got["flags"])


@pytest.mark.parametrize("kind", ["model", "combined"])
def test_eos_inside_accepted_drafts(pair, kind):
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": PROMPT}])
    free = run(spec_session(target, draft, kind), prompt, max_tokens=96, stop_tokens=set())
    toks = free["tokens"]
    inner = [i for i in inner_drafted_positions(free["deltas"]) if toks.index(toks[i]) == i]
    if not inner:
        pytest.skip("no first-seen drafted token in the middle of a batch")
    i = inner[0]
    stop = {toks[i]}
    plain = run(Session(target), prompt, max_tokens=96, stop_tokens=stop)
    got = run(spec_session(target, draft, kind), prompt, max_tokens=96, stop_tokens=stop)
    assert plain["stats"].finish_reason == got["stats"].finish_reason == "stop"
    assert got["tokens"] == plain["tokens"] == toks[:i]  # the stop token is not text
    assert got["history"] == plain["history"] and got["history"][-1] == toks[i]
    assert got["stats"].generated_tokens == plain["stats"].generated_tokens == i + 1
    # the stop token itself may have been an accepted draft; nothing after it counts
    assert sum(got["flags"]) <= got["stats"].accepted <= sum(got["flags"]) + 1
    # The session goes on from exactly that history: the next turn equals a cold run.
    s = spec_session(target, draft, kind)
    run(s, prompt, max_tokens=96, stop_tokens=stop)
    nxt = s.tokens + Session(target).render([{"role": "user", "content": "more"}])[1:]
    warm = run(s, nxt, max_tokens=40, stop_tokens=set())
    assert warm["tokens"] == run(Session(target), nxt, max_tokens=40, stop_tokens=set())["tokens"]


def test_max_tokens_inside_a_batch_drops_the_rest_from_counts(pair):
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": PROMPT}])
    for n in (7, 13, 29):
        got = run(spec_session(target, draft, "model"), prompt, max_tokens=n, stop_tokens=set())
        want = run(Session(target), prompt, max_tokens=n, stop_tokens=set())
        assert got["tokens"] == want["tokens"] and got["history"] == want["history"]
        assert got["stats"].generated_tokens == n
        assert got["stats"].accepted == sum(got["flags"])


def test_auto_off_decodes_on_the_pipelined_plain_path(pair, monkeypatch):
    """While auto mode has drafting off it decodes through `plain_decode` (like
    `--speculation off`); switching off and back on repeatedly keeps greedy output exact."""
    target, draft = pair
    calls = []
    real = speculative.plain_decode

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(speculative, "plain_decode", counted)
    policy = SpecPolicy(mode="auto", probe_rounds=2, plain_probe=3, backoff_tokens=5)
    spec = Speculator(DraftModel(draft), policy)
    spec.plain_tps.add(1e9)  # plain looks unbeatable: every check switches drafting off
    s = Session(target, speculator=spec)
    prompt = s.render([{"role": "user", "content": PROMPT}])
    got = run(s, prompt, max_tokens=120, stop_tokens=set())
    want = run(Session(target), prompt, max_tokens=120, stop_tokens=set())
    assert got["tokens"] == want["tokens"] and got["history"] == want["history"]
    changes = [e.enabled for e in got["events"] if isinstance(e, SpeculationChanged)]
    assert changes.count(False) >= 2 and True in changes  # off, re-probe, off again
    assert len(calls) >= 3  # probes and off stretches ran on plain_decode
    assert s.tcache.offset <= len(s.tokens)
    # the next turn from this history equals a cold run
    nxt = s.tokens + s.render([{"role": "user", "content": "again"}])[1:]
    warm = run(s, nxt, max_tokens=40, stop_tokens=set())
    assert warm["tokens"] == run(Session(target), nxt, max_tokens=40, stop_tokens=set())["tokens"]


def test_round_timing_includes_the_drafts_catch_up(pair, monkeypatch):
    """The draft model's catch-up (prepare) is part of what a round costs in the auto-off
    comparison."""
    import time

    target, draft = pair
    dm = DraftModel(draft)
    real = dm.prepare

    def slow_prepare(tokens):
        time.sleep(0.05)
        return real(tokens)

    monkeypatch.setattr(dm, "prepare", slow_prepare)
    spec = Speculator(dm, SpecPolicy(mode="on", fixed_k=2))
    s = Session(target, speculator=spec)
    prompt = s.render([{"role": "user", "content": PROMPT}])
    run(s, prompt, max_tokens=12, stop_tokens=set())
    assert spec.spec_tps.n > 0
    assert spec.spec_tps.value < 3 / 0.05  # at most K+1 tokens per >= 50 ms round


def test_watch_ends_the_turn_at_its_token_whatever_the_rounds(pair):
    """A `watch` hook (the repetition guard's seat) ends the turn right after the token it
    names, with speculation on or off: same tokens, same history, its finish reason."""
    target, draft = pair
    prompt = Session(target).render([{"role": "user", "content": PROMPT}])
    seen: list[int] = []

    def at(n: int):
        count = iter(range(1, 10_000))
        return lambda token: "watched" if next(count) == n else None

    for n in (5, 17, 40):
        plain = run(Session(target), prompt, max_tokens=96, stop_tokens=set(), watch=at(n))
        got = run(spec_session(target, draft, "combined"), prompt, max_tokens=96,
                  stop_tokens=set(), watch=at(n))
        assert plain["stats"].finish_reason == got["stats"].finish_reason == "watched"
        assert got["tokens"] == plain["tokens"] and len(got["tokens"]) == n
        assert got["history"] == plain["history"]
        seen.append(got["stats"].rounds)
    assert any(seen)  # speculation ran

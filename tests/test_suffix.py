"""The suffix index of earlier replies (agent/engine/suffix.py): what it drafts, its cap, its
file (rejected when damaged, rebuilt), and that drafting from it keeps greedy output exact."""

from __future__ import annotations

import json

import pytest

from agent.engine.drafters import PromptLookup
from agent.engine.session import Session
from agent.engine.speculative import SpecPolicy, Speculator
from agent.engine.suffix import SuffixFile, SuffixIndex


def test_drafts_what_most_earlier_replies_agree_on():
    index = SuffixIndex(min_n=3, max_n=4)
    for tail in ([4, 5, 6, 7], [4, 5, 6, 8], [4, 5, 6, 7], [4, 9, 9, 9]):
        index.add([1, 2, 3, *tail])
    n, draft = index.continuation([50, 1, 2, 3], 8)
    assert n == 3
    # 4 (4 of 4), 5 (3 of 4), 6 (3 of 3), then 7 (2 of 3), and the one 7 left ends the reply
    assert draft == [4, 5, 6, 7]
    assert index.continuation([50, 60, 70], 8) == (0, [])
    assert index.continuation([1, 2, 3], 2)[1] == [4, 5]


def test_no_draft_where_earlier_replies_disagree():
    index = SuffixIndex(min_n=2, max_n=2)
    for nxt in (10, 11, 12):
        index.add([7, 8, nxt, 0])
    assert index.continuation([7, 8], 4) == (2, [])


def test_stays_under_its_cap_dropping_the_oldest():
    index = SuffixIndex(cap=100)
    for i in range(40):
        index.add([1000 + i, 1, 2, 3, 2000 + i])
    assert len(index) <= 100
    assert index.continuation([1000 + 39, 1, 2, 3], 1) == (4, [2039])  # the latest reply is kept
    assert (1000, 1, 2, 3) not in index.index  # the first is gone
    assert index.continuation([1000, 1, 2, 3], 4) == (3, [])  # (1, 2, 3): the replies disagree


def test_file_round_trip(tmp_path):
    path = tmp_path / "conv" / "suffix-m.json"
    store, why = SuffixFile.open(path, "m")
    assert why == "" and len(store.index) == 0  # no file yet: empty, no complaint
    assert store.remember([5, 6, 7, 8, 9]) == ""
    again, why = SuffixFile.open(path, "m")
    assert why == "" and again.index.continuation([5, 6, 7], 2) == (3, [8, 9])


@pytest.mark.parametrize("content", [
    b"\x00\xffnot json",
    b'{"format": "spec-agent-suffix-index", "version": 1, "key": "m", "tokens": [1, 2, "x", -1]}',
    b'{"format": "spec-agent-suffix-index", "version": 99, "key": "m", "tokens": []}',
    b'{"format": "spec-agent-suffix-index", "version": 1, "key": "m", "tokens": [1, 2, 3]}',
    b'{"format": "spec-agent-suffix-index", "version": 1, "key": "m", "tokens": [1, 2, 3, -1',
    b"[" * 100_000,
    b'{"format": "spec-agent-suffix-index", "version": 1, "key": "other", "tokens": []}',
])
def test_a_damaged_or_foreign_file_is_rejected_and_rebuilt(tmp_path, content):
    path = tmp_path / "suffix-m.json"
    path.write_bytes(content)
    store, why = SuffixFile.open(path, "m")
    assert why and str(path) in why and len(store.index) == 0
    assert store.remember([5, 6, 7, 8, 9]) == ""  # the next reply writes a good file over it
    data = json.loads(path.read_text())
    assert data["key"] == "m" and data["tokens"] == [5, 6, 7, 8, 9, -1]
    assert not list(tmp_path.glob(".*.tmp"))


def test_an_unwritable_folder_is_one_warning(tmp_path):
    (tmp_path / "file").write_text("")
    store, _ = SuffixFile.open(tmp_path / "file" / "suffix.json", "m")
    why = store.remember([1, 2, 3, 4, 5])
    assert why.startswith("suffix index") and store.index.continuation([1, 2, 3], 2)[1] == [4, 5]


def _tokens(session: Session, prompt, **kw):
    done = session.complete(prompt, max_tokens=48, stop_tokens=set(), **kw)
    return done.tokens, done.stats


def test_drafts_from_an_earlier_session_keep_greedy_output_exact(llama):
    prompt = Session(llama).render([{"role": "user", "content": "def add(a, b):"}])
    want, _ = _tokens(Session(llama), prompt)
    index = SuffixIndex()
    index.add(want)  # what an earlier session replied to this prompt
    spec = Session(llama, speculator=Speculator(PromptLookup(suffix=index), SpecPolicy(mode="on")))
    got, stats = _tokens(spec, prompt)
    assert got == want
    by_source = {s: (d, a) for s, d, a in stats.by_source}
    assert by_source["suffix"][1] > 0  # its drafts were accepted
    # a second turn on the same session, the suffix index still consulted, still exact
    prompt2 = prompt + want + Session(llama).render([{"role": "user", "content": "again"}])[-8:]
    got2, _ = _tokens(spec, prompt2)
    assert got2 == _tokens(Session(llama), prompt2)[0]


def test_without_the_index_lookup_drafts_less(pair):
    """The check above can fail: the same turn without the index accepts fewer drafts. The
    pair's target starts its reply with text the prompt does not hold (the random llama repeats
    one token, which lookup alone drafts as well), and K is fixed so that no timing decides."""
    target, _ = pair
    prompt = Session(target).render([{"role": "user", "content": "def add(a, b):"}])
    want, _ = _tokens(Session(target), prompt)
    index = SuffixIndex()
    index.add(want)

    def accepted(lookup):
        policy = SpecPolicy(mode="on", fixed_k=8)
        got, stats = _tokens(Session(target, speculator=Speculator(lookup, policy)), prompt)
        assert got == want
        return stats.accepted

    assert accepted(PromptLookup(suffix=index)) > accepted(PromptLookup()) + 4


def test_the_context_drafts_first_and_the_index_where_the_context_cannot():
    index = SuffixIndex(min_n=3, max_n=5)
    index.add([1, 2, 3, 4, 5, 60, 61, 62])
    # the context holds (4, 5) once, followed by 99; the index holds (1, 2, 3, 4, 5): the
    # context's match drafts, as lookup alone would
    history = [4, 5, 99, 1, 2, 3, 4, 5]
    with_index, alone = PromptLookup(suffix=index), PromptLookup()
    assert with_index.match(history, 3) == alone.match(history, 3) == (2, [99, 1, 2])
    assert with_index.source == "lookup"
    # no match in the context: the index drafts
    lookup = PromptLookup(suffix=index)
    n, draft = lookup.match([8, 1, 2, 3, 4, 5], 3)
    assert (n, draft, lookup.source) == (5, [60, 61, 62], "suffix")
    # the context's kind of match drafting nothing (its drafts kept failing): the index drafts
    lookup = PromptLookup(suffix=index)
    lookup.gain["n2"] = 0.1
    n, draft = lookup.match(history, 3)
    assert (n, draft, lookup.source) == (5, [60, 61, 62], "suffix")


def test_a_suffix_draft_accepted_whole_is_followed_by_a_longer_one():
    index = SuffixIndex(min_n=3, max_n=3)
    run = list(range(100, 140))
    index.add([1, 2, 3, *run])
    lookup = PromptLookup(suffix=index)
    history = [9, 1, 2, 3]
    sizes = []
    for _ in range(3):
        n, draft = lookup.match(history, 4)
        assert lookup.source == "suffix" and draft == run[len(history) - 4 :][: len(draft)]
        sizes.append(len(draft))
        history = history + draft + [run[len(history) - 4 + len(draft)]]  # accepted, + target's
    assert sizes == [4, 8, 16]
    # a draft accepted in part: the next suffix draft is K long again
    draft = lookup.match(history, 4)[1]
    history = history + draft[:3] + [7, 500]
    assert lookup.match(history, 4) == (0, []) and lookup.suffix_run == 0
    assert len(lookup.match(history + [1, 2, 3], 4)[1]) == 4


def test_suffix_drafts_that_keep_failing_stop():
    index = SuffixIndex(min_n=3, max_n=3)
    triples = [[100 + 3 * i, 101 + 3 * i, 102 + 3 * i] for i in range(12)]
    for t in triples:
        index.add([*t, 40, 41, 42, 43])
    lookup = PromptLookup(suffix=index)
    history, sizes = [9], []
    for step, t in enumerate(triples):  # the target never writes what the index drafts
        history += t
        sizes.append(len(lookup.match(history, 4)[1]))
        history.append(500 + step)
    # 4 at first, then shorter, then nothing for a while (a retry of one token now and then)
    assert sizes[:3] == [4, 4, 4] and sizes[-4:].count(0) >= 3 and max(sizes[-4:]) <= 1

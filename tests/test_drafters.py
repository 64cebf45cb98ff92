"""Drafters: prompt lookup's continuing matches and draft lengths, the incremental index
(equal to a fresh build after any grow/rewind), the draft model's cheap resync (warm proposals
equal cold ones), and greedy identity with plain decoding on copy-heavy text."""

from __future__ import annotations

import random

import pytest

from agent.engine.drafters import DraftModel, PromptLookup
from agent.engine.sampling import SamplingParams
from agent.engine.session import Session
from agent.engine.speculative import SpecPolicy, Speculator
from agent.events import GenerationStats, TextDelta

GREEDY = SamplingParams()


def fresh_index(lk: PromptLookup) -> dict:
    ref = PromptLookup(lk.max_n, lk.min_n)
    ref._add(lk.hist, ref.index, 0, len(lk.hist))
    return ref.index


def test_index_stays_equal_to_a_fresh_build_through_grows_and_rewinds():
    rng = random.Random(0)
    lk = PromptLookup(max_n=4, min_n=1)
    hist: list[int] = []
    for _ in range(200):
        if hist and rng.random() < 0.3:
            hist = hist[: rng.randrange(len(hist) + 1)]
            lk.rewind_to(len(hist))
        else:
            hist = hist + [rng.randrange(6) for _ in range(rng.randrange(1, 9))]
        lk.match(hist, 4)
        assert lk.hist == hist
        assert lk.index == fresh_index(lk)
    other = [9] + hist  # a different history, given without a rewind: resynced in full
    lk.match(other, 4)
    assert lk.hist == other and lk.index == fresh_index(lk)


def test_an_accepted_match_continues_across_rounds():
    source = [10, 11, 12, 13, 20, 21, 22, 23, 30, 31, 32, 33]
    # The 1-token match "12" occurs twice; the copy in progress decides which one continues.
    hist = source + [50] + [10, 11, 12, 13, 20]
    lk = PromptLookup(max_n=4, min_n=1)
    n, cont = lk.match(hist, 4)
    assert cont == [21, 22, 23, 30]
    hist = hist + cont  # all accepted (+ the target's next token agreeing with the source)
    hist.append(31)
    n, cont = lk.match(hist, 3)
    # Followed the cursor (no re-search), and the run accepted in full grows past k.
    assert cont == [32, 33, 50, 10, 11, 12, 13, 20] and n >= lk.max_n
    pinned = PromptLookup(max_n=4, min_n=1, max_k=3)
    pinned.match(hist[:-5], 4)
    assert len(pinned.match(hist, 3)[1]) == 3


def test_a_kind_of_match_that_keeps_failing_stops_drafting_for_a_while():
    lk = PromptLookup(max_n=4, min_n=1)
    hist = [1, 2, 3, 4, 5, 6, 7, 8]
    skipped = 0
    for t in range(100, 160):
        hist = hist + [1, t]  # "1" matches, then the text goes elsewhere: every draft fails
        n, cont = lk.match(hist[:-1], 8)
        skipped += not cont
    assert skipped > 30  # mostly no draft once 1-token matches have stopped paying
    assert min(lk.gain.values()) < PromptLookup.SKIP_BELOW + 0.1


def test_after_the_copy_breaks_the_latest_occurrence_is_searched_again():
    source = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 10, 5, 6, 11]
    hist = source + [99] + [5, 6]
    lk = PromptLookup(max_n=4, min_n=2)
    assert lk.match(hist, 2)[1] == [11, 99]  # the latest "5 6"
    hist += [7]  # the target wrote 7: the cursor is gone, "6 7" is found again
    assert lk.match(hist, 2)[1][:1] == [8]


def test_lookup_from_extra_text():
    lk = PromptLookup(max_n=3, min_n=2, extra=[9, 8, 7, 6, 5])
    assert lk.match([1, 2, 8, 7], 3) == (2, [6, 5])


def test_draft_model_resync_matches_a_cold_draft(llama):
    """Proposals after many rounds (drafts partly rejected, histories cut) equal a fresh
    DraftModel's on the same history."""
    rng = random.Random(1)
    warm = DraftModel(llama)
    hist = [rng.randrange(1, 400) for _ in range(40)]
    for step in range(12):
        got = warm.propose(hist, 3, GREEDY).tokens
        want = DraftModel(llama).propose(hist, 3, GREEDY).tokens
        assert got == want, step
        keep = rng.randrange(len(got) + 1)
        hist = hist + got[:keep] + [rng.randrange(1, 400)]
        if step % 5 == 4:  # a new prompt sharing a prefix
            hist = hist[: len(hist) - 7] + [rng.randrange(1, 400) for _ in range(3)]
            warm.rewind_to(len(hist) - 3)


def _generate(session: Session, prompt: list[int], n: int) -> tuple[list[int], GenerationStats]:
    out, stats = [], None
    for ev in session.generate(prompt, max_tokens=n, stop_tokens=set()):
        if isinstance(ev, TextDelta):
            out += ev.tokens
        elif isinstance(ev, GenerationStats):
            stats = ev
    return out, stats


@pytest.mark.parametrize("fixed_k", [0, 3, 8])
def test_lookup_greedy_identical_to_plain_on_copy_heavy_text(llama, fixed_k):
    text = "def read(path):\n    with open(path) as f:\n        return f.read()\n" * 3
    prompt = Session(llama).render([{"role": "user", "content": text + "Copy it."}])
    want, _ = _generate(Session(llama), prompt, 80)
    spec = Speculator(PromptLookup(), SpecPolicy(mode="on", fixed_k=fixed_k))
    got, stats = _generate(Session(llama, speculator=spec), prompt, 80)
    assert got == want
    assert stats.rounds > 0 and stats.accepted <= stats.drafted

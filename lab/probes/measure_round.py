"""Drafter-side work per speculative round (mean and median) at 1k and 16k tokens of context (no model
calls).

A round of prompt lookup: the history grew by a few tokens (or was cut back by a few, as when
a new turn re-renders the tail), then `propose`. For the draft model the measured part is
its resync with the history (`_sync`) on a stub cache, the part that used to scan the whole
context. The lookup round is also measured with a suffix index at its cap (65,536 tokens of
earlier replies, consulted at every fresh match), the product's lookup drafter. Compares this checkout's drafters with another version's file (default: the one in
git HEAD~N given by --rev). Usage: .venv/bin/python lab/probes/measure_round.py [--rev REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tools import git

ROOT = Path(__file__).resolve().parents[2]


def load_drafters(rev: str | None):
    if rev is None:
        from agent.engine import drafters

        return drafters
    text = git.run(ROOT, "show", f"{rev}:agent/engine/drafters.py").stdout
    path = Path(tempfile.mkdtemp()) / "drafters_old.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("agent.engine.drafters_old", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def corpus(n: int) -> list[int]:
    """n token ids with the repetition of real code: bytes of this repo's Python files."""
    data = b"".join(p.read_bytes() for p in sorted((ROOT / "agent").rglob("*.py")))
    return list(data[:n])


class StubCache:
    def __init__(self):
        self.offset = 0

    def rewind_to(self, n):
        self.offset = min(self.offset, n)


def full_suffix_index():
    """A suffix index at its cap, of other text than `corpus`'s: the tests' bytes, in
    replies of 400 tokens."""
    from agent.engine.suffix import SuffixIndex

    index = SuffixIndex("bench")
    data = b"".join(p.read_bytes() for p in sorted((ROOT / "tests").rglob("*.py")))
    for i in range(0, min(len(data), 2 * index.cap), 400):
        index.add(list(data[i : i + 400]))
    return index


def lookup_round_us(mod, ctx: int, rounds: int = 300, rewind_every: int = 10,
                    suffix=None) -> float:
    rng = random.Random(0)
    hist = corpus(ctx)
    lk = mod.PromptLookup(suffix=suffix) if suffix is not None else mod.PromptLookup()
    lk.match(hist, 8)
    times = []
    for i in range(rounds):
        if i % rewind_every == rewind_every - 1:  # a new turn: the tail re-rendered
            cut = len(hist) - 4
            hist = hist[:cut] + hist[cut - 40 : cut - 36]
            t = time.perf_counter()
            lk.rewind_to(cut)
        else:
            hist = hist + hist[len(hist) - 200 : len(hist) - 200 + rng.randrange(1, 9)]
            t = time.perf_counter()
        lk.match(hist, 8)
        times.append(time.perf_counter() - t)
    return statistics.mean(times) * 1e6, statistics.median(times) * 1e6


def draft_sync_us(mod, ctx: int, rounds: int = 300) -> float:
    dm = mod.DraftModel.__new__(mod.DraftModel)
    dm.cache, dm.fed, dm.synced, dm.scanned, dm._tree = StubCache(), [], 0, 0, None
    hist = corpus(ctx)
    dm.fed = list(hist[:-1])
    dm.cache.offset = len(dm.fed)
    dm.synced = len(dm.fed)
    rng = random.Random(0)
    times = []
    for _ in range(rounds):
        drafts = [rng.randrange(256) for _ in range(4)]
        dm.fed += [hist[-1]] + drafts[:3]  # what propose leaves behind: history, then drafts
        dm.cache.offset = len(dm.fed)
        dm.synced = len(hist)
        hist = hist + drafts[: rng.randrange(4)] + [rng.randrange(256)]
        t = time.perf_counter()
        todo = dm._sync(hist)
        times.append(time.perf_counter() - t)
        dm.fed += todo[:-1]  # prepare(): fed catches up with the history but its last token
        dm.cache.offset = len(dm.fed)
    return statistics.mean(times) * 1e6, statistics.median(times) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", default="HEAD", help="git revision of the version to compare with")
    args = p.parse_args()
    index = full_suffix_index()
    for label, mod in (("this checkout", load_drafters(None)), (args.rev, load_drafters(args.rev))):
        for ctx in (1024, 16384):
            (lm, lmed), (dm, dmed) = lookup_round_us(mod, ctx), draft_sync_us(mod, ctx)
            print(f"{label:14} @ {ctx // 1024:2d}k  lookup round: mean {lm:8.1f} us, median "
                  f"{lmed:7.1f} us | draft-model resync: mean {dm:7.1f} us, median {dmed:6.1f} us")
            try:
                sm, smed = lookup_round_us(mod, ctx, suffix=index)
            except TypeError:  # a version without the suffix index
                continue
            print(f"{label:14} @ {ctx // 1024:2d}k  lookup + suffix round ({len(index)}-token "
                  f"index): mean {sm:8.1f} us, median {smed:7.1f} us")


if __name__ == "__main__":
    main()

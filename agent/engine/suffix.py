"""A suffix index over earlier outputs: drafts for what the current context cannot show.

An agent writes the same code, tool-call JSON and test commands again across turns and
sessions; prompt lookup only sees the current context. `SuffixIndex` keeps the token
sequences of earlier replies (a repository's, one model's) and, for the last n tokens of the
history, drafts the continuation most of its occurrences agree on: at each step the next
token with the most support among the occurrences still following, until fewer than half
of them agree. Verification stays the target's, so drafts only ever change speed.

Bounded: at most `cap` tokens (65,536 by default: about a hundred replies, ~30 MB of index
in memory), the oldest sequences dropped first. Kept in one JSON file the
caller names (beside the repository's conversations), written atomically; a file that is
not ours, of another model or damaged is rejected and rebuilt from the next reply on.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Sequence

from .bounded import InputError, read_json

FORMAT, VERSION = "spec-agent-suffix-index", 1
_SEP = -1  # between sequences: never matched, never drafted
_MAX_OCCURRENCES = 64  # the latest occurrences of an n-gram a draft is weighed over
_MAX_FILE_BYTES = 64 << 20


class SuffixIndex:
    def __init__(self, key: str = "", cap: int = 1 << 16, min_n: int = 3, max_n: int = 5):
        self.key, self.cap, self.min_n, self.max_n = key, cap, min_n, max_n
        self.flat: list[int] = []  # every sequence, each followed by _SEP
        self.index: dict[tuple[int, ...], list[int]] = {}  # n-gram -> positions after it
        self.dirty = False

    def __len__(self) -> int:
        return len(self.flat)

    def add(self, tokens: Sequence[int]) -> None:
        """Remember one sequence (a reply); the oldest go once the cap is passed."""
        seq = [int(t) for t in tokens if int(t) >= 0][-self.cap:]
        if len(seq) <= self.min_n:
            return
        start = len(self.flat)
        self.flat += [*seq, _SEP]
        self.dirty = True
        if len(self.flat) > self.cap:
            self._drop_oldest()
        else:
            self._index(start)

    def _drop_oldest(self) -> None:
        cut = len(self.flat) - self.cap
        while cut < len(self.flat) and self.flat[cut - 1] != _SEP:  # keep whole sequences
            cut += 1
        self.flat = self.flat[cut:]
        self.index = {}
        self._index(0)

    def _index(self, start: int) -> None:
        flat = self.flat
        for end in range(max(start, 1), len(flat)):
            if flat[end] == _SEP:
                continue
            for n in range(self.min_n, self.max_n + 1):
                gram = flat[end - n : end] if end >= n else None
                if not gram or _SEP in gram:
                    break
                self.index.setdefault(tuple(gram), []).append(end)

    def continuation(self, history: Sequence[int], k: int) -> tuple[int, list[int]]:
        """(n, draft): the longest n-gram ending the history that earlier sequences hold,
        and up to `k` tokens its occurrences agree on; (0, []) when none holds it."""
        for n in range(min(self.max_n, len(history)), self.min_n - 1, -1):
            ends = self.index.get(tuple(history[-n:]))
            if ends:
                return n, self._agreed(ends[-_MAX_OCCURRENCES:], k)
        return 0, []

    def continuations(self, history: Sequence[int], k: int, limit: int = 8) -> list[list[int]]:
        """Up to `k` tokens after each of the latest `limit` occurrences of the longest n-gram
        ending the history (distinct, most frequent first); [] when none holds it."""
        for n in range(min(self.max_n, len(history)), self.min_n - 1, -1):
            ends = self.index.get(tuple(history[-n:]))
            if ends:
                seqs = [tuple(self._run(p, k)) for p in reversed(ends[-limit:])]
                count = Counter(s for s in seqs if s)
                return [list(s) for s, _ in count.most_common()]
        return []

    def _run(self, p: int, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k and p < len(self.flat) and self.flat[p] != _SEP:
            out.append(self.flat[p])
            p += 1
        return out

    def _agreed(self, at: list[int], k: int) -> list[int]:
        out: list[int] = []
        while at and len(out) < k:
            tok, votes = Counter(self.flat[p] for p in at).most_common(1)[0]
            if tok == _SEP or 2 * votes < len(at):
                break
            out.append(tok)
            at = [p + 1 for p in at if self.flat[p] == tok]
        return out

    # ---- the file -----------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write the index atomically (OSError for the caller; nothing half-written)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps({"format": FORMAT, "version": VERSION, "key": self.key,
                                       "tokens": self.flat}, separators=(",", ":")))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self.dirty = False

    @classmethod
    def load(cls, path: Path, key: str, cap: int = 1 << 16) -> tuple["SuffixIndex", str]:
        """(the index in `path`, '') or (an empty index, why the file was rejected); a
        missing file is an empty index and no complaint."""
        index = cls(key, cap)
        try:
            data = read_json(path, _MAX_FILE_BYTES, follow=False)  # a cache: bounded, no FIFO
        except FileNotFoundError:
            return index, ""
        except InputError as e:
            return index, f"{e}; starting a new suffix index"
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if (not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION
                or not isinstance(tokens, list)
                or not all(type(t) is int and _SEP <= t < 1 << 31 for t in tokens)
                or (tokens and tokens[-1] != _SEP)):
            return index, f"{path}: not a suffix index of this version; starting a new one"
        if data.get("key") != key:
            return index, f"{path}: the suffix index of another model; starting a new one"
        index.flat = tokens
        if len(tokens) > cap:
            index._drop_oldest()
        else:
            index._index(0)
        return index, ""


class SuffixFile:
    """A `SuffixIndex` and the file it lives in: each reply is added and the file rewritten."""

    def __init__(self, index: SuffixIndex, path: Path):
        self.index, self.path = index, path

    @classmethod
    def open(cls, path: Path, key: str, cap: int = 1 << 16) -> tuple["SuffixFile", str]:
        index, why = SuffixIndex.load(path, key, cap)
        return cls(index, path), why

    def remember(self, tokens: Sequence[int]) -> str:
        """Add one reply and save; '' or why the file could not be written (the index in
        memory keeps it)."""
        self.index.add(tokens)
        if not self.index.dirty:
            return ""
        try:
            self.index.save(self.path)
        except OSError as e:
            return f"suffix index {self.path}: not saved ({e.strerror or e})"
        return ""

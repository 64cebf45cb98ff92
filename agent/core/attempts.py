"""The best attempt of a message by its test runs, and what a failed test run leads to.

With `test_cmd` set, the lint-and-test loop (core/checks.py) runs the tests after each reply
that edits files. A fix can pass fewer tests than the attempt before it (a small model often
rewrites working code while it fixes one case, or breaks the file), so each test run records
the files the message edited, as they were tested, with a score read from the run's summary
(`run_score`). When the message ends with its files worse than an earlier attempt (fewer tests
passing, or a later edit that no longer compiles), that attempt's files are written back.

`fix_mode` says what a failed test run, or a reply whose code block was not applied (a
snippet, see core/wholefile.py), leads to while fix rounds are left:
- "repair": the failure goes back to the model, which replies to it;
- "resample": the model writes a fresh reply to the message itself, sampled at
  `resample_temperature` (0.7 when that is 0) with the failed attempts left out of what it
  reads. Small models mostly write their failed code again when shown the failure; independent
  samples differ, and the tests pick the best. It suits the "whole" edit format, where every
  reply carries the whole file;
- "restart": "resample", and a message that reports failing tests of the answer before it
  has its fresh replies answer that answer's request again, without its code (restart_view),
  while the first reply that writes the failing files out unchanged gives its fix round back.
  Measured on the default model, it bought no pass for twice the tokens, so it is a choice,
  not the default;
- "auto" (the default): "resample" with the "whole" edit format, "repair" with the others
  (their edits change the file as the failed attempt left it, which a reply that never saw
  that attempt cannot aim at).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from .attach import ADDED

FRESH_TEMPERATURE = 0.7  # "resample" with resample_temperature = 0

# pytest's last line: "== 2 failed, 7 passed, 1 error in 0.12s ==" (any order, any subset).
_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|errors?|xfailed|xpassed|skipped)\b")
_PYTEST_TAIL = re.compile(r"\bin \d+(?:\.\d+)?s\b")
# unittest: "Ran 7 tests in 0.001s" then "OK" or "FAILED (failures=2, errors=1)".
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
_UNITTEST_BAD = re.compile(r"\b(failures|errors)=(\d+)")
# A test module that does not import: pytest stops before running any test, unittest counts
# the module as one test in error. Either way no test of it ran, which scores below a run
# whose tests ran and failed (a rewrite that breaks an import is worse than a failing test).
_PYTEST_COLLECT = re.compile(r"Interrupted: \d+ errors? during collection")
_UNITTEST_IMPORT = "Failed to import test module: "


@dataclass(frozen=True, order=True)
class Score:
    """How well a test run went; a larger Score is better. `passed` and `total` are -1 when the
    output gave no counts (then only `ok` tells runs apart)."""

    ok: bool
    passed: int = -1
    total: int = -1
    note: str = field(default="", compare=False)  # what a run without counts was

    @property
    def counted(self) -> bool:
        return self.passed >= 0

    def describe(self) -> str:
        if self.note:
            return self.note
        if not self.counted:
            return "the tests passed" if self.ok else "the tests failed"
        return f"{self.passed} of {self.total} tests passed"


# Worse than any run of the tests: files a check before the tests rejected, or a test run
# killed for its time or its processes (code that hangs).
BROKEN = Score(False, -2, -2, "it failed a check")
_KILLED = ("Error: timed out after", "Error: had ")


def run_score(ok: bool, output: str) -> Score:
    """The Score of a test run from its exit status and its output's summary (pytest's last
    line or unittest's "Ran N tests" and "FAILED (...)"); counts only when one was found. A
    run the shell tool killed (a time limit, too many processes) scores as BROKEN."""
    if not ok and output.startswith(_KILLED):
        return Score(False, -2, -2, output.splitlines()[0].removeprefix("Error: "))
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    for line in reversed(lines[-5:]):
        if _PYTEST_TAIL.search(line) or "no tests ran" in line:
            counts: dict[str, int] = {}
            for n, kind in _PYTEST_COUNT.findall(line):
                counts[kind.rstrip("s") if kind.startswith("error") else kind] = int(n)
            passed = counts.get("passed", 0) + counts.get("xfailed", 0)
            bad = counts.get("failed", 0) + counts.get("error", 0) + counts.get("xpassed", 0)
            if not ok and any(_PYTEST_COLLECT.search(ln) for ln in lines[-5:]):
                return Score(False, 0, 0, "the tests could not be collected")
            if counts or "no tests ran" in line:
                return Score(ok, passed, passed + bad)
    ran = _UNITTEST_RAN.findall(output)
    if ran:
        total = int(ran[-1])
        bad = sum(int(n) for _, n in _UNITTEST_BAD.findall(output[output.rfind("Ran "):]))
        passed = max(total - bad, 0)
        tests = total - output.count(_UNITTEST_IMPORT)  # (each such error is a module's)
        return Score(ok, passed, max(tests, passed))
    return Score(ok)


@dataclass(frozen=True)
class Attempt:
    """The files a message edited, as one test run saw them (None: the file did not exist)."""

    score: Score
    files: dict[str, str | None]
    # which check round of the message tested it (1 = the first reply's; 0 = the files as the
    # message found them, tested at the end of the message before)
    round: int

    def on_disk(self, root: Path) -> bool:
        """Are its files in `root` still as it tested them?"""
        return read_files(root, list(self.files)) == self.files


def resamples(cfg) -> bool:
    """Whether a failed test run or a refused block is answered by a fresh reply."""
    mode = cfg.fix_mode
    return mode in ("resample", "restart") or (mode == "auto" and cfg.edit_format == "whole")


def fresh_temperature(cfg) -> float:
    """The temperature of a fresh reply (fix_mode "resample")."""
    return cfg.resample_temperature or FRESH_TEMPERATURE


def _attached(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(the text before its attachments, [(path, content)]) of a message as attach_mentions
    writes one (agent/core/attach.py): the blocks follow its last "Attached files:" header,
    one a line, each closed by a `</file>` line that ends the text or comes before the next
    block (a `</file>` line inside a file's text does not end the block)."""
    at = text.rfind(ADDED[3])
    if at < 0:
        return text, []
    tail = text[at + len(ADDED[3]):]
    found = list(_BLOCK.finditer(tail))
    if not found or "".join(m.group(0) for m in found) != tail:
        return text, []  # not attach_mentions' layout: nothing is taken apart
    return text[:at], [(m.group(1), m.group(2)) for m in found]


_BLOCK = re.compile(r'\n<file path="([^"\n]+)">\n(.*?)\n</file>(?=\n<file path="|\Z)', re.DOTALL)
_CUT = re.compile(r"\n\[\.\.\. \d+ more bytes\]\Z")  # an attachment cut at MAX_ATTACH_CHARS


def restart_files(view: list[dict[str, str]], request: int, files: list[str]) -> dict[str, str]:
    """The text of each of `files` as the request `view[request]` showed it whole (what a
    restart_view reply wrote its files from)."""
    return {p: text for p, text in _attached(view[request]["content"])[1]
            if p in files and not _CUT.search(text)}


def restart_view(view: list[dict[str, str]], request: int, base: int,
                 shown: dict[str, str]) -> list[dict[str, str]] | None:
    """What a fresh reply to a message reporting failures of the answer before it reads: the
    history up to that earlier request (`view[request]`, a user message) and then the message
    (`view[base - 1]`), without the earlier request's replies and with the message's attached
    files left out where the earlier request attached them too. The model sees those files as
    the request showed them, before the failed answer wrote them, and answers the request
    again with the failures in view: a sample that never read the failed code cannot copy it.
    Only the files in `shown` (restart_files: those the earlier request's answer changed and
    no one changed since, where the request shows their whole text) are left out, so what the
    model no longer sees is that answer's work, not a person's edits. None when no attached
    file qualifies (a fresh reply would have nothing to write it from)."""
    if not 0 < request < base - 1 or view[request]["role"] != "user":
        return None
    head, blocks = _attached(view[base - 1]["content"])
    kept = [(p, text) for p, text in blocks if p not in shown]
    if len(kept) == len(blocks):
        return None
    text = head.rstrip()
    if kept:
        text += ADDED[3] + "".join(f'\n<file path="{p}">\n{t}\n</file>' for p, t in kept)
    return [*view[: request + 1], {**view[base - 1], "content": text}]


def read_files(root: Path, paths: list[str]) -> dict[str, str | None]:
    """Each file's exact text (line endings as they are: a file written back from it is
    the file that was read); None where it does not exist."""
    out: dict[str, str | None] = {}
    for p in dict.fromkeys(paths):
        try:
            with open(root / p, encoding="utf-8", newline="") as f:
                out[p] = f.read()
        except FileNotFoundError:
            out[p] = None
        except (OSError, UnicodeDecodeError, ValueError):
            continue  # not text we can write back: left out of the attempt
    return out


class Attempts:
    """The tested attempts of one message: the best so far and the state of the files now.
    `start`: the files as the message found them, as the message before tested them (round
    0): a message that only makes them worse leaves them as it found them. It stands for the
    attempts whose files it covers; an attempt that edits other files too replaces it."""

    def __init__(self, start: Attempt | None = None) -> None:
        self.best: Attempt | None = start
        # The files as they are: None = not tested in this message since an edit (the start's
        # score is not taken as theirs: the tests themselves may have changed since).
        self.now: Score | None = None
        self.last: Attempt | None = None  # the last test run's files

    def edited(self) -> None:
        self.now = None

    def rejected(self) -> None:
        """A check before the tests failed on the files as they are now."""
        self.now = BROKEN

    def tested_run(self, score: Score, files: dict[str, str | None], round_: int) -> None:
        self.now = score
        self.last = Attempt(score, files, round_)
        best = self.best
        if best is not None and best.round == 0 and not set(files) <= set(best.files):
            best = None  # writing the start back would leave this attempt's other files
        if best is None or score >= best.score:  # a tie: the later attempt
            best = self.last
        self.best = best

    def start_scored(self, start: Attempt) -> None:
        """The files as the message found them, scored now (core/testloop.start_tested): they
        are the best attempt when they score above every attempt of the message."""
        if self.best is None or start.score > self.best.score:
            self.best = start

    def tested_state(self, root: Path) -> Attempt | None:
        """The files as they are now, as a test run of this message saw them (round 0, to
        start the next message from); None when no run saw them so (edited since, or never
        tested). A message that ran no tests passes its own attempt 0 on while its files are
        unchanged."""
        if self.last is None:  # no test run here: `best` is attempt 0, if there is one
            seen = [self.best]
        else:  # the files as they are were tested when their score is `now`
            both = (self.best,) if self.best is self.last else (self.best, self.last)
            seen = [a for a in both if a.score == self.now]
        for att in seen:
            if att is not None and att.on_disk(root):
                return replace(att, round=0)
        return None

    def to_restore(self) -> Attempt | None:
        """The best attempt, when the files are now worse than it; None when they are not, or
        when that is unknown: untested since an edit, or a failed run whose output gave no
        counts to compare (a runner without a summary line)."""
        now, best = self.now, self.best
        if best is None or now is None or not now < best.score:
            return None
        if not now.ok and now.passed == -1 and not best.score.ok:
            return None
        return best

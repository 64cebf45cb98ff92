"""The test command a message implies: failing tests it shows, run again after each edit.

A user who pastes a test run's failures ("these fail, fix the code") is asking for a fix that
makes them pass; an agent that can run those tests again checks its own fix before it answers.
When no `test_cmd` is configured and a message shows failures of test files that exist in the
repository (pytest's `FAILED file.py::test` / `ERROR file.py` lines and its collection errors,
unittest's `FAIL: test (module.Class...)` lines, a traceback's lines in test files), those
files are that message's test command (`python -m pytest -q --tb=short <files>`, where a
Python on PATH has pytest; test files by pytest's default names, `test_*.py` / `*_test.py`),
and the lint-and-test loop (core/checks.py) runs it after each edit. A message that says in
its own words that test files of the repository fail ("The test in test_ranges.py fails. Fix
ranges.py.") gets those files the same way (`said_failing`: only files git lists); the
conversation then runs them before the first reply and shows their failures with the message.
Test files a reply writes or changes are run after that reply's edits the same way
(`written_test_files`), where the message has no test command of its own.

The command is built here from paths that exist inside the repository, never from the
message's text itself, and it runs only where run_shell would run it sandboxed without asking
(the conversation checks the approval policy): a test file is the repository's code.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Collection, Sequence

from tools._paths import PathError, confine

# pytest: "FAILED a/b_test.py::Cls::test_x - Assert...", "ERROR a_test.py - ImportError",
# "a_test.py::test_x FAILED" (-v), "____ ERROR collecting a_test.py ____".
_PYTEST = re.compile(
    r"^(?:(?:FAILED|ERROR) (?P<a>[^\s:]+\.py)\b"
    r"|(?P<b>[^\s:]+\.py)::\S+ (?:FAILED|ERROR)\b"
    r"|_+ ERROR collecting (?P<c>[^\s:]+\.py) _+\s*$)", re.M)
# A traceback's location lines (pytest's "a_test.py:12: in test_x" / "a_test.py:12: AssertionError",
# Python's 'File "/abs/a_test.py", line 12, in test_x'): they count for test files only
# (the output may be clipped above its summary, so these can be all that is left).
_LOCATION = re.compile(r'^(?:(?P<d>[^\s:]+\.py):\d+: (?:in \w|\w*(?:Error|Exception)\b)'
                       r'|[ \t]*File "(?P<e>[^"]+\.py)", line \d+, in )', re.M)
_TEST_FILE = re.compile(r"(?:^|/)(?:test_[^/]*|[^/]*_tests?|tests?)\.py$")
# Written test files: `test_*.py` and `*_test.py` only (a `test.py` a user asks for is often a
# script, and a Django app's `tests.py` does not run under plain pytest).
_WRITTEN_TEST = re.compile(r"(?:^|/)(?:test_[^/]*|[^/]*_test)\.py$")
# unittest: "FAIL: test_x (pkg.mod_test.Cls.test_x)", "ERROR: test_x (mod_test.Cls)".
_UNITTEST = re.compile(r"^(?:FAIL|ERROR): \w+ \((?P<dotted>[\w.]+)\)", re.M)
MAX_FILES = 20
# A test file named as what fails: "test_x.py fails", "the test in test_x.py is failing",
# "tests/test_y.py is broken", "test_z.py does not pass", or as what must pass after the change:
# "make test_z.py pass", "so that test_z.py passes", "test_z.py should pass". The verb must
# follow the file, not negated ("no longer fails", "a failing test in test_x.py" do not count).
_FAILS_AFTER = re.compile(r"^([^.!?;:]{0,40}?)\b(?:fails?|failed|(?:is|are)\s+(?:failing|broken)|"
                          r"(?:do(?:es)?n[o']?t|do(?:es)?\s+not)\s+pass)\b", re.IGNORECASE)
_NEGATED = re.compile(r"\b(?:no\s+longer|never|not)\b|n't\b", re.IGNORECASE)
_MAKE_PASS = re.compile(r"\b(?:make(?:\s+sure)?|ensure|get|so(?:\s+that)?|until)\s+"
                        r"(?:(?:all\s+)?(?:the\s+)?tests?\s+in\s+)?[`'\"]?$", re.IGNORECASE)
# ... or the failure first: "pytest fails on test_x.py", "an error in tests/test_y.py".
_FAILS_BEFORE = re.compile(r"\b(?:fails?|failed|failing|failures?|errors?)\s+(?:on|in|at|with)\s+"
                           r"(?:the\s+)?$", re.IGNORECASE)
_PASS_AFTER = re.compile(r"^[`'\"]?\s+(?:(?:will|can|to)\s+)?pass(?:es)?\b(?!\s+already)",
                         re.IGNORECASE)
_SHOULD_PASS = re.compile(r"^[`'\"]?\s+(?:should|must|needs?\s+to|has\s+to|have\s+to|"
                          r"is\s+supposed\s+to)\s+pass\b", re.IGNORECASE)
# ... but not in a question, or where what comes before the file asks why or whether
_NOT_ASKED = re.compile(r"\b(?:why|whether|if|explain|wonder|think)\b", re.IGNORECASE)
_FAIL_WORD = re.compile(r"fail|broken|pass", re.IGNORECASE)
_ASKED_FOR = re.compile(r"\b(?:write|add|create|adds?|writing|adding|new)\b[\w\s]{0,12}$",
                        re.IGNORECASE)
# The tests said to fail with no file named: "a test fails", "the tests are failing", "fix the
# failing test", "make the tests pass" (then every test file of the repository, MAX_FILES at
# most, is what fails).
_TESTS_FAIL = re.compile(
    r"\btests?\b([^.!?;:]{0,30}?)\b(?:fails?|failed|(?:is|are)\s+(?:failing|broken)|"
    r"(?:do(?:es)?n[o']?t|do(?:es)?\s+not)\s+pass)\b|\b(?:failing|broken)\s+tests?\b|"
    r"\bmake\s+(?:the\s+|all\s+(?:the\s+)?)?tests?\s+pass\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")  # not the dot of a file name
_TOKEN = re.compile(r"[\w./-]+")
MAX_SAID_CHARS = 20_000  # the typed text looked at (longer text is a paste, not a sentence)
MAX_COMMAND_CHARS = 2000  # run_shell's limit on a command
PYTEST_ARGS = "-q --tb=short -p no:cacheprovider"


def failing_test_files(message: str, root: Path) -> list[str]:
    """The test files `message` shows failures of that exist under `root`, repo-relative,
    in order of appearance."""
    found: list[tuple[int, str]] = []
    for m in _PYTEST.finditer(message):
        found.append((m.start(), m.group("a") or m.group("b") or m.group("c")))
    for m in _LOCATION.finditer(message):
        found.append((m.start(), _relative(root, m.group("d") or m.group("e"))))
    for m in _UNITTEST.finditer(message):
        parts = m.group("dotted").split(".")
        # the module is the longest dotted prefix that is a file (test names and classes follow)
        for n in range(len(parts), 0, -1):
            cand = "/".join(parts[:n]) + ".py"
            if _inside(root, cand):
                found.append((m.start(), cand))
                break
    # only test files (pytest's own default patterns): a line naming setup.py is not a test
    files = [f for f in dict.fromkeys(f for _, f in sorted(found))
             if f and _TEST_FILE.search(f) and _inside(root, f)]
    return files[:MAX_FILES]


def sentences(text: str) -> list[str]:
    """The sentences of the first MAX_SAID_CHARS characters of `text` (a file name's dot does
    not end one; a sentence keeps its closing mark)."""
    return _SENTENCE_END.split(text[:MAX_SAID_CHARS])


def says_failing(message: str) -> bool:
    """Whether `message` may say that a test file fails (cheap; before listing files)."""
    return bool(_FAIL_WORD.search(message[:MAX_SAID_CHARS]))


def said_failing(message: str, root: Path, listed: Collection[str] = ()) -> list[str]:
    """The test files that `message` says fail, in a sentence of its own words ("The test in
    test_ranges.py fails. Fix ranges.py."): the file first, then what it does (fails, is
    failing, is broken, does not pass), what it must do ("make FILE pass", "so that FILE
    passes", "FILE should pass"; not in a question), or the failure first ("pytest fails on
    FILE"); paths among `listed` (the files
    git lists, so never one kept out of the agent's view), test files by pytest's default
    names; where no file is named but the tests are said to fail ("the failing test", "make
    the tests pass"), every test file git lists, when there are MAX_FILES or fewer. Looks at
    the first MAX_SAID_CHARS characters, in time linear in them."""
    found: list[str] = []
    for sentence in sentences(message):
        if not _FAIL_WORD.search(sentence):
            continue
        for w in _TOKEN.finditer(sentence):
            path = w.group(0).rstrip(".").removeprefix("./")
            if not path.endswith(".py") or path not in listed or not _TEST_FILE.search(path):
                continue
            before, after = sentence[max(0, w.start() - 40): w.start()], sentence[w.end():]
            verb = _FAILS_AFTER.search(after[:80])  # (its group: the words between)
            must_pass = (not sentence.rstrip().endswith("?")
                         and not _NEGATED.search(before) and not _NOT_ASKED.search(before)
                         and ((_MAKE_PASS.search(before) is not None and _PASS_AFTER.search(after))
                              or _SHOULD_PASS.search(after) is not None))
            said = ((verb is not None and not _NEGATED.search(verb.group(1))) or must_pass
                    or (_FAILS_BEFORE.search(before) is not None and not _NEGATED.search(before)))
            if said and _inside(root, path):
                found.append(path)
    every = [p for p in listed if p.endswith(".py") and _TEST_FILE.search(p)]
    if not found and len(every) <= MAX_FILES and not any(p.rsplit("/", 1)[-1] in message
                                                         for p in every):
        if any(_tests_said_to_fail(s) for s in sentences(message)):
            found = sorted(p for p in every if _inside(root, p))
    return list(dict.fromkeys(found))[:MAX_FILES]


def _tests_said_to_fail(sentence: str) -> bool:
    """Whether `sentence` says the tests fail without naming a file ("a test fails", "fix the
    failing tests"; not "write a failing test", "the tests no longer fail")."""
    for m in _TESTS_FAIL.finditer(sentence):
        if _NEGATED.search(m.group(1) or ""):
            continue
        if not _ASKED_FOR.search(sentence[max(0, m.start() - 24): m.start()]):
            return True
    return False


def _relative(root: Path, path: str) -> str:
    """`path` relative to `root` when it is an absolute path below it, else as it is."""
    if not path.startswith("/"):
        return path
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except (OSError, ValueError, RuntimeError):
        return ""


def _inside(root: Path, rel: str) -> bool:
    """A repo-relative path to a regular file inside `root`, as every tool confines paths
    (tools/_paths.confine: no absolute path, no `..`, no link leading out, not in .git), and
    not option-like (`-`, or `@` for pytest's argument files)."""
    if not rel or rel.startswith(("-", "@")) or "\\" in rel:
        return False
    try:
        return confine(root, rel).is_file()
    except (PathError, OSError):
        return False


@lru_cache(maxsize=None)
def _python_with_pytest(root: str) -> str:
    """'python' or 'python3' (as found on PATH) when it can import pytest, else ''. The probe
    runs outside the sandbox, so it runs from `/` with `-E` (no PYTHON* variables), and only
    interpreters in PATH's absolute folders outside the repository `root` count: a
    repository's own `pytest.py` or `bin/python` is never what runs here."""
    base = Path(root).resolve()
    folders = []
    for p in os.environ.get("PATH", "").split(os.pathsep):
        try:
            if os.path.isabs(p) and not Path(p).resolve().is_relative_to(base):
                folders.append(p)
        except (OSError, ValueError, RuntimeError):
            continue
    for name in ("python", "python3"):
        exe = shutil.which(name, path=os.pathsep.join(folders))
        if not exe or Path(exe).resolve().is_relative_to(base):
            continue
        try:
            r = subprocess.run([exe, "-E", "-c", "import pytest"], capture_output=True, timeout=20,
                               stdin=subprocess.DEVNULL, cwd="/")
        except (OSError, subprocess.SubprocessError):
            continue
        if r.returncode == 0:
            return name
    return ""


def infer(message: str, root: Path, listed: Collection[str] | None = None) -> str:
    """The command that runs again the failing tests `message` shows (with `listed`, the
    repository's files: the test files among them it says fail, `said_failing`), or '' (none
    named, none of them a file here, or no Python on PATH with pytest: unittest would report
    a pytest-style test file as "Ran 0 tests ... OK")."""
    files = (failing_test_files(message, root) if listed is None
             else said_failing(message, root, listed))
    return pytest_command(files, root)


def written_test_files(edited: Sequence[str], root: Path) -> list[str]:
    """The test files among `edited` (the files a reply wrote or changed: `test_*.py` and
    `*_test.py`, inside the repository). A test file a reply writes is run as it stands: a
    file with no test in it ("no tests ran"), a test that asks for an argument no fixture
    provides, or a failing assertion goes back to the model."""
    files = [p for p in dict.fromkeys(edited) if _WRITTEN_TEST.search(p) and _inside(root, p)]
    return files[:MAX_FILES]


def pytest_command(files: Sequence[str], root: Path) -> str:
    """`python -m pytest -q ... FILES` for as many of `files` as fit run_shell's limit, with
    a Python on PATH that has pytest; '' when there are none or there is no such Python."""
    if not files:
        return ""
    py = _python_with_pytest(str(root))
    if not py:
        return ""
    cmd, fitted = f"{py} -m pytest {PYTEST_ARGS}", 0
    for f in files:  # as many as fit run_shell's limit
        more = f"{cmd} {shlex.quote(f)}"
        if len(more) > MAX_COMMAND_CHARS:
            break
        cmd, fitted = more, fitted + 1
    return cmd if fitted else ""

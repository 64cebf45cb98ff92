"""The best tested attempt of a message, and fix_mode "resample" (agent/core/attempts.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from scripted import conversation, full_auto, git_repo  # noqa: F401
from test_resample import Sampled

from agent.config import Config, ConfigError, load_config
from agent.core.attempts import BROKEN, Score, run_score
from agent.events import CheckRun, Warning
from tools import sandbox

# calc_test.py has three tests; each version of add passes a known number of them.
TESTS = """import unittest
from calc import add

class T(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(1, 1), 2)
    def test_zero(self):
        self.assertEqual(add(0, 5), 5)
    def test_neg(self):
        self.assertEqual(add(-1, -1), -2)
"""
TWO = "calc.py\n```python\ndef add(a, b):\n    return abs(a) + abs(b)\n```\n"  # 2 of 3
ONE = "calc.py\n```python\ndef add(a, b):\n    return a * b + 1\n```\n"  # 1 of 3 (small)
NONE = "calc.py\n```python\ndef add(a, b):\n    return None\n```\n"  # 0 of 3
BROKEN_CODE = "calc.py\n```python\ndef add(a, b):\n    return a +\n```\n"
RIGHT = "calc.py\n```python\ndef add(a, b):\n    return a + b\n```\n"
TEST_CMD = f"{sys.executable} -m unittest -q calc_test"  # (pytest's summary: test_scores_...)


def _setup(root):
    # calc.py defines add alone, so each reply below is the whole file (a reply that left a
    # function out would have it put back: core/pymerge.py)
    # it passes none of the tests: no attempt is worse than the files as a message found them
    (root / "calc.py").write_text("def add(a, b):\n    return 0\n")
    (root / "calc_test.py").write_text(TESTS)
    subprocess.run(["git", "add", "calc.py", "calc_test.py"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "tests"], cwd=root, check=True)


def _send(conv, text="make add pass calc_test.py"):
    events = list(conv.send(text))
    return [e for e in events if isinstance(e, CheckRun) and e.kind == "test"], events


def _cfg(**over):
    return full_auto(**{"edit_format": "whole", "sandbox": "off", "test_cmd": TEST_CMD, **over})


def _code(root):
    return (root / "calc.py").read_text()


# ---- scores -------------------------------------------------------------------------------


@pytest.mark.parametrize("ok, output, want", [
    (False, "F..\n1 failed, 2 passed in 0.03s", Score(False, 2, 3)),
    (False, "====== 2 failed, 1 passed, 1 error in 0.10s ======", Score(False, 1, 4)),
    (True, "...\n3 passed in 0.01s", Score(True, 3, 3)),
    (False, "E\n1 error in 0.05s", Score(False, 0, 1)),
    (False, "no tests ran in 0.01s", Score(False, 0, 0)),
    (False, "F.\n---\nRan 2 tests in 0.000s\n\nFAILED (failures=1)", Score(False, 1, 2)),
    (False, "Ran 5 tests in 0.001s\n\nFAILED (failures=1, errors=2)", Score(False, 2, 5)),
    (True, "Ran 4 tests in 0.000s\n\nOK", Score(True, 4, 4)),
    # a test module that does not import: no test of it ran (below a failing test's 0 of 1)
    (False, "ERROR test_x.py\n!!!! Interrupted: 1 error during collection !!!!\n1 error in 0.57s",
     Score(False, 0, 0)),
    # the words in a failing test's source that pytest prints are not the summary
    (False, "    assert out == 'Interrupted: 1 error during collection'\nE   AssertionError\n"
     "--- summary ---\nFAILED t.py::test_a\nnext\nline\n1 failed, 2 passed in 0.1s", Score(False, 2, 3)),
    (False, "ImportError: Failed to import test module: test_x\n---\nRan 1 test in 0.000s\n\n"
     "FAILED (errors=1)", Score(False, 0, 0)),
    (False, "ImportError: Failed to import test module: test_y\nRan 4 tests in 0.001s\n\n"
     "FAILED (failures=1, errors=1)", Score(False, 2, 3)),
    (False, "Segmentation fault", Score(False)),
    (True, "all good", Score(True)),
])
def test_scores_from_pytest_and_unittest_summaries(ok, output, want):
    assert run_score(ok, output) == want


def test_a_killed_run_scores_as_broken_and_an_uncounted_failure_is_unknown():
    from agent.core.attempts import Attempts

    hung = run_score(False, "Error: timed out after 60s and was killed\n...")
    assert hung == BROKEN and hung.describe() == "timed out after 60s and was killed"
    a = Attempts()
    a.tested_run(Score(False, 5, 20), {"x.py": "v1"}, 1)
    a.tested_run(Score(False), {"x.py": "v2"}, 2)  # e.g. a runner that prints no summary
    assert a.to_restore() is None and a.best.round == 1
    a.tested_run(hung, {"x.py": "v3"}, 3)
    assert a.to_restore().files == {"x.py": "v1"}
    a.tested_run(Score(False, 5, 20), {"x.py": "v4"}, 4)  # a tie: the later attempt stands
    assert a.to_restore() is None and a.best.round == 4


def test_a_long_test_output_keeps_its_summary(git_repo):
    from agent.core.checks import shell
    from tools import ToolContext

    script = "import sys; print('x' * 20000); print('1 failed, 2 passed in 0.01s'); sys.exit(1)"
    out = shell("test", f"{sys.executable} -c \"{script}\"", ToolContext(git_repo, sandbox="off"))
    assert run_score(out.ok, out.output) == Score(False, 2, 3)


def test_scores_order_passing_first_then_more_tests_passed():
    assert Score(True, 3, 3) > Score(False, 2, 3) > Score(False, 1, 3) > Score(False, 0, 3)
    assert Score(False) > BROKEN and Score(False, 0, 0) > BROKEN
    assert Score(True) > Score(False)


# ---- the best attempt is kept -------------------------------------------------------------


def test_a_worse_fix_is_replaced_by_the_best_tested_attempt(git_repo):
    _setup(git_repo)
    model = Sampled([TWO, ONE, NONE])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=2))
    tests, events = _send(conv)
    assert [(c.ok, run_score(c.ok, c.output).passed) for c in tests] == [
        (False, 2), (False, 1), (False, 0)]
    kept = [e.message for e in events if isinstance(e, Warning) and "kept attempt" in e.message]
    assert kept and "attempt 1 " in kept[0] and "2 of 3 tests passed" in kept[0]
    assert "0 of 3" in kept[0]
    assert _code(git_repo) == "def add(a, b):\n    return abs(a) + abs(b)\n"
    # the restored file is committed like any edit of the agent's
    assert "abs(a)" in subprocess.run(["git", "show", "HEAD:calc.py"], cwd=git_repo, check=True,
                                      capture_output=True, text=True).stdout


def test_a_last_fix_that_does_not_compile_is_replaced(git_repo):
    _setup(git_repo)
    model = Sampled([ONE, BROKEN_CODE])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=1))
    _send(conv)
    assert _code(git_repo) == "def add(a, b):\n    return a * b + 1\n"


@pytest.mark.parametrize("last, rounds, code", [
    (RIGHT, 2, "def add(a, b):\n    return a + b\n"),  # it passes
    (TWO, 1, "def add(a, b):\n    return abs(a) + abs(b)\n"),  # it passes more tests
])
def test_a_better_last_fix_stands_and_nothing_is_restored(git_repo, last, rounds, code):
    _setup(git_repo)
    conv = conversation(git_repo, Sampled([ONE, last]), _cfg(max_fix_rounds=rounds))
    tests, events = _send(conv)
    assert tests[-1].ok == (last == RIGHT)
    assert not any(isinstance(e, Warning) and "kept attempt" in e.message for e in events)
    assert _code(git_repo) == code


# ---- fix_mode "resample" ------------------------------------------------------------------


def test_resample_answers_the_message_afresh_without_the_failed_attempts(git_repo):
    _setup(git_repo)
    model = Sampled([ONE, RIGHT])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=2, fix_mode="resample"))
    tests, events = _send(conv)
    assert [c.ok for c in tests] == [False, True]
    first, second = model.seen
    assert second == first  # the same messages: the task alone, not the failed reply
    assert second[-1]["role"] == "user" and "make add pass" in second[-1]["content"]
    assert model.temps == [0.0, 0.7]
    assert any(isinstance(e, Warning) and "afresh" in e.message for e in events)
    # the history keeps every attempt and the test run that followed it
    roles = [m["role"] for m in conv.messages[1:]]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert "The tests failed" in conv.messages[3]["content"]


def test_resample_uses_resample_temperature_when_set_and_keeps_the_best(git_repo):
    _setup(git_repo)
    model = Sampled([TWO, NONE, ONE])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=2, fix_mode="resample",
                                              resample_temperature=0.9))
    _send(conv)
    assert model.temps == [0.0, 0.9, 0.9]
    assert len({m[-1]["content"] for m in model.seen}) == 1
    assert "abs(a)" in _code(git_repo)


def test_repair_sends_the_failure_back(git_repo):
    _setup(git_repo)
    model = Sampled([ONE, RIGHT])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=2, fix_mode="repair"))
    _send(conv)
    assert model.temps == [0.0, 0.0]
    assert "The tests failed" in model.seen[1][-1]["content"]


def test_auto_is_the_default_and_resamples_whole_files_only():
    from agent.core.attempts import resamples

    assert Config().fix_mode == "auto"
    assert resamples(Config(edit_format="whole"))
    assert not any(resamples(Config(edit_format=f)) for f in ("diff", "auto", "tool"))
    assert resamples(Config(edit_format="diff", fix_mode="resample"))
    assert not resamples(Config(edit_format="whole", fix_mode="repair"))


def test_the_default_answers_a_failed_test_run_afresh_with_whole_files(git_repo):
    _setup(git_repo)
    model = Sampled([ONE, RIGHT])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=2))
    tests, events = _send(conv)
    assert [c.ok for c in tests] == [False, True]
    assert model.temps == [0.0, 0.7] and model.seen[1] == model.seen[0]
    assert any(isinstance(e, Warning) and "(fix_mode auto)" in e.message for e in events)


def test_fix_mode_is_a_checked_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_AGENT_FIX_MODE", "retry")
    with pytest.raises(ConfigError, match="fix_mode"):
        load_config(tmp_path)
    monkeypatch.setenv("SPEC_AGENT_FIX_MODE", "resample")
    assert load_config(tmp_path).fix_mode == "resample"


def test_a_fresh_reply_that_repeats_is_resampled_from_the_same_view(git_repo):
    _setup(git_repo)
    model = Sampled([ONE, ONE, RIGHT])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=2, fix_mode="resample",
                                              resample_temperature=0.8))
    tests, _ = _send(conv)
    assert [c.ok for c in tests] == [False, True]
    assert model.temps == [0.0, 0.8, 0.8]
    assert model.seen[1] == model.seen[2] == model.seen[0]  # the repeat's resample: same view


def test_resample_answers_a_refused_block_afresh(git_repo):
    _setup(git_repo)
    snippet = "calc.py\n```python\nadd(1, 1)\n```\n"  # defines nothing: not applied
    model = Sampled([snippet, RIGHT])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=2, fix_mode="resample"))
    tests, events = _send(conv)
    assert [c.ok for c in tests] == [True]
    assert model.temps == [0.0, 0.7] and model.seen[1] == model.seen[0]
    assert any(isinstance(e, Warning) and "could not be used; answering" in e.message for e in events)
    assert _code(git_repo) == "def add(a, b):\n    return a + b\n"


def test_a_failing_file_written_out_unchanged_is_tested_and_answered_afresh(git_repo):
    """A new message about failing tests whose reply writes the file out as it stands (what a
    small model does after a failed try) is tested like an edit, and the failure answered
    afresh, instead of ending the message with nothing tried."""
    _setup(git_repo)
    model = Sampled([ONE, NONE])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=1))
    _send(conv)
    assert "a * b + 1" in _code(git_repo)  # attempt 1 kept (1 of 3 beats 0 of 3)
    model.turns = [ONE, RIGHT]
    tests, events = _send(conv, "The tests are correct. Fix the code in calc.py.")
    assert [c.ok for c in tests] == [False, True]
    assert model.temps[-2:] == [0.0, 0.7]
    assert any(isinstance(e, Warning) and "out unchanged; running the checks" in e.message
               for e in events)
    assert events[-1].stop_reason == "answered" and _code(git_repo) == "def add(a, b):\n    return a + b\n"


def test_an_unchanged_rewrite_that_fails_does_not_use_up_a_fix_round(git_repo):
    """fix_mode "restart": the first reply to a failure report that writes the failing file
    out again made no attempt at a fix; its test run counts as the score to beat, not as one
    of max_fix_rounds (once a message: a second unchanged rewrite counts). The other modes
    count it."""
    _setup(git_repo)
    model = Sampled([ONE])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=1, fix_mode="restart"))
    _send(conv)
    model.turns = [ONE, NONE, RIGHT]
    tests, events = _send(conv, "The tests are correct. Fix the code in calc.py.")
    assert [c.ok for c in tests] == [False, False, True] and model.temps[-3:] == [0.0, 0.7, 0.7]
    assert [c.fed_back for c in tests] == [True, True, False]
    assert _code(git_repo) == "def add(a, b):\n    return a + b\n"
    # a second unchanged rewrite is an attempt like any other
    (git_repo / "calc.py").write_text("def add(a, b):\n    return a * b + 1\n")
    model.turns, calls = [ONE, ONE, ONE, RIGHT], len(model.seen)
    tests, _ = _send(conv, "The tests are correct. Fix the code in calc.py.")
    assert [c.fed_back for c in tests] == [True, True] and len(model.seen) == calls + 3
    assert "a * b + 1" in _code(git_repo)  # the fourth reply (RIGHT) was never asked for
    conv.set_config(_cfg(max_fix_rounds=1))  # fix_mode "auto"
    model.turns, calls = [ONE, NONE, RIGHT], len(model.seen)
    tests, _ = _send(conv, "The tests are correct. Fix the code in calc.py.")
    assert [c.fed_back for c in tests] == [True, False] and len(model.seen) == calls + 2


def test_an_unchanged_file_that_passes_ends_the_message_and_without_tests_is_not_run(git_repo):
    _setup(git_repo)
    model = Sampled([RIGHT, RIGHT])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=2))
    _send(conv)
    tests, events = _send(conv, "is add right?")
    assert [c.ok for c in tests] == [True] and len(model.seen) == 2
    assert events[-1].stop_reason == "answered"
    model = Sampled([ONE, ONE])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    _send(conv)
    tests, events = _send(conv, "again")
    # no test run; the bare rewrite is answered by a fresh sample, which the script ends
    assert tests == [] and len(model.seen) == 3 and model.temps == [0.0, 0.0, 0.7]
    assert not any(isinstance(e, Warning) and "running the checks" in e.message for e in events)


@pytest.mark.parametrize("rounds, stop, calls", [(2, "answered", 2), (0, "repetition", 1)])
def test_a_looping_reply_is_answered_afresh_while_fix_rounds_are_left(git_repo, rounds, stop, calls):
    _setup(git_repo)
    model = Sampled([RIGHT.replace("a + b", "a + b + a + b + a + b"), RIGHT], loop_at={1})
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=rounds))
    tests, events = _send(conv)
    assert events[-1].stop_reason == stop and len(model.seen) == calls
    if rounds:
        assert model.temps == [0.0, 0.7] and model.seen[1] == model.seen[0]
        assert [c.ok for c in tests] == [True]
        assert any(isinstance(e, Warning) and "kept repeating itself; answering" in e.message
                   for e in events)
        assert "kept repeating" in conv.messages[-2]["content"]  # the history says why


def test_a_broken_file_is_never_written_and_is_answered_afresh(git_repo):
    """A reply whose file does not parse is not applied (core/editguard.py): the files stay as
    they were, and where fix_mode resamples the message is answered afresh, each time."""
    _setup(git_repo)
    before = _code(git_repo)
    model = Sampled([BROKEN_CODE, BROKEN_CODE, RIGHT])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=3))
    tests, events = _send(conv)
    assert model.temps == [0.0, 0.7, 0.7] and model.seen[2] == model.seen[1] == model.seen[0]
    refused = [e.message for e in events if isinstance(e, Warning) and "does not parse" in e.message]
    assert len(refused) == 2 and all("the file is as it was" in w for w in refused)
    assert before != "def add(a, b):\n    return a + b\n"
    assert [c.ok for c in tests] == [True] and _code(git_repo) == "def add(a, b):\n    return a + b\n"
    assert events[-1].stop_reason == "answered"


ADD = "def add(a, b):\n    return a + b\n"
WITH_DOC = 'calc.py\n```python\ndef add(a, b):\n    """Return a + b."""\n    return a + b\n```\n'


@pytest.mark.parametrize("quote, mode", [
    ("calc.py\n```python\n" + ADD + "```\n", "resample"),
    ('<file path="calc.py">\n' + ADD + "</file>", "resample"),
    ("```python\n" + ADD + "```", "resample"),  # the attached file's block, unnamed
    ("calc.py\n```python\n" + ADD + "```\n", "auto"),  # the default, with whole files
])
def test_a_reply_that_only_writes_the_file_as_it_is_is_answered_afresh(git_repo, quote, mode):
    """Without tests to judge it, a reply that is nothing but the files as they stand made no
    attempt at a message that asks for a change: where fix_mode resamples, while fix rounds
    are left, it is answered by a fresh sample."""
    (git_repo / "calc.py").write_text(ADD)
    subprocess.run(["git", "commit", "-qam", "add"], cwd=git_repo, check=True)
    model = Sampled([quote, WITH_DOC])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off",
                                                   attach_mentioned=True, fix_mode=mode))
    events = list(conv.send("add a docstring to add in calc.py"))
    assert model.temps == [0.0, 0.7] and model.seen[1] == model.seen[0]
    assert any(isinstance(e, Warning) and "only wrote calc.py out unchanged; answering the "
               "message afresh" in e.message for e in events)
    assert "Return a + b." in _code(git_repo) and events[-1].stop_reason == "answered"
    assert "nothing changed" in conv.messages[-2]["content"]  # the history says why


QUOTE = "calc.py\n```python\n" + ADD + "```\n"
ASK, EDIT = "what does add in calc.py do?", "add a docstring to add in calc.py"


@pytest.mark.parametrize("reply, text, over", [
    ("Here it is:\n" + QUOTE + "It adds its arguments.", EDIT, {"fix_mode": "resample"}),  # words
    (QUOTE, EDIT, {"fix_mode": "resample", "max_fix_rounds": 0}),
    (QUOTE, EDIT, {"fix_mode": "repair"}),
    (QUOTE, EDIT, {"edit_format": "diff"}),  # "auto" repairs there
    (QUOTE, ASK, {}),  # a question: a quote may answer it
    (QUOTE, ASK, {"fix_mode": "resample"}),
    (QUOTE, "add a docstring to add in calc.py, but do not change the file", {}),
])
def test_a_quote_with_words_or_without_fresh_samples_ends_the_message(git_repo, reply, text, over):
    (git_repo / "calc.py").write_text(ADD)
    subprocess.run(["git", "commit", "-qam", "add"], cwd=git_repo, check=True)
    model = Sampled([reply, WITH_DOC])
    conv = conversation(git_repo, model, full_auto(**{"edit_format": "whole", "sandbox": "off", **over}))
    events = list(conv.send(text))
    # (a message that asks for an edit and gets only the file back ends "no_change")
    assert len(model.seen) == 1
    assert events[-1].stop_reason == ("no_change" if text == EDIT else "answered")
    assert _code(git_repo) == ADD


def test_a_first_quote_of_a_file_with_tests_set_is_neither_tested_nor_resampled(git_repo):
    """A reply that only shows a file as it is, the first time, may answer a question ("show
    me calc.py"): with a test command set it is not taken for an attempt (a second one, after
    a failure, is: the test above)."""
    _setup(git_repo)
    (git_repo / "calc.py").write_text(ADD)
    subprocess.run(["git", "commit", "-qam", "add"], cwd=git_repo, check=True)
    model = Sampled([RIGHT, WITH_DOC])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=2, fix_mode="resample"))
    tests, events = _send(conv, "show me calc.py")
    assert tests == [] and len(model.seen) == 1 and events[-1].stop_reason == "answered"
    assert _code(git_repo) == ADD


def test_a_message_that_only_makes_the_files_worse_leaves_them_as_it_found_them(git_repo):
    """The files as the last message's tests left them are the next message's attempt 0: a
    message whose every attempt passes fewer tests writes them back."""
    _setup(git_repo)
    model = Sampled([TWO, NONE, ONE, NONE])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=1))
    _send(conv)  # message 1: 2 of 3, then 0 of 3; its attempt 1 is kept
    assert "abs(a)" in _code(git_repo)
    tests, events = _send(conv, "the tests still fail; fix add")  # 1 of 3, then 0 of 3
    assert [run_score(c.ok, c.output).passed for c in tests] == [1, 0]
    kept = [e.message for e in events if isinstance(e, Warning) and e.message.startswith("kept attempt")]
    assert kept and "attempt 0, the files as this message found them" in kept[0]
    assert "2 of 3 tests passed" in kept[0]
    assert _code(git_repo) == "def add(a, b):\n    return abs(a) + abs(b)\n"
    # a message that runs no tests (a question) passes attempt 0 on to the next
    model.turns += ["add returns the sum.", ONE]
    _send(conv, "what does add return?")
    _, events = _send(conv, "fix add")  # 1 of 3, no rounds left to improve on it
    assert any(isinstance(e, Warning) and "attempt 0" in e.message for e in events)
    assert _code(git_repo) == "def add(a, b):\n    return abs(a) + abs(b)\n"


def test_a_rewrite_that_breaks_the_tests_import_is_worse_than_a_failing_test(git_repo):
    """One test, failing; then a rewrite the test module cannot import (pytest collects
    nothing, "1 error"): the failing attempt is kept, not the one that ran no test."""
    (git_repo / "calc.py").write_text("def add(a, b):\n    return 0\n")
    (git_repo / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n"
                                          "    assert add(2, 2) == 4\n")
    subprocess.run(["git", "add", "-A"], cwd=git_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "one test"], cwd=git_repo, check=True)
    cmd = f"{sys.executable} -m pytest -q -p no:cacheprovider test_calc.py"
    model = Sampled([NONE, "calc.py\n```python\nimport no_such_module_here\n\n\n"
                           "def add(a, b):\n    return a + b\n```\n"])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=1, test_cmd=cmd))
    tests, events = _send(conv, "make add pass test_calc.py")
    assert [run_score(c.ok, c.output) for c in tests] == [Score(False, 0, 1), Score(False, 0, 0)]
    kept = [e.message for e in events if isinstance(e, Warning) and e.message.startswith("kept attempt")]
    assert kept and "the tests could not be collected" in kept[0]
    assert _code(git_repo) == "def add(a, b):\n    return None\n"


def test_files_changed_between_messages_are_not_a_start_to_go_back_to(git_repo):
    _setup(git_repo)
    model = Sampled([TWO, RIGHT.replace("a + b", "a - b"), NONE, NONE])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=1))
    _send(conv)  # 2 of 3, then 0 of 3: attempt 1 kept
    (git_repo / "calc.py").write_text("def add(a, b):\n    return 0\n")  # the user's own edit
    _, events = _send(conv, "fix add")  # 0 of 3 twice
    assert not any(isinstance(e, Warning) and e.message.startswith("kept attempt") for e in events)
    assert _code(git_repo) == "def add(a, b):\n    return None\n"


def test_a_message_that_edits_other_files_too_is_not_rolled_back_to_the_start(git_repo):
    """An attempt 0 covers the files the message before tested; an attempt that edits another
    file too replaces it (writing the start back would leave the other file as last edited)."""
    from agent.core.attempts import Attempt, Attempts

    start = Attempt(Score(False, 2, 3), {"calc.py": "two"}, 0)
    a = Attempts(start)
    assert a.now is None and a.to_restore() is None  # untested here: nothing to compare
    a.tested_run(Score(False, 1, 3), {"calc.py": "one"}, 1)
    assert a.to_restore() is start
    b = Attempts(start)
    b.tested_run(Score(False, 1, 3), {"calc.py": "one", "util.py": "u"}, 1)
    b.tested_run(Score(False, 0, 3), {"calc.py": "none", "util.py": "u"}, 2)
    assert b.to_restore().round == 1


# ---- the files as a first message found them ---------------------------------------------

TWO_CODE = "def add(a, b):\n    return abs(a) + abs(b)\n"
ONE_CODE = "def add(a, b):\n    return a * b + 1\n"


def _start_with(root, code):
    _setup(root)
    (root / "calc.py").write_text(code)
    subprocess.run(["git", "commit", "-qam", "start"], cwd=root, check=True)


def test_a_first_message_that_leaves_the_files_worse_puts_back_what_it_found(git_repo):
    """No message before tested the files: at the end, with the tests failing, the files as
    the message found them are tested once (in place, then the last attempt put back) and,
    scoring better, written back."""
    _start_with(git_repo, TWO_CODE)  # 2 of 3
    model = Sampled([NONE, ONE])  # 0 of 3, then 1 of 3
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=1))
    tests, events = _send(conv)
    assert [run_score(c.ok, c.output).passed for c in tests] == [0, 1]
    warned = [e.message for e in events if isinstance(e, Warning)]
    assert any("running them on the files as the message found them" in m for m in warned)
    kept = [m for m in warned if m.startswith("kept attempt")]
    assert kept and "attempt 0, the files as this message found them (2 of 3 tests passed)" in kept[0]
    assert "(1 of 3 tests passed)" in kept[0]
    assert _code(git_repo) == TWO_CODE
    assert events[-1].stop_reason != "answered" and events[-1].is_error


def test_a_first_message_that_improves_the_files_keeps_its_attempt(git_repo):
    _start_with(git_repo, ONE_CODE)  # 1 of 3
    model = Sampled([NONE, TWO])  # 0 of 3, then 2 of 3
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=1))
    _, events = _send(conv)
    warned = [e.message for e in events if isinstance(e, Warning)]
    assert any("running them on the files as the message found them" in m for m in warned)
    assert not any(m.startswith("kept attempt") for m in warned)
    assert _code(git_repo) == TWO_CODE  # the start was tested (1 of 3) and is not better


@pytest.mark.skipif(not (sys.platform.startswith("linux") and sandbox.available()[0]),
                    reason="needs bubblewrap: tests a message names are inferred only sandboxed")
def test_the_tests_run_before_the_first_reply_score_the_start_without_another_run(git_repo):
    """A message that says its tests fail has them run before its first reply: that run is
    the start's score, so no further run is made at the end."""
    _start_with(git_repo, TWO_CODE)  # 2 of 3
    model = Sampled([NONE, ONE])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", max_fix_rounds=1))
    tests, events = _send(conv, "The test in calc_test.py fails. Fix add in calc.py.")
    assert [(t.round, run_score(t.ok, t.output).passed) for t in tests] == [(0, 2), (1, 0), (2, 1)]
    warned = [e.message for e in events if isinstance(e, Warning)]
    assert not any("running them on the files" in m for m in warned)
    assert any(m.startswith("kept attempt 0") for m in warned)
    assert _code(git_repo) == TWO_CODE


def test_a_file_the_message_created_leaves_the_start_untested(git_repo):
    """A message that created a file cannot put the start back as it was (the file did not
    exist): no probe, the last attempt stays and the outcome says the tests fail."""
    _start_with(git_repo, TWO_CODE)
    extra = "helper.py\n```python\nX = 1\n```\n"
    model = Sampled([NONE + "\n" + extra, ONE])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=1))
    _, events = _send(conv)
    assert not any(isinstance(e, Warning) and "running them on the files" in e.message for e in events)
    assert events[-1].is_error
    assert (git_repo / "helper.py").exists() and _code(git_repo) == ONE_CODE  # the last attempt stays


def test_a_message_whose_edits_are_all_undone_does_not_end_answered(git_repo):
    """The files passed their tests before the message and it broke them: they are written
    back, and the message, having changed nothing in the end, ends no_change (an error), not
    answered."""
    _start_with(git_repo, "def add(a, b):\n    return a + b\n")  # 3 of 3
    model = Sampled([NONE, ONE])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=1))
    _, events = _send(conv, "make add also accept strings of digits")
    assert any(isinstance(e, Warning) and e.message.startswith("kept attempt 0") for e in events)
    assert _code(git_repo) == "def add(a, b):\n    return a + b\n"
    assert events[-1].stop_reason == "no_change" and events[-1].is_error


def test_no_start_probe_when_the_message_edited_test_files(git_repo):
    """Edits of the tests themselves: the start and the end would be scored by different
    tests, so the start is not tested."""
    _start_with(git_repo, TWO_CODE)
    new_test = TESTS + "    def test_more(self):\n        self.assertEqual(add(2, 2), 4)\n"
    model = Sampled([NONE + "\ncalc_test.py\n```python\n" + new_test + "```\n", ONE])
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=1))
    _, events = _send(conv)
    assert not any(isinstance(e, Warning) and "running them on the files" in e.message for e in events)


def test_the_probe_puts_the_last_attempt_back_with_its_time(git_repo):
    """The start scores worse: the probe has put the last attempt back byte for byte, with
    its modification time (and no bytecode of the start's text left to pass for it)."""
    _start_with(git_repo, ONE_CODE)  # 1 of 3
    model = Sampled([NONE, TWO])  # 0 of 3, then 2 of 3
    conv = conversation(git_repo, model, _cfg(max_fix_rounds=1))
    seen, events = {}, []
    for e in conv.send("make add pass calc_test.py"):
        events.append(e)
        if isinstance(e, Warning) and "running them on the files" in e.message:
            f = git_repo / "calc.py"
            seen["before"] = (f.read_bytes(), f.stat().st_mtime_ns)
    assert "before" in seen, "the probe did not run"
    assert not any(isinstance(e, Warning) and e.message.startswith("kept attempt") for e in events)
    f = git_repo / "calc.py"
    assert (f.read_bytes(), f.stat().st_mtime_ns) == seen["before"]
    assert not list((git_repo / "__pycache__").glob("calc.*.pyc")) if (git_repo / "__pycache__").is_dir() else True


def test_attempt_files_keep_their_line_endings(tmp_path):
    from agent.core.attempts import read_files

    (tmp_path / "a.txt").write_bytes(b"one\r\ntwo\rthree\n")
    assert read_files(tmp_path, ["a.txt", "gone.txt"]) == {"a.txt": "one\r\ntwo\rthree\n", "gone.txt": None}

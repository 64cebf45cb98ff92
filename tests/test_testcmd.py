"""The test command a message implies (agent/core/testcmd.py) and the loop running it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from scripted import ScriptedModel, call, conversation, full_auto, git_repo  # noqa: F401

from agent.core import testcmd
from agent.core.testcmd import failing_test_files, infer
from agent.events import CheckRun, Warning
from tools import sandbox

BWRAP_OK, BWRAP_WHY = sandbox.available() if sys.platform.startswith("linux") else (False, "not Linux")
needs_bwrap = pytest.mark.skipif(not BWRAP_OK, reason=f"no working bubblewrap: {BWRAP_WHY}")

PYTEST_OUT = """\
____________________ CalcTest.test_neg ____________________
calc_test.py:9: in test_neg
    self.assertEqual(add(-1, -1), -2)
E   AssertionError: 0 != -2
=========================== short test summary info ============================
FAILED calc_test.py::CalcTest::test_neg - AssertionError: 0 != -2
FAILED tests/test_more.py::test_x - Assert...
ERROR missing_test.py - ModuleNotFoundError
1 failed, 2 passed in 0.03s

See the testing errors above. Fix the code in calc.py.
"""


def _tree(root, *names):
    for n in names:
        (root / n).parent.mkdir(parents=True, exist_ok=True)
        (root / n).write_text("")
    return root


def test_pytest_lines_name_the_test_files_that_exist(tmp_path):
    root = _tree(tmp_path, "calc_test.py", "tests/test_more.py", "calc.py")
    # missing_test.py is not in the repository: not run
    assert failing_test_files(PYTEST_OUT, root) == ["calc_test.py", "tests/test_more.py"]
    verbose = "calc_test.py::test_a PASSED\ncalc_test.py::test_b FAILED\n"
    assert failing_test_files(verbose, root) == ["calc_test.py"]
    collect = "______ ERROR collecting tests/test_more.py ______\nE   ImportError: x\n"
    assert failing_test_files(collect, root) == ["tests/test_more.py"]


def test_unittest_lines_name_the_module_file(tmp_path):
    root = _tree(tmp_path, "pkg/calc_test.py", "other_test.py")
    out = ("FAIL: test_neg (pkg.calc_test.CalcTest.test_neg)\n------\n"
           "ERROR: test_x (other_test.T)\n------\nFAIL: test_y (gone_test.T)\n")
    assert failing_test_files(out, root) == ["pkg/calc_test.py", "other_test.py"]


def test_a_clipped_run_names_its_test_files_by_their_traceback_lines(tmp_path):
    """Output cut above its summary keeps the tracebacks: their lines in test files count,
    lines in the code under test do not; Python's own tracebacks may give absolute paths."""
    root = _tree(tmp_path / "repo", "bowling.py", "bowling_test.py", "tests/test_io.py",
                 "tests/helpers.py")
    clipped = ("bowling_test.py:16: in roll_new_game\n    game.roll(roll)\n"
               "bowling.py:11: in roll\n    self.score += pins\n"
               "E   AttributeError: 'BowlingGame' object has no attribute 'score'\n"
               "tests/helpers.py:3: in make\n...\n28 failed, 3 passed in 0.21s\n")
    assert failing_test_files(clipped, root) == ["bowling_test.py"]
    native = ('Traceback (most recent call last):\n'
              f'  File "{root}/tests/test_io.py", line 9, in test_read\n'
              f'  File "{tmp_path}/elsewhere_test.py", line 1, in test_x\n'
              '  File "/usr/lib/python3.11/unittest/case.py", line 57, in testPartExecutor\n')
    (tmp_path / "elsewhere_test.py").write_text("")
    assert failing_test_files(native, root) == ["tests/test_io.py"]


@pytest.mark.parametrize("text", [
    "FAILED ../outside_test.py::test_a - x",
    "FAILED /etc/passwd.py::test_a - x",
    "FAILED -p.py::test_a - x",
    "FAILED link_test.py::test_a - x",  # a link to a file outside the repository
    "FAILED tests::test_a - x",  # a folder, not a file
    "the test in calc_test.py is failing",  # prose, not a test run's line
    "",
])
def test_nothing_outside_the_repository_or_not_a_test_line(tmp_path, text):
    root = tmp_path / "repo"
    _tree(root, "calc_test.py", "tests/x.py")
    (tmp_path / "outside_test.py").write_text("")
    (root / "link_test.py").symlink_to(tmp_path / "outside_test.py")
    (root / "-p.py").write_text("")
    assert failing_test_files(text, root) == []
    assert infer(text, root) == ""


def test_the_command_quotes_what_it_names_and_fits_run_shell(tmp_path, monkeypatch):
    root = _tree(tmp_path, "calc_test.py", "a b_test.py")
    monkeypatch.setattr(testcmd, "_python_with_pytest", lambda root: "python3")
    out = "FAILED calc_test.py::t - x\nFAILED a b_test.py::t - x\n"
    # "a b_test.py" as pytest writes it splits at the space: only calc_test.py is a file here
    assert infer(out, root) == f"python3 -m pytest {testcmd.PYTEST_ARGS} calc_test.py"
    long = [f"tests/test_{'x' * 100}_{i}.py" for i in range(25)]
    _tree(root, *long)
    cmd = infer("".join(f"FAILED {f}::t - x\n" for f in long), root)
    assert len(cmd) <= testcmd.MAX_COMMAND_CHARS and cmd.endswith(".py") and long[0] in cmd
    # without a Python that has pytest nothing is inferred (unittest would say "Ran 0 tests
    # ... OK" of a pytest-style file)
    monkeypatch.setattr(testcmd, "_python_with_pytest", lambda root: "")
    assert infer(out, root) == ""


def test_only_test_files_and_no_crash_on_odd_paths(tmp_path):
    root = _tree(tmp_path / "repo", "setup.py", "@test_args.py", "tests/test_a.py",
                 ".git/test_hook.py")
    (root / "loop_test.py").symlink_to(root / "loop_test.py")  # a link to itself
    text = ("FAILED setup.py::t - x\nERROR: see (setup)\nFAILED @test_args.py::t\n"
            "FAILED .git/test_hook.py::t - x\n"
            "FAILED loop_test.py::t - x\n"
            f'  File "{root}/loop_test.py", line 1, in t\n'
            "tests/test_a.py:12: error: Incompatible types  [mypy]\n")
    assert failing_test_files(text, root) == []
    assert failing_test_files("tests/test_a.py:12: AssertionError\n", root) == ["tests/test_a.py"]


def test_long_messages_are_scanned_in_linear_time(tmp_path):
    import time

    root = _tree(tmp_path, "calc_test.py")
    t0 = time.perf_counter()
    text = "\n" * 200_000 + " " * 1000 + "\nFAILED calc_test.py::t\n"
    assert failing_test_files(text, root) == ["calc_test.py"]
    assert time.perf_counter() - t0 < 5.0  # (quadratic, this took minutes)


def test_the_pytest_probe_runs_nothing_of_the_repository(tmp_path, monkeypatch):
    """The probe for an interpreter with pytest runs outside the sandbox: a repository's own
    pytest.py, or a `python` in a PATH entry that is relative or inside the repository, must
    not be what it runs."""
    root = _tree(tmp_path / "repo", "calc_test.py")
    marker = tmp_path / "ran"
    (root / "pytest.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    fake = root / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\ntouch {marker}\n")
    fake.chmod(0o755)
    monkeypatch.chdir(root)
    for entry in ("bin", str(root / "bin")):  # relative, and absolute inside the repository
        monkeypatch.setenv("PATH", entry + os.pathsep + os.environ["PATH"])
        testcmd._python_with_pytest.cache_clear()
        try:
            assert infer("FAILED calc_test.py::t - x\n", root)
        finally:
            testcmd._python_with_pytest.cache_clear()
        assert not marker.exists()


TESTS = """import unittest
from calc import add

class CalcTest(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(1, 1), 2)
    def test_neg(self):
        self.assertEqual(add(-1, -1), -2)
"""
WRONG = "calc.py\n```python\ndef add(a, b):\n    return abs(a) + abs(b)\n```\n"
RIGHT = "calc.py\n```python\ndef add(a, b):\n    return a + b\n```\n"


def _failing_repo(root):
    (root / "calc_test.py").write_text(TESTS)
    (root / "calc.py").write_text("def add(a, b):\n    return abs(a) + abs(b)\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "tests"], cwd=root, check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "--tb=short", "-p", "no:cacheprovider",
                          "calc_test.py"], cwd=root, capture_output=True, text=True, env=env).stdout
    assert "FAILED calc_test.py::CalcTest::test_neg" in out
    return out + "\nThe tests are correct. Fix the code in calc.py.\n"


@needs_bwrap
def test_a_message_showing_failures_gets_them_run_after_each_edit(git_repo):
    message = _failing_repo(git_repo)
    model = ScriptedModel([WRONG, RIGHT, "Fixed."])
    cfg = full_auto(edit_format="whole", max_fix_rounds=2)
    events = list(conversation(git_repo, model, cfg).send(message))
    notes = [e.message for e in events if isinstance(e, Warning)]
    assert any("shows failing tests" in n and "calc_test.py" in n for n in notes)
    tests = [e for e in events if isinstance(e, CheckRun) and e.kind == "test"]
    # the reply that wrote the failing code again was tested, failed, and went back
    assert [t.ok for t in tests] == [False, True]
    assert "1 failed, 1 passed" in tests[0].output and tests[0].fed_back
    assert "The tests failed" in model.seen[1][-1]["content"]
    assert "return a + b" in (git_repo / "calc.py").read_text()


@needs_bwrap
@pytest.mark.parametrize("over", [dict(infer_test_cmd=False), dict(sandbox="off"),
                                  dict(auto_test=False), dict(approval_mode="auto-edit"),
                                  dict(approval_mode="suggest")])
def test_no_inferred_tests_when_off_unsandboxed_or_asking_for_shell(git_repo, over):
    """Outside full-auto a shell command asks first: pasting failures does not change that."""
    message = _failing_repo(git_repo)
    model = ScriptedModel([RIGHT, "Fixed."])
    events = list(conversation(git_repo, model, full_auto(edit_format="whole", **over)).send(message))
    assert not [e for e in events if isinstance(e, CheckRun) and e.kind == "test"]
    assert not any(isinstance(e, Warning) and "shows failing tests" in e.message for e in events)


@needs_bwrap
def test_a_configured_test_cmd_wins(git_repo):
    message = _failing_repo(git_repo)
    model = ScriptedModel([RIGHT, "Fixed."])
    cfg = full_auto(edit_format="whole", test_cmd="true")
    events = list(conversation(git_repo, model, cfg).send(message))
    assert [e.command for e in events if isinstance(e, CheckRun) and e.kind == "test"] == ["true"]


def test_the_test_files_a_message_says_fail(tmp_path):
    from agent.core.testcmd import said_failing

    _tree(tmp_path, "test_calc.py", "tests/test_more.py", "calc.py", "hidden_test.py")
    listed = {"test_calc.py", "tests/test_more.py", "calc.py"}  # hidden_test.py: not in git's view
    said = lambda m: said_failing(m, tmp_path, listed)  # noqa: E731
    assert said("The test in test_calc.py fails. Find the bug in calc.py and fix it.") == ["test_calc.py"]
    assert said("Make ./tests/test_more.py pass") == ["tests/test_more.py"]
    # named as what must pass once the change is made
    for m in ("Fix the range check in calc.py so test_calc.py passes.",
              "Fix calc.py so that test_calc.py passes again", "Fix calc.py until test_calc.py passes",
              "test_calc.py should pass after the fix", "Fix calc.py; test_calc.py needs to pass",
              "Make `test_calc.py` pass", "`test_calc.py` should pass", "Make sure test_calc.py passes",
              "Ensure test_calc.py passes", "Fix calc.py so that all tests in test_calc.py pass",
              "Fix calc.py so test_calc.py will pass", "Get test_calc.py to pass",
              "test_calc.py is supposed to pass"):
        assert said(m) == ["test_calc.py"], m
    for m in ("Fix calc.py, test_calc.py should not pass yet", "test_calc.py passes already",
              "so test_calc.py never passes", "Explain why test_calc.py should pass.",
              "Do you think test_calc.py should pass?", "Does test_calc.py need to pass?",
              "Don't worry if test_calc.py should pass.",
              "I fixed calc.py, so test_calc.py passes already. Please refactor calc.py."):
        assert said(m) == [], m
    assert said("test_calc.py is broken; tests/test_more.py does not pass!") \
        == ["test_calc.py", "tests/test_more.py"]
    assert said("Add a test to test_calc.py. Then fix calc.py.") == []  # no sentence says it fails
    assert said("calc.py fails") == []  # not a test file
    assert said("hidden_test.py fails") == [] and said("test_gone.py fails") == []
    # the file must be what fails, not negated, not a failing test asked for
    assert said("test_calc.py no longer fails") == said("test_calc.py never fails") == []
    assert said("Write a failing test in test_calc.py.") == []
    assert said("Add a test to test_calc.py for the failure case") == []
    assert infer("test_calc.py fails", tmp_path, listed).endswith(" test_calc.py")
    # the failure first, then the file
    assert said("pytest fails on tests/test_more.py (test_x). Fix calc.py.") == ["tests/test_more.py"]
    assert said("It is failing in test_calc.py") == ["test_calc.py"]
    assert said("It never fails on test_calc.py") == said("a failing test in test_calc.py") == []
    # the tests said to fail, no file named: every test file git lists
    for m in ("One test fails. Fix calc.py.", "Fix the failing test.", "make the tests pass",
              "The tests are failing after my change to calc.py", "a unit test doesn't pass"):
        assert said(m) == ["test_calc.py", "tests/test_more.py"], m
    for m in ("Write a failing test for calc.py.", "The tests no longer fail.", "Add tests.",
              "Explain why tests pass.", "add a new test that fails without the fix"):
        assert said(m) == [], m


@needs_bwrap
def test_a_message_that_says_its_tests_fail_has_them_run_first(git_repo):
    """Tests the message says fail are run before the first reply and shown with it; the fix
    is tested; a reply that explains the fix without writing it ends the message, not done
    (it is not sent back: the rule that asked for the fix passed nothing more)."""
    _failing_repo(git_repo)
    task = "The test in calc_test.py fails. Find the bug in calc.py and fix it."
    cfg = full_auto(edit_format="whole", max_fix_rounds=2)
    model = ScriptedModel(["The bug: add takes abs of both numbers."])
    events = list(conversation(git_repo, model, cfg).send(task))
    assert len(model.seen) == 1 and events[-1].stop_reason != "answered"
    model = ScriptedModel([RIGHT, "Fixed."])
    events = list(conversation(git_repo, model, cfg).send(task))
    notes = [e.message for e in events if isinstance(e, Warning)]
    assert any("says its tests fail" in n and "calc_test.py" in n for n in notes)
    tests = [e for e in events if isinstance(e, CheckRun) and e.kind == "test"]
    # run first (shown, not fed back), then after the fix
    assert [(t.ok, t.round, t.fed_back) for t in tests] == [(False, 0, False), (True, 1, False)]
    first = model.seen[0][-1]["content"]
    assert first.startswith("The test in calc_test.py fails.")
    assert "The tests fail now (the agent ran `" in first and "1 failed, 1 passed" in first
    from agent.core.attach import typed_text
    assert typed_text(first) == "The test in calc_test.py fails. Find the bug in calc.py and fix it."
    assert "return a + b" in (git_repo / "calc.py").read_text()
    # tests that pass are run, not shown
    model = ScriptedModel(["It passes."])
    events = list(conversation(git_repo, model, cfg).send("Does calc_test.py fail?"))
    assert [t.ok for t in events if isinstance(t, CheckRun)] == [True]
    assert "The tests fail now" not in model.seen[0][-1]["content"]
    # a question about a failure is shown the failure, and not asked for a fix
    (git_repo / "calc.py").write_text("def add(a, b):\n    return abs(a) + abs(b)\n")
    subprocess.run(["git", "commit", "-qam", "back"], cwd=git_repo, check=True)
    model = ScriptedModel(["It takes abs of both numbers."])
    events = list(conversation(git_repo, model, cfg).send("Why does calc_test.py fail?"))
    assert len(model.seen) == 1 and "The tests fail now" in model.seen[0][-1]["content"]
    assert events[-1].stop_reason == "answered"
    # a fix made through the shell (no file edit recorded): the reply after it ends the message
    model = ScriptedModel([call("run_shell", command="sed -i 's/abs(a) + abs(b)/a + b/' calc.py"),
                           "Fixed it with sed."])
    events = list(conversation(git_repo, model, cfg).send("calc_test.py fails: fix calc.py"))
    assert len(model.seen) == 2 and "return a + b" in (git_repo / "calc.py").read_text()
    assert [(t.ok, t.round) for t in events if isinstance(t, CheckRun)] == [(False, 0)]


def test_tests_the_message_names_but_does_not_say_fail_are_not_run(git_repo):
    """A failing test asked for, a test file that no longer fails, a test file kept out of
    git's view: nothing is run before the reply."""
    _failing_repo(git_repo)
    (git_repo / "hidden_test.py").write_text("def test_x():\n    assert False\n")
    (git_repo / ".git" / "info" / "exclude").write_text("/hidden_test.py\n")
    cfg = full_auto(edit_format="whole", max_fix_rounds=2)
    for text in ("Write a failing test in calc_test.py for zero; do not change calc.py yet.",
                 "calc_test.py no longer fails, thanks. Add a docstring to calc.py.",
                 "hidden_test.py fails. Fix calc.py."):
        model = ScriptedModel(["Done."])
        events = list(conversation(git_repo, model, cfg).send(text))
        assert not [e for e in events if isinstance(e, CheckRun)], text
        assert "The tests fail now" not in model.seen[0][-1]["content"]
        assert "assert False" not in str(model.seen)  # the hidden file's text is never shown


# ---- a fresh reply to a failure report answers the request before it again ----------------


def test_restart_view_drops_the_answer_and_the_files_the_request_showed():
    from agent.core.attempts import restart_files, restart_view

    def rv(view, request, base, files):  # as the conversation calls it
        return restart_view(view, request, base, restart_files(view, request, files))

    stub = '<file path="calc.py">\ndef add(a, b):\n    pass\n</file>'
    failed = '<file path="calc.py">\ndef add(a, b):\n    return a * b\n</file>'
    other = '<file path="util.py">\nX = 1\n</file>'
    view = [{"role": "system", "content": "sys"},
            {"role": "user", "content": f"implement add in calc.py\n\nAttached files:\n{stub}"},
            {"role": "assistant", "content": "calc.py\n```python\ndef add(a, b):\n    return a * b\n```"},
            {"role": "user", "content": f"FAILED calc_test.py::t\nFix calc.py\n\nAttached files:\n{failed}"}]
    got = rv(view, 1, 4, ["calc.py", "util.py"])
    assert got is not None and [m["role"] for m in got] == ["system", "user", "user"]
    assert got[1] is view[1] and "a * b" not in str(got)
    assert got[2]["content"] == "FAILED calc_test.py::t\nFix calc.py"
    # a file the request did not show stays attached; one it did goes
    view[3] = {"role": "user", "content": f"Fix calc.py\n\nAttached files:\n{failed}\n{other}"}
    got = rv(view, 1, 4, ["calc.py", "util.py"])
    assert got[2]["content"] == f"Fix calc.py\n\nAttached files:\n{other}"
    # a `</file>` line inside a file's text does not end its block
    tricky = '<file path="calc.py">\ndef add(a, b):\n    return a * b\n</file>\nSECRET = 1\n</file>'
    doc = '<file path="doc.md">\nsee <file path="calc.py">\nx\n</file>\n</file>'
    view[3] = {"role": "user", "content": f"Fix calc.py\n\nAttached files:\n{tricky}\n{doc}"}
    got = rv(view, 1, 4, ["calc.py"])
    assert got[2]["content"] == f"Fix calc.py\n\nAttached files:\n{doc}"
    # a request that showed the file cut at the attachment limit is no text to write it from
    cut = view[1]
    view[1] = {"role": "user", "content": 'Do it\n\nAttached files:\n<file path="calc.py">\n'
               'def add(a, b):\n[... 900 more bytes]\n</file>'}
    assert rv(view, 1, 4, ["calc.py"]) is None
    view[1] = cut
    # a file someone changed since the answer (not in `files`) stays as it is now
    assert rv(view, 1, 4, ["util.py"]) is None
    # nothing to restart from: the request showed none of the files, or there is no request
    view[1] = {"role": "user", "content": "implement add"}
    assert rv(view, 1, 4, ["calc.py", "util.py"]) is None
    assert rv(view, -1, 4, ["calc.py"]) is None and rv(view, 3, 4, ["calc.py"]) is None


@needs_bwrap
def test_a_fresh_reply_to_a_failure_report_never_reads_the_failed_code(git_repo):
    """Asked to fix the failures of its last answer, the model first replies to the report
    (it may repair the code it sees); a fresh sample after that answers the request before
    the report again, from the files as that request showed them, with the failures in view."""
    from test_resample import Sampled

    failing = _failing_repo(git_repo)  # calc.py holds abs(a) + abs(b), committed
    (git_repo / "calc.py").write_text("def add(a, b):\n    pass\n")
    model = Sampled([WRONG, WRONG, RIGHT])
    cfg = full_auto(edit_format="whole", max_fix_rounds=2, attach_mentioned=True, fix_mode="restart")
    conv = conversation(git_repo, model, cfg)
    list(conv.send("Implement add in calc.py."))
    assert len(model.seen) == 1 and "pass" in model.seen[0][-1]["content"]
    events = list(conv.send(failing))
    notes = [e.message for e in events if isinstance(e, Warning)]
    assert any("answers the message before it again" in n for n in notes)
    report, fresh = model.seen[1], model.seen[2]
    assert "abs(a)" in str(report) and "abs(a)" not in str(fresh)  # the failed code is not read
    assert fresh[:-1] == model.seen[0] and "FAILED calc_test.py" in fresh[-1]["content"]
    assert model.temps == [0.0, 0.0, 0.7]
    assert "return a + b" in (git_repo / "calc.py").read_text()


@needs_bwrap
def test_a_file_changed_by_hand_since_the_answer_is_not_restarted_from_its_old_text(git_repo):
    """The restart shows the files as the earlier request showed them only where they are
    still as the agent's answer left them; a person's edit in between is not set aside."""
    from test_resample import Sampled

    failing = _failing_repo(git_repo)
    (git_repo / "calc.py").write_text("def add(a, b):\n    pass\n")
    model = Sampled([WRONG, WRONG, RIGHT])
    cfg = full_auto(edit_format="whole", max_fix_rounds=2, attach_mentioned=True, fix_mode="restart")
    conv = conversation(git_repo, model, cfg)
    list(conv.send("Implement add in calc.py."))
    (git_repo / "calc.py").write_text("def add(a, b):\n    return abs(a) + abs(b)  # mine\n")
    assert "abs(a)" in (git_repo / "calc.py").read_text()
    events = list(conv.send(failing))
    assert any(isinstance(e, Warning) and "afresh" in e.message for e in events)
    assert not any(isinstance(e, Warning) and "before it again" in e.message for e in events)
    assert "# mine" in str(model.seen[2])  # the fresh reply read the file as it is


@needs_bwrap
@pytest.mark.parametrize("between", ["note", "diff-format", "default-fix-mode"])
def test_no_restart_after_a_note_or_with_edits_that_apply_to_the_file_as_it_is(git_repo, between):
    """A note added after the answer (a command's output the report may rely on) would be left
    out of a restart, and search/replace edits written against the request's text would apply
    to the failed file: neither restarts; nor does any fix_mode but "restart"."""
    from test_resample import Sampled

    failing = _failing_repo(git_repo)
    (git_repo / "calc.py").write_text("def add(a, b):\n    pass\n")
    model = Sampled([WRONG, WRONG, RIGHT, RIGHT])
    over = {"diff-format": dict(edit_format="diff"), "default-fix-mode": dict(fix_mode="auto"),
            "note": {}}[between]
    if between == "diff-format":  # the same attempts as search/replace edits
        def sr(old, new):
            return f"calc.py\n```python\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE\n```\n"
        model.turns = [sr("    pass\n", "    return abs(a) + abs(b)\n"),
                       sr("abs(a) + abs(b)\n", "abs(a) + abs(b)\n"),
                       sr("abs(a) + abs(b)\n", "a + b\n"), "Fixed."]
    cfg = full_auto(**{"edit_format": "whole", "max_fix_rounds": 2, "attach_mentioned": True,
                       "fix_mode": "restart", **over})
    conv = conversation(git_repo, model, cfg)
    list(conv.send("Implement add in calc.py."))
    if between == "note":
        conv.add_note("$ make check\nok")
    assert "abs(a)" in (git_repo / "calc.py").read_text()
    events = list(conv.send(failing))
    assert any(isinstance(e, Warning) and "afresh" in e.message for e in events)
    assert not any(isinstance(e, Warning) and "before it again" in e.message for e in events)


@needs_bwrap
def test_a_restart_reply_is_judged_against_the_file_it_read(git_repo):
    """A restarted reply never saw the long file a failed attempt left; its short, complete
    file is judged against the text it read (the request's), not taken for a snippet."""
    from test_resample import Sampled

    failing = _failing_repo(git_repo)
    (git_repo / "calc.py").write_text("def add(a, b):\n    pass\n")
    helpers = "".join(f"def helper_{i}(x):\n    return x + {i}\n\n\n" for i in range(8))
    long = f"calc.py\n```python\n{helpers}def add(a, b):\n    return abs(a) + abs(b)\n```\n"
    model = Sampled([WRONG, long, RIGHT, "Fixed."])
    cfg = full_auto(edit_format="whole", max_fix_rounds=2, attach_mentioned=True, fix_mode="restart")
    conv = conversation(git_repo, model, cfg)
    list(conv.send("Implement add in calc.py."))
    events = list(conv.send(failing))
    notes = [e.message for e in events if isinstance(e, Warning)]
    assert any("before it again" in n for n in notes)
    assert not any("not applied" in n for n in notes), notes
    assert (git_repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


SHOUT = "def shout(text):\n    return text.upper() + '!'\n"
NOT_A_TEST = "test_strutil.py\n```python\ndef shout(text):\n    return text.upper()\n```\n"
ARG_TEST = ("test_strutil.py\n```python\nfrom strutil import shout\n\n\ndef test_shout(x):\n"
            "    assert shout(x) == 'HI!'\n```\n")
GOOD_TEST = ("test_strutil.py\n```python\nfrom strutil import shout\n\n\ndef test_shout():\n"
             "    assert shout('hi') == 'HI!'\n```\n")


def _shout_repo(root):
    (root / "strutil.py").write_text(SHOUT)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "strutil"], cwd=root, check=True)


@needs_bwrap
def test_test_files_a_reply_writes_are_run_and_their_failures_go_back(git_repo):
    """Asked for a test, a reply that writes the function instead ("no tests ran"), then a test
    that takes its input as an argument (no such fixture), then a right one: each written
    test file is run, the first two failures go back, the third passes."""
    _shout_repo(git_repo)
    model = ScriptedModel([NOT_A_TEST, ARG_TEST, GOOD_TEST, "Done."])
    cfg = full_auto(edit_format="whole", max_fix_rounds=3, fix_mode="repair")
    events = list(conversation(git_repo, model, cfg).send(
        'Create a file test_strutil.py with a test function test_shout that checks that '
        'shout("hi") returns "HI!".'))
    notes = [e.message for e in events if isinstance(e, Warning)]
    assert any("the reply wrote test files" in n and "test_strutil.py" in n for n in notes)
    tests = [e for e in events if isinstance(e, CheckRun) and e.kind == "test"]
    assert [(t.ok, t.fed_back) for t in tests] == [(False, True), (False, True), (True, False)]
    assert "no tests ran" in tests[0].output
    assert "fixture 'x' not found" in tests[1].output
    assert "The tests failed" in model.seen[1][-1]["content"]
    assert "def test_shout():" in (git_repo / "test_strutil.py").read_text()


@needs_bwrap
@pytest.mark.parametrize("over", [dict(infer_test_cmd=False), dict(approval_mode="auto-edit"),
                                  dict(test_cmd="true")])
def test_written_tests_are_not_run_when_off_asking_or_configured(git_repo, over):
    _shout_repo(git_repo)
    model = ScriptedModel([NOT_A_TEST, "Done."])
    events = list(conversation(git_repo, model, full_auto(edit_format="whole", **over)).send(
        "Create a file test_strutil.py with a test for shout."))
    ran = [e.command for e in events if isinstance(e, CheckRun) and e.kind == "test"]
    assert ran == (["true"] if "test_cmd" in over else [])
    assert not any(isinstance(e, Warning) and "wrote test files" in e.message for e in events)


def test_written_tests_are_the_test_files_among_the_edits(tmp_path):
    _tree(tmp_path, "test_a.py", "b_test.py", "calc.py", "tests/test_c.py", "test.py", "app/tests.py")
    testcmd._python_with_pytest.cache_clear()
    files = testcmd.written_test_files(["calc.py", "test_a.py", "tests/test_c.py", "test_a.py",
                                        "gone_test.py", "../test_x.py", "b_test.py"], tmp_path)
    assert files == ["test_a.py", "tests/test_c.py", "b_test.py"]
    cmd = testcmd.pytest_command(files, tmp_path)
    assert cmd.endswith(" test_a.py tests/test_c.py b_test.py") and "-m pytest" in cmd
    assert testcmd.written_test_files(["calc.py"], tmp_path) == []
    # a script named test.py, a Django app's tests.py: not run
    assert testcmd.written_test_files(["test.py", "app/tests.py"], tmp_path) == []

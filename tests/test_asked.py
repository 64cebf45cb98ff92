"""What a message asks for, checked in the files after a reply (agent/core/asked.py), and the
`asked` check of the lint-and-test loop with a scripted model."""

from __future__ import annotations

import subprocess

from agent.core.asked import asks, new_names, unmet
from agent.events import CheckRun, Warning
from scripted import ScriptedModel, conversation, full_auto, git_repo  # noqa: F401


def _asked(text):
    return [(a.kind, a.name) for a in asks(text)]


def test_names_a_message_asks_to_add():
    assert _asked('Add a parameter greeting with the default value "Hello" to greet.') == [
        ("name", "greeting")]
    assert _asked("Create test_strutil.py with a test function test_shout.") == [
        ("name", "test_shout")]
    assert _asked("Add a --shout flag to hello.py: when given, print in upper case.") == [
        ("name", "--shout")]
    assert _asked("Create a new method called reset on Counter.") == [("name", "reset")]
    assert _asked("Add an option `--dry-run` to cli.py.") == [("name", "--dry-run")]
    assert _asked("Rename the function area to rect_area in shapes.py.") == [
        ("name", "rect_area")]  # (the old name is the one renamed, not one asked for)


def test_prose_questions_and_negations_ask_for_nothing():
    for text in ("Explain how to add a parameter timeout.",
                 "Should I add a parameter timeout to fetch?",
                 "Do not add a parameter timeout.",
                 "Add the methods outlined above.",  # prose, not a name
                 "The teacher wants to give the class seeds to plant.",
                 "Add a docstring to add in calc.py but do not change the code? Just explain."):
        assert _asked(text) == [], text


def test_docstrings_hints_and_removals():
    assert ("docstring", "Counter") in _asked("Add a docstring to the class Counter in counter.py.")
    assert _asked("Add docstrings to all functions in calc.py.") == [("docstring", "")]
    assert ("hints", "join_words") in _asked("Add type hints to join_words in words.py.")
    assert _asked("Remove the unused function _old_format from util.py.") == [
        ("gone", "_old_format")]
    assert _asked("Remove the unused imports from app.py.") == [("unused_imports", "")]
    (a,) = asks("Remove the unused imports from app.py.")
    assert a.files == ("app.py",)


def test_a_name_the_repository_has_is_not_asked_for(tmp_path):
    (tmp_path / "shapes.py").write_text("def area(w, h):\n    return w * h\n")
    found = new_names(asks("Rename the function area to rect_area in shapes.py."), tmp_path,
                      ["shapes.py"])
    assert [(a.kind, a.name) for a in found] == [("name", "rect_area")]


def test_unmet_reads_the_files(tmp_path):
    (tmp_path / "counter.py").write_text("class Counter:\n    def inc(self):\n        pass\n")
    (tmp_path / "words.py").write_text("def join_words(words, sep=' '):\n    return sep.join(words)\n")
    (tmp_path / "app.py").write_text("import os\nimport sys\n\nprint(sys.argv)\n")
    (tmp_path / "util.py").write_text("def _old_format(x):\n    return x\n\n\ndef f():\n    return 1\n")
    found = asks("Add a docstring to the class Counter in counter.py. Add type hints to "
                 "join_words in words.py. Remove the unused imports from app.py. Remove the "
                 "unused function _old_format from util.py.")
    lines = unmet(found, tmp_path, [], ["counter.py", "words.py", "app.py", "util.py"])
    assert lines == [
        "counter.py:1: `Counter` has no docstring",
        "words.py:1: `join_words` has no type hint for words, sep, its return value",
        "app.py:1: `os` is imported and never used",
        "util.py:1: `_old_format` is still there (the message asks to remove it)"]
    (tmp_path / "counter.py").write_text('class Counter:\n    """Counts."""\n')
    (tmp_path / "words.py").write_text(
        "def join_words(words: list[str], sep: str = ' ') -> str:\n    return sep.join(words)\n")
    (tmp_path / "app.py").write_text("import sys\n\nprint(sys.argv)\n")
    (tmp_path / "util.py").write_text("def f():\n    return 1\n")
    assert unmet(found, tmp_path, [], ["counter.py", "words.py", "app.py", "util.py"]) == []


def test_a_new_name_must_be_in_a_file_the_replies_wrote(tmp_path):
    (tmp_path / "hello.py").write_text("print('hi')\n")
    (tmp_path / "other.py").write_text("# --shout is documented here\n")
    found = asks("Add a --shout flag to hello.py.")
    assert unmet(found, tmp_path, ["hello.py"], ["hello.py"]) == [
        "hello.py: no `--shout` (the message asks for the flag `--shout`)"]
    assert unmet(found, tmp_path, [], ["hello.py"]) == [
        "no file was changed: no `--shout` (the message asks for the flag `--shout`)"]
    (tmp_path / "hello.py").write_text("import sys\nprint('HI' if '--shout' in sys.argv else 'hi')\n")
    assert unmet(found, tmp_path, ["hello.py"], ["hello.py"]) == []


def test_unused_imports_spares_modules_that_export(tmp_path):
    (tmp_path / "pkg.py").write_text("import os\n__all__ = ['os']\n")
    (tmp_path / "fut.py").write_text("from __future__ import annotations\nimport os.path\n"
                                     "print(os.path.sep)\n")
    found = asks("Remove the unused imports from pkg.py and fut.py.")
    assert unmet(found, tmp_path, [], ["pkg.py", "fut.py"]) == []


def _commit(repo):
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "files"], cwd=repo, check=True)


def test_an_edit_without_the_asked_name_goes_back(git_repo):
    (git_repo / "greet.py").write_text('def greet(name):\n    return "Hello, " + name\n')
    _commit(git_repo)
    wrong = 'greet.py\n```python\ndef greet(name="Hello"):\n    return "Hello, " + name\n```\n'
    right = ('greet.py\n```python\ndef greet(name, greeting="Hello"):\n'
             '    return greeting + ", " + name\n```\n')
    model = ScriptedModel([wrong, right])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    events = list(conv.send('Add a parameter greeting with the default value "Hello" to the '
                            'function greet in greet.py.'))
    checks = [e for e in events if isinstance(e, CheckRun) and e.kind == "asked"]
    assert [(c.ok, c.fed_back) for c in checks] == [(False, True)]
    fed = model.seen[1][-1]["content"]
    assert "do not yet do what the message asks" in fed and "`greeting`" in fed
    assert "greeting=" in (git_repo / "greet.py").read_text()
    assert events[-1].stop_reason == "answered"


def test_a_reply_that_changes_nothing_is_told_what_is_missing_once(git_repo):
    text = "class Counter:\n    def inc(self):\n        return 1\n"
    (git_repo / "counter.py").write_text(text)
    _commit(git_repo)
    same = f"counter.py\n```python\n{text}```\n"
    model = ScriptedModel([same, same, same])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    events = list(conv.send("Add a docstring to the class Counter in counter.py."))
    checks = [e for e in events if isinstance(e, CheckRun) and e.kind == "asked"]
    assert [(c.ok, c.fed_back) for c in checks] == [(False, True)]
    assert "`Counter` has no docstring" in checks[0].output
    assert len(model.seen) == 2  # told once, then the message ends
    assert "whole corrected file" in model.seen[1][-1]["content"]


def test_what_is_already_there_is_not_asked_again(git_repo):
    (git_repo / "shapes.py").write_text("def area(w, h):\n    return w * h\n")
    (git_repo / "use.py").write_text("from shapes import area\nprint(area(1, 2))\n")
    _commit(git_repo)
    model = ScriptedModel(["shapes.py\n```python\ndef rect_area(w, h):\n    return w * h\n```\n"
                           "use.py\n```python\nfrom shapes import rect_area\n"
                           "print(rect_area(1, 2))\n```\n"])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    events = list(conv.send("Rename the function area to rect_area in shapes.py and use.py."))
    assert not [e for e in events if isinstance(e, CheckRun) and e.kind == "asked"]
    assert len(model.seen) == 1


def test_the_check_is_off_with_the_loop(git_repo):
    (git_repo / "counter.py").write_text("class Counter:\n    pass\n")
    _commit(git_repo)
    model = ScriptedModel(["counter.py\n```python\nclass Counter:\n    pass\n```\n"] * 2)
    conv = conversation(git_repo, model, full_auto(edit_format="whole", max_fix_rounds=0))
    events = list(conv.send("Add a docstring to the class Counter in counter.py."))
    assert not [e for e in events if isinstance(e, CheckRun)] and len(model.seen) == 1


def test_where_fix_mode_resamples_a_fresh_sample_answers_and_is_checked_again(git_repo):
    """fix_mode auto with whole files: the `asked` verdict picks among samples as a test run
    does; the fresh reply reads the message alone, at the fresh temperature."""
    from test_resample import Sampled

    (git_repo / "hello.py").write_text("print('hello')\n")
    _commit(git_repo)
    plain = "hello.py\n```python\nprint('HELLO')\n```\n"
    flag = ("hello.py\n```python\nimport sys\n\n"
            "print('HELLO' if '--shout' in sys.argv else 'hello')\n```\n")
    model = Sampled([plain, flag])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    events = list(conv.send("Add a --shout flag to hello.py that prints the greeting in upper case."))
    checks = [e for e in events if isinstance(e, CheckRun) and e.kind == "asked"]
    assert [(c.ok, c.fed_back) for c in checks] == [(False, True)]
    assert model.temps == [0.0, 0.7] and model.seen[1] == model.seen[0]
    assert "--shout" in (git_repo / "hello.py").read_text()
    assert any(isinstance(e, Warning) and "do not yet do what the message asks" in e.message
               for e in events)

"""No silent loss (core/editguard.py): a whole-file write keeps what it leaves out unless the
message names it, markup left around code is stripped, text that does not parse is never
written or committed; and the outcome of a message (core/outcome.py) says when its work is
not done."""

from __future__ import annotations

import subprocess

import pytest
from scripted import ScriptedModel, call, conversation, full_auto, git, make_repo

from agent.core.editguard import left_out, parse_problem, strip_remnants, vet
from agent.core.outcome import Work, asks_edit, verdict
from agent.events import AgentResult, Warning

MODULE = '''"""Character maps."""
import re
from typing import Iterable

CYRILLIC = [("а", "a"), ("б", "b")]
GERMAN = [("ä", "ae"), ("ö", "oe")]
PRE_TRANSLATIONS = CYRILLIC + GERMAN


def add_uppercase(pairs: Iterable):
    for a, b in pairs:
        yield a.upper(), b.upper()


def slugify(text):
    return re.sub(r"\\s+", "_", text)


class Table:
    size = 2

    def get(self, key):
        return key

    def put(self, key):
        return None
'''

# what a small model writes for "fix the separator": every function, none of the data
REWRITE = '''import re


def add_uppercase(pairs):
    for a, b in pairs:
        yield a.upper(), b.upper()


def slugify(text):
    return re.sub(r"\\s+", "-", text)


class Table:
    def get(self, key):
        return key
'''


def test_a_rewrite_that_leaves_out_data_imports_and_members_keeps_them():
    out = vet("special.py", MODULE, REWRITE, "Fix the separator slugify uses: it should be '-'.")
    assert not out.problem
    assert left_out(MODULE, out.content) == []
    assert set(out.kept) >= {"CYRILLIC", "GERMAN", "PRE_TRANSLATIONS", "Iterable", "size", "put"}
    assert 'r"\\s+", "-"' in out.content  # the change itself is kept
    compile(out.content, "special.py", "exec")


def test_what_the_message_names_may_go():
    out = vet("special.py", MODULE, REWRITE.replace("import re\n", "import re\nfrom typing import Iterable\n"),
              "Remove GERMAN, PRE_TRANSLATIONS, CYRILLIC and Table.size and Table.put")
    assert not out.problem and out.kept == ()
    assert "GERMAN" not in out.content and "def put" not in out.content


def test_a_generic_clean_up_is_no_licence_to_drop_named_data():
    out = vet("special.py", MODULE, REWRITE, "Clean up and simplify this module")
    assert "CYRILLIC" in out.kept and "GERMAN =" in out.content


def test_unused_imports_may_go_when_asked():
    new = MODULE.replace("from typing import Iterable\n", "").replace("pairs: Iterable", "pairs")
    assert vet("special.py", MODULE, new, "remove the unused imports").content == new
    assert "Iterable" in vet("special.py", MODULE, new, "fix slugify").kept


def test_what_cannot_be_put_back_is_refused_with_the_names():
    old = "try:\n    import json\nexcept ImportError:\n    json = None\n\n\ndef f():\n    return json\n"
    out = vet("m.py", old, "def f():\n    return json\n", "fix f")
    assert "leaves out json" in out.problem and "not applied" in out.problem


@pytest.mark.parametrize("junk", ["</file>", "```", "</code>", "<file path=\"special.py\">"])
def test_markup_around_the_code_is_stripped(junk):
    new = MODULE.replace('"""Character maps."""', '"""Character maps!"""')
    out = vet("special.py", MODULE, new + junk + "\n", "fix the docstring")
    assert out.content == new and not out.problem and out.notes
    assert strip_remnants(junk + "\n" + new, MODULE) == new


def test_markup_the_file_has_is_kept():
    md = "# notes\n\n```\ncode\n```\n"
    assert strip_remnants(md, md) == md


@pytest.mark.parametrize("path,text", [
    ("a.py", "def f(:\n    pass\n"), ("a.py", "x = 1\n```\ny = 2\n"), ("a.py", "return 1\n"),
    ("a.json", '{"a": 1,}'), ("a.toml", "a = = 1\n")])
def test_text_that_does_not_parse_is_refused(path, text):
    assert parse_problem(path, text)
    assert "does not parse" in vet(path, None, text, "write it").problem


def test_other_files_are_not_parsed():
    assert parse_problem("notes.md", "```\n<<<\n") == ""


def _send(root, model, task, **cfg):
    conv = conversation(root, model, full_auto(**cfg))
    return list(conv.send(task))


def _commits_parse(root) -> bool:
    shas = subprocess.run(["git", "rev-list", "HEAD"], cwd=root, capture_output=True,
                          text=True, check=True).stdout.split()
    for sha in shas:
        for path in git(root, "show", "--name-only", "--format=", sha).split():
            if path.endswith(".py"):
                text = git(root, "show", f"{sha}:{path}")
                if parse_problem(path, text):
                    return False
    return True


def test_a_block_ending_in_a_file_tag_is_written_without_it(tmp_path):
    root = make_repo(tmp_path / "r", {"special.py": MODULE})
    reply = "special.py\n```python\n" + MODULE.replace('"_"', '"-"') + "</file>\n```\n"
    events = _send(root, ScriptedModel([reply, "Done."]), "Fix slugify: use '-'.")
    text = (root / "special.py").read_text()
    assert "</file>" not in text and '"-"' in text
    assert events[-1].stop_reason == "answered" and _commits_parse(root)


def test_a_broken_block_is_never_written_nor_committed_and_the_run_says_so(tmp_path):
    root = make_repo(tmp_path / "r", {"special.py": MODULE})
    head = git(root, "rev-parse", "HEAD")
    broken = MODULE.replace("def slugify(text):", "def slugify(text:")
    model = ScriptedModel([f"special.py\n```python\n{broken}```\n"] * 3 + ["Done."])
    events = _send(root, model, "Fix slugify.")
    assert (root / "special.py").read_text() == MODULE
    assert git(root, "rev-parse", "HEAD") == head
    result = events[-1]
    assert isinstance(result, AgentResult) and result.is_error
    assert result.stop_reason == "edit_failed" and "does not parse" in result.error
    # the model was told why
    assert any("does not parse" in m["content"] for m in model.seen[1] if m["role"] == "user")


def test_a_dropping_rewrite_through_write_file_keeps_the_data(tmp_path):
    root = make_repo(tmp_path / "r", {"special.py": MODULE})
    model = ScriptedModel([call("write_file", path="special.py", content=REWRITE), "Done."])
    events = _send(root, model, "Fix the separator in slugify.", edit_format="tool")
    text = (root / "special.py").read_text()
    assert left_out(MODULE, text) == [] and '"-"' in text
    assert any(isinstance(e, Warning) and "kept them" in e.message for e in events)
    assert _commits_parse(root)


def test_an_edit_file_call_that_breaks_the_file_is_undone(tmp_path):
    root = make_repo(tmp_path / "r", {"special.py": MODULE})
    edit = call("edit_file", path="special.py",
                edits=[{"old": "def slugify(text):", "new": "def slugify(text:"}])
    events = _send(root, ScriptedModel([edit, "Done."]), "Fix slugify.", edit_format="tool")
    assert (root / "special.py").read_text() == MODULE
    assert events[-1].stop_reason == "edit_failed" and _commits_parse(root)


@pytest.mark.parametrize("text,wants", [
    ("Fix the bug in slugify.", True), ("Can you add a docstring to f?", True),
    ("What does slugify do?", False), ("Explain the module.", False),
    ("Fix nothing, just explain why it fails.", False), ("Why does the test fail?", False),
    ("Rename foo to bar", True), ("Please make the tests pass", True),
    ("Fix the bug but do not change the tests", True), ("Fix calc.py; do not commit", True),
    ("Explain what sub does; do not change calc.py", False), ("Do not change any file.", False),
    ("Explain it. Change nothing.", False)])
def test_asks_edit(text, wants):
    assert asks_edit(text) is wants


def test_verdict_order():
    w = Work()
    assert verdict("Fix it.", w)[0] == "no_change"
    w.edit_failed("a.py", "refused")
    assert verdict("Fix it.", w)[0] == "edit_failed"
    w.checked("test", False)
    assert verdict("Fix it.", w)[0] == "checks_failed"
    w.checked("test", True)
    w.edit_applied(["a.py"])
    assert verdict("Fix it.", w) == ("answered", "")
    assert verdict("What is it?", Work()) == ("answered", "")


@pytest.mark.parametrize("intent", ["What does GERMAN hold?", "Do not remove GERMAN; fix slugify",
                                    "Keep GERMAN and rename add_uppercase"])
def test_a_name_only_mentioned_or_kept_does_not_go(intent):
    assert "GERMAN" in vet("special.py", MODULE, REWRITE, intent).kept

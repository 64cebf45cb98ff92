"""The lint-and-test loop inside a message (agent/core/checks.py), with a scripted model."""

from __future__ import annotations

import pytest

from agent.config import ConfigError, load_config
from agent.core.checks import syntax
from agent.events import AgentResult, CheckRun, Warning
from agent.ui.render import check_line
from scripted import ScriptedModel, call, conversation, full_auto, git_repo  # noqa: F401

BROKEN = "calc.py\n```python\ndef add(a, b):\n    return a +\n```\n"
STUB_FREE = "calc.py\n```python\ndef add(a, b):\n    return a - b\n```\n"  # (no check fails)
FIXED = "calc.py\n```python\ndef add(a, b):\n    return a + b\n```\n"


def _run(conv, text="fix calc.py"):
    """(the checks except ruff's, which runs only where ruff is installed; the result)"""
    events = list(conv.send(text))
    return [e for e in events if isinstance(e, CheckRun) and e.kind != "ruff"], events[-1]


def test_a_syntax_error_is_never_written_it_goes_back_and_the_fix_is_checked(git_repo):
    before = (git_repo / "calc.py").read_text()
    mul = before + "\n\ndef mul(a, b):\n    return a * b\n"
    model = ScriptedModel([f"calc.py\n```python\n{mul.replace('a * b', 'a *')}```\n",
                           f"calc.py\n```python\n{mul}```\n"])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    events = list(conv.send("add mul to calc.py"))
    checks, result = [e for e in events if isinstance(e, CheckRun) and e.kind != "ruff"], events[-1]
    assert [(c.kind, c.ok, c.round) for c in checks] == [("syntax", True, 2)]
    warned = [e.message for e in events if isinstance(e, Warning)]
    assert any("calc.py does not parse (line 10" in w and "not applied" in w for w in warned)
    fed = model.seen[1][-1]
    assert fed["role"] == "user" and "does not parse" in fed["content"]
    assert isinstance(result, AgentResult) and result.stop_reason == "answered"
    assert (git_repo / "calc.py").read_text() == mul


def test_fix_rounds_are_bounded(git_repo):
    model = ScriptedModel([BROKEN.replace("+", "+" * k) for k in range(1, 6)])  # each a change
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off",
                                                   max_fix_rounds=2))
    checks, result = _run(conv)
    assert checks == [] and len(model.seen) == 3  # each refused (it does not parse), 2 told
    assert result.stop_reason == "edit_failed" and result.is_error


def test_the_loop_can_be_off(git_repo):
    for cfg in (full_auto(edit_format="whole", max_fix_rounds=0),
                full_auto(edit_format="whole", auto_lint=False)):
        (git_repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        model = ScriptedModel([STUB_FREE])
        checks, _ = _run(conversation(git_repo, model, cfg))
        assert checks == [] and len(model.seen) == 1


def test_no_edit_no_check(git_repo):
    checks, _ = _run(conversation(git_repo, ScriptedModel(["Nothing to change."]), full_auto()))
    assert checks == []


def test_test_cmd_failure_goes_back_through_the_shell_tool(git_repo):
    fix = call("write_file", path="calc.py", content="def add(a, b):\n    return a + b\n")
    model = ScriptedModel([fix, "Done.", "Still done."])
    cfg = full_auto(edit_format="tool", sandbox="off",
                    test_cmd="python -c \"import calc; assert calc.add(2, 2) == 5, 'add is wrong'\"",
                    max_fix_rounds=1)
    checks, result = _run(conversation(git_repo, model, cfg))
    assert [(c.kind, c.ok) for c in checks] == [("syntax", True), ("test", False)]
    assert "add is wrong" in checks[1].output and checks[1].fed_back
    assert "The tests failed" in model.seen[2][-1]["content"]
    assert "FAILED" in check_line(checks[1]) and "ok" in check_line(checks[0])


def test_lint_cmd_gets_the_edited_files(git_repo):
    fix = call("write_file", path="calc.py", content="x = 1\n")
    model = ScriptedModel([fix, "Done."])
    cfg = full_auto(edit_format="tool", sandbox="off", lint_cmd="test -f")
    checks, _ = _run(conversation(git_repo, model, cfg))
    assert [(c.kind, c.ok, c.command) for c in checks][-1] == ("lint", True, "test -f calc.py")


def test_syntax_check_runs_nothing(tmp_path):
    (tmp_path / "boom.py").write_text("open('ran', 'w').write('x')\n")
    assert syntax(["boom.py"], tmp_path).ok and not (tmp_path / "ran").exists()


def test_a_repository_cannot_set_the_commands(tmp_path):
    (tmp_path / ".specrc").write_text('test_cmd = "rm -rf ~"\n')
    with pytest.raises(ConfigError):
        load_config(tmp_path, {})


def test_ruff_finds_an_undefined_name(tmp_path):
    from agent.core.checks import ruff

    (tmp_path / "a.py").write_text("def f(s):\n    return re.sub('x', '', s)\n")
    out = ruff(["a.py"], tmp_path)
    if out is None:
        pytest.skip("ruff is not installed")
    assert not out.ok and "F821" in out.output and "re" in out.output
    (tmp_path / "a.py").write_text("import re\n\n\ndef f(s):\n    return re.sub('x', '', s)\n")
    assert ruff(["a.py"], tmp_path).ok


# ---- names other files import (core/pynames.py) ------------------------------------------------

def test_a_fragment_that_drops_imported_functions_goes_back(git_repo):
    """A reply that replaces calc.py with a snippet compiles and lints clean; the test file
    beside it (ignored by git, as tests a harness keeps out of view) imports what it dropped."""
    (git_repo / ".git" / "info" / "exclude").write_text("/calc_test.py\n")
    (git_repo / "calc_test.py").write_text("from calc import add, sub\n")
    fragment = "calc.py\n```python\ndef mul(a, b):\n    return a * b\n```\n"
    whole = ("calc.py\n```python\ndef add(a, b):\n    return a + b\n\n\n"
             "def sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n```\n")
    model = ScriptedModel([fragment, whole])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    # (a message that may want definitions gone: the rewrite is taken as it is, core/pymerge.py)
    checks, result = _run(conv, "replace calc.py's functions add and sub with mul")
    assert [(c.kind, c.ok, c.fed_back) for c in checks] == [("syntax", True, False),
                                                            ("names", False, True),
                                                            ("syntax", True, False)]
    fed = model.seen[1][-1]["content"]
    assert "calc.py does not define `add`, `sub`, which calc_test.py imports from it" in fed
    assert "```" not in fed and "whole corrected file" in fed
    assert result.stop_reason == "answered" and "def mul" in (git_repo / "calc.py").read_text()


def test_a_rewrite_that_leaves_definitions_out_keeps_them_unless_asked(git_repo):
    """Where the message asks for nothing to go, the functions a rewrite leaves out are put
    back, so nothing breaks and nothing goes back to the model."""
    before = (git_repo / "calc.py").read_text()
    fragment = "calc.py\n```python\ndef mul(a, b):\n    return a * b\n```\n"
    model = ScriptedModel([fragment])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    events = list(conv.send("add mul to calc.py"))
    assert (git_repo / "calc.py").read_text() == before + "\n\ndef mul(a, b):\n    return a * b\n"
    assert any(isinstance(e, Warning) and "leaves out add, sub" in e.message for e in events)
    assert not [e for e in events if isinstance(e, CheckRun) and not e.ok]
    assert events[-1].stop_reason == "answered" and len(model.seen) == 1


def test_a_statement_written_as_the_module_is_refused_and_goes_back(git_repo):
    """A block with no definition at all for a module that has some (an example statement
    from the instructions copied as the file) is never written; the model is told why."""
    before = (git_repo / "calc.py").read_text()
    fragment = "calc.py\n```python\nraise ValueError('bad input')\n```\n"
    model = ScriptedModel([fragment, "Done."])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    checks, result = _run(conv)
    assert (git_repo / "calc.py").read_text() == before and checks == []
    fed = model.seen[1][-1]["content"]
    assert "defines none of the file's functions and classes" in fed and "not saved" in fed


def test_missing_names_resolution(tmp_path):
    from agent.core.pynames import missing_names

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text(
        "import os\nif os.name:\n    A = 1\nelse:\n    A = 2\ntry:\n    from json import loads\n"
        "except ImportError:\n    loads = None\nB, (C, *D) = 1, (2, 3)\n\n\ndef f():\n"
        "    global G\n    G = 1\n")
    (tmp_path / "pkg" / "user.py").write_text(
        "from .mod import A, loads, B, C, D, G, gone\nfrom . import mod as m\n"
        "import pkg.mod as pm\n\n\ndef g():\n    return m.A + pm.f() + pm.lost\n")
    (tmp_path / "other.py").write_text("from pkg.mod import A, f\nfrom mod import nothere\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "x.py").write_text("from pkg.mod import hidden\n")
    found = {m.importer: m.names for m in missing_names(tmp_path, "pkg/mod.py")}
    assert found == {"pkg/user.py": ("gone", "lost")}  # `from mod` in other.py is another module
    (tmp_path / "pkg" / "mod.py").write_text("from os.path import *\n")
    assert missing_names(tmp_path, "pkg/mod.py") == []  # a star import: unknowable
    (tmp_path / "pkg" / "mod.py").write_text("def __getattr__(name):\n    return 1\n")
    assert missing_names(tmp_path, "pkg/mod.py") == []
    (tmp_path / "pkg" / "sub.py").write_text("")
    (tmp_path / "top.py").write_text("from pkg import sub, absent\n")
    assert [m.names for m in missing_names(tmp_path, "pkg/__init__.py")] == [("absent",)]


def test_a_snippet_that_is_not_applied_goes_back_unless_it_quotes(git_repo):
    long = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(6))
    (git_repo / "big.py").write_text(long)
    snippet = "big.py\n```python\ndef f9():\n    return 9\n```\n"
    whole = "big.py\n```python\n" + long + "def f9():\n    return 9\n```\n"
    model = ScriptedModel([snippet, whole])
    result = list(conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
                  .send("add f9 to big.py"))[-1]
    fed = model.seen[1][-1]["content"]
    assert "was not saved" in fed and "big.py has 3 of the file's 25 lines" in fed
    assert result.stop_reason == "answered" and "def f9" in (git_repo / "big.py").read_text()
    quote = "big.py\n```python\ndef f3():\n    return 3\n```\nf3 returns 3."
    model = ScriptedModel([quote])
    result = list(conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
                  .send("what does f3 in big.py return?"))[-1]
    assert len(model.seen) == 1 and result.stop_reason == "answered"


def test_feedback_names_the_lines_and_is_not_fenced(tmp_path):
    from agent.core.checks import Outcome, feedback

    (tmp_path / "a.py").write_text("def f():\n    return n\n")
    out = Outcome("ruff", "ruff check a.py", False, "a.py:2:12: F821 Undefined name `n`")
    text = feedback(out, tmp_path, whole_files=True)
    assert "a.py:2:     return n" in text and "```" not in text
    assert text.endswith("whole corrected file in one code block.")
    assert feedback(out, tmp_path).endswith("Fix the code.")


def test_a_file_written_out_again_unchanged_is_pointed_out_once(git_repo):
    """A model told its code fails that writes the same file out again changed nothing; a
    first quote of a file (an answer about it) is not pointed out."""
    same = "calc.py\n```python\n" + (git_repo / "calc.py").read_text() + "```\n"
    changed = same.replace("a - b", "b - a")
    model = ScriptedModel([same, "Here it is, fixed:\n" + same, changed])
    cfg = full_auto(edit_format="whole", sandbox="off", resample_temperature=0.7)
    conv = conversation(git_repo, model, cfg)
    assert list(conv.send("show calc.py"))[-1].stop_reason == "answered" and len(model.seen) == 1
    events = list(conv.send("sub is wrong: fix it"))
    # its code repeats the first reply's, so the repeat is what is pointed out (once)
    assert "the same as in your earlier reply" in model.seen[2][-1]["content"]
    assert events[-1].stop_reason == "answered" and "b - a" in (git_repo / "calc.py").read_text()
    same = changed
    model = ScriptedModel([same, same, same, "It needs no change."])
    conv = conversation(git_repo, model, cfg)
    list(conv.send("show calc.py"))
    events = list(conv.send("is sub right?"))
    assert len(model.seen) == 3 and events[-1].stop_reason == "answered"  # once a message
    model = ScriptedModel([same, same, "x"])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    list(conv.send("show calc.py"))
    list(conv.send("is sub right?"))
    assert len(model.seen) == 2  # off with resampling off (the default)


def test_an_edit_that_drops_imported_constants_hears_of_both_checks(git_repo):
    """A rewrite that drops the module's constants fails ruff (undefined names in it) and
    leaves another file's import of them broken: the model is told both in one message, and
    that the names belong at the module's top level."""
    (git_repo / ".git" / "info" / "exclude").write_text("/kinds_test.py\n")
    (git_repo / "kinds.py").write_text("EQUAL = 1\nUNEQUAL = 2\n\n\ndef kind(a, b):\n    pass\n")
    (git_repo / "kinds_test.py").write_text("from kinds import EQUAL, UNEQUAL, kind\n")
    dropped = ("kinds.py\n```python\ndef kind(a, b):\n    return EQUAL if a == b else UNEQUAL\n"
               "```\n")
    fixed = ("kinds.py\n```python\nEQUAL = 1\nUNEQUAL = 2\n\n\ndef kind(a, b):\n"
             "    return EQUAL if a == b else UNEQUAL\n```\n")
    model = ScriptedModel([dropped, fixed])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    # ("rewrite": the message may want definitions gone, so the rewrite is taken as it is)
    events = list(conv.send("rewrite kinds.py so that kind works without EQUAL and UNEQUAL"))
    checks, result = [e for e in events if isinstance(e, CheckRun)], events[-1]
    if not any(c.kind == "ruff" for c in checks):
        pytest.skip("ruff is not installed")
    first = next(c for c in checks if not c.ok)
    assert first.kind == "ruff" and "kinds_test.py imports from it" in first.output
    fed = model.seen[1][-1]["content"]
    assert "Undefined name `EQUAL`" in fed
    assert "kinds.py does not define `EQUAL`, `UNEQUAL`, which kinds_test.py imports from it" in fed
    assert "top level of the module" in fed
    # the importer is kept out of git's view (as tests the agent is not shown): not attached
    assert '<file path="kinds_test.py">' not in fed and "rename or remove" not in fed
    assert result.stop_reason == "answered" and "EQUAL = 1" in (git_repo / "kinds.py").read_text()


def test_a_rename_that_breaks_an_importer_is_sent_back_with_the_importer_attached(git_repo):
    """A rename written into one file leaves another file's import of the old name broken:
    the failure goes back with that file attached whole, so the model can carry the rename
    into it (or keep the name, when the message asked for no rename)."""
    import subprocess

    (git_repo / "shapes.py").write_text("def area(w, h):\n    return w * h\n")
    main = "from shapes import area\n\n\ndef describe(w, h):\n    return area(w, h)\n"
    (git_repo / "main.py").write_text(main)
    subprocess.run(["git", "add", "shapes.py", "main.py"], cwd=git_repo, check=True)
    renamed = "shapes.py\n```python\ndef rect_area(w, h):\n    return w * h\n```\n"
    carried = "main.py\n```python\n" + main.replace("area", "rect_area") + "```\n"
    model = ScriptedModel([renamed, carried])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    checks, result = _run(conv, "Rename the function area to rect_area in shapes.py")
    assert [(c.kind, c.ok) for c in checks if c.kind == "names"] == [("names", False)]
    fed = model.seen[1][-1]["content"]
    assert "shapes.py does not define `area`, which main.py imports from it" in fed
    assert "rename or remove these names, change the files that import them as well (main.py" in fed
    assert fed.endswith('Attached files:\n<file path="main.py">\n' + main + "\n</file>")
    assert "for each file you change" in fed
    assert result.stop_reason == "answered"
    assert (git_repo / "main.py").read_text() == main.replace("area", "rect_area")


STUB = "calc.py\n```python\ndef add(a, b):\n    # your code here\n    ...\n```\n"


def test_a_reply_that_implements_nothing_goes_back_as_a_stubs_failure(git_repo):
    # (add is to be written: a stub for an implemented add would get the file's back, core/pymerge.py)
    (git_repo / "calc.py").write_text("def add(a, b):\n    pass\n\n\ndef sub(a, b):\n    return a - b\n")
    model = ScriptedModel([STUB, FIXED])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    checks, result = _run(conv, "implement add in calc.py")
    stub = [c for c in checks if c.kind == "stubs"]
    assert [(c.ok, c.round, c.fed_back) for c in stub] == [(False, 1, True)]
    assert "calc.py:1: `add` has no implementation" in stub[0].output
    fed = model.seen[1][-1]["content"]
    assert "leaves functions unimplemented" in fed and "`add`" in fed
    # (sub, which the replies leave out, is kept: core/pymerge.py)
    assert (git_repo / "calc.py").read_text() == ("def add(a, b):\n    return a + b\n\n\n"
                                                  "def sub(a, b):\n    return a - b\n")


def test_the_stubs_check_spares_what_the_message_did_not_ask_for(tmp_path):
    from agent.core.checks import stubs

    (tmp_path / "m.py").write_text(
        "import abc\n\n"
        "def done(x):\n    return x\n\n"
        "def later(x):\n    '''not yet'''\n    raise NotImplementedError\n\n"
        "class Base(abc.ABC):\n    def run(self):\n        ...\n\n"
        "class Shape:\n    @abc.abstractmethod\n    def area(self):\n        pass\n")
    # The file implements something: a placeholder fails only where the message names it.
    assert stubs(["m.py"], tmp_path, "fix done").ok
    out = stubs(["m.py"], tmp_path, "write later so that it doubles x")
    assert not out.ok and out.output == ("m.py:6: `later` has no implementation (its body "
                                         "is only a placeholder)")
    (tmp_path / "s.py").write_text("class Account:\n    def __init__(self):\n        pass\n\n"
                                   "    def open(self):\n        pass\n")
    out = stubs(["s.py"], tmp_path, "a bank account")
    assert not out.ok and "`Account.__init__`" in out.output and "`Account.open`" in out.output
    # Asked for stubs: not a failure.
    assert stubs(["s.py"], tmp_path, "add stubs for the Account methods").ok
    assert stubs(["s.py"], tmp_path, "Write an Account class; don't implement it yet").ok
    assert stubs(["s.py"], tmp_path, "give Account an open method that does nothing").ok


def test_importers_attached_are_capped_in_number_and_size(git_repo):
    """A names failure attaches at most MAX_IMPORTERS files and MAX_IMPORTER_CHARS characters
    of them; a file over the size left is skipped (not cut), a later smaller one still fits."""
    import subprocess

    from agent.core import checks
    from tools import ToolContext

    names = [f"use{i}.py" for i in range(checks.MAX_IMPORTERS + 2)]
    for name in names:
        (git_repo / name).write_text("from shapes import area\n")
    big = "from shapes import area\n" + "#" * checks.MAX_IMPORTER_CHARS + "\n"
    (git_repo / "big.py").write_text(big)
    subprocess.run(["git", "add", *names, "big.py"], cwd=git_repo, check=True)
    ctx = ToolContext(git_repo, sandbox="off")
    out = checks.Outcome("names", "", False, "x", importers=("big.py", *names))
    texts = checks.importer_texts(out, ctx)
    assert list(texts) == names[: checks.MAX_IMPORTERS]  # big.py skipped, the cap reached
    assert sum(map(len, texts.values())) <= checks.MAX_IMPORTER_CHARS
    assert checks.importer_texts(checks.Outcome("names", "", True, ""), ctx) == {}


class Leading(ScriptedModel):
    """A scripted model that can begin a reply with given text (as LocalModel does): the
    scripted turn is then what the model writes after it."""

    leads = True

    def __init__(self, turns):
        super().__init__(turns)
        self.leads_seen: list[str] = []

    def generate(self, messages, cancel=None, lead="", sampling=None):
        self.leads_seen.append(lead)
        if lead:
            from agent.events import TextDelta

            yield TextDelta(lead, ())
        # (a sampling model beneath, test_resample.Sampled, takes sampling= too)
        yield from super().generate(messages, cancel, **({"sampling": sampling} if sampling else {}))


STATEMENT = "calc.py\n```python\nraise ValueError('bad input')\n```\n"  # an example copied as the file
LEAD = "calc.py\n```python\ndef add(a, b):"  # the path, a fence, the file's first line
REST = "\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n```\nAdded mul."


def led(**kw):
    """Whole files, no sandbox, `lead_refused` on (it is off by default) unless `kw` says."""
    return full_auto(**{"edit_format": "whole", "sandbox": "off", "lead_refused": True, **kw})


def test_a_refused_snippet_is_answered_by_a_reply_that_begins_the_file(git_repo):
    """A block refused as a part of the file (a statement copied from the message) is
    answered by a reply that begins with the file's path, a fence and its first line; what
    the model writes after it completes the file, applied and checked as any reply's."""
    model = Leading([STATEMENT, REST])
    conv = conversation(git_repo, model, led())
    events = list(conv.send("add mul to calc.py"))
    assert model.leads_seen == ["", LEAD]
    assert "defines none of the file's functions" in model.seen[1][-1]["content"]  # told why too
    assert any(isinstance(e, Warning) and "lead_refused" in e.message for e in events)
    assert "def mul(a, b):\n    return a * b\n" in (git_repo / "calc.py").read_text()
    assert conv.messages[-1] == {"role": "assistant", "content": LEAD + REST}
    assert events[-1].stop_reason == "answered"


def test_a_lead_only_where_it_can_help(git_repo):
    """No lead with the knob off, for a model that cannot begin a reply, where the reply's
    refused blocks are for two files, or once fix rounds are spent; the refusal goes back
    as before."""
    (git_repo / "util.py").write_text("def one():\n    return 1\n")
    two = STATEMENT + "util.py\n```python\nprint(1)\n```\n"
    cases = [(dict(lead_refused=False), STATEMENT), (dict(), two),
             (dict(max_fix_rounds=0), STATEMENT)]
    for kw, first in cases:
        model = Leading([first, "Done."])
        cfg = led(fix_mode="repair", **kw)
        list(conversation(git_repo, model, cfg).send("add mul to calc.py"))
        assert model.leads_seen == (["", ""] if kw.get("max_fix_rounds") != 0 else [""]), kw
    model = Leading([STATEMENT, "Done."])  # off by default
    cfg = full_auto(edit_format="whole", sandbox="off", fix_mode="repair")
    list(conversation(git_repo, model, cfg).send("add mul to calc.py"))
    assert model.leads_seen == ["", ""]
    model = ScriptedModel([STATEMENT, "Done."])  # no `leads`: called as before
    cfg = led(fix_mode="repair")
    list(conversation(git_repo, model, cfg).send("add mul to calc.py"))
    assert "not saved" in model.seen[1][-1]["content"]


def test_a_lead_is_used_once_and_a_refused_led_reply_is_led_again_while_rounds_last(git_repo):
    long = "# numbers\n" + "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(6))
    (git_repo / "big.py").write_text(long)
    snippet = "big.py\n```python\nf9()\n```\n"
    lead = "big.py\n```python\n# numbers"
    short = "\ndef f9():\n    return 9\n```\n"  # 3 of 26 lines: refused again
    whole = long.removeprefix("# numbers") + "def f9():\n    return 9\n```\n"
    model = Leading([snippet, short, whole])
    conv = conversation(git_repo, model, led(max_fix_rounds=2))
    events = list(conv.send("add f9 to big.py"))
    assert model.leads_seen == ["", lead, lead]
    assert (git_repo / "big.py").read_text() == long + "def f9():\n    return 9\n"
    assert events[-1].stop_reason == "answered"
    model = Leading([snippet, short, whole])
    conv = conversation(git_repo, model, led(max_fix_rounds=1))
    list(conv.send("add f10 to big.py"))
    assert model.leads_seen == ["", lead]  # the one round is spent


def test_lead_names_the_fence_language():
    from agent.core.wholefile import lead

    assert lead("src/a.py") == "src/a.py\n```python\n"
    assert lead("conf.json") == "conf.json\n```json\n"
    assert lead("notes.xyz") == "notes.xyz\n```\n"


def test_lead_goes_on_from_the_files_first_line(tmp_path):
    from agent.core.wholefile import lead, leads_to

    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.py").write_text("\n\nimport os\n\nX = 1\n")
    (root / "b.md").write_text("```\ncode\n```\n")
    (root / "long.py").write_text("X = '" + "x" * 300 + "'\n")
    (tmp_path / "x.py").write_text("SECRET = 1\n")  # outside the repository
    (root / "link.py").symlink_to(tmp_path / "x.py")
    assert lead("a.py", root) == "a.py\n```python\nimport os"  # no newline: the model's
    assert lead("b.md", root) == "b.md\n```markdown\n"  # a fence would close the block
    assert lead("long.py", root) == "long.py\n```python\n"  # a long line is the model's
    for where in ("new.py", "../x.py", "link.py", str(tmp_path / "x.py")):
        assert "SECRET" not in lead(where, root) and lead(where, root).endswith("```python\n")
    assert leads_to("src/a.py") and not leads_to("my file.py")  # a path with a space



def test_a_led_reply_sampled_again_begins_the_same_way(git_repo):
    """With resample_temperature on, a led reply whose code repeats an earlier reply's is
    sampled again, and the new sample is led too."""
    from test_resample import Sampled

    class LeadingSampled(Leading, Sampled):
        """Leading's lead, then Sampled's reply (it takes sampling= per call)."""

    model = LeadingSampled([LEAD.removeprefix("calc.py\n```python\n").join(["calc.py\n```python\n", REST]),
                            STATEMENT, REST, REST.replace("a * b", "b * a")])
    cfg = led(resample_temperature=0.7)
    conv = conversation(git_repo, model, cfg)
    list(conv.send("add mul to calc.py"))  # the first message writes the file with mul
    events = list(conv.send("make mul return b * a in calc.py"))
    assert model.leads_seen == ["", "", LEAD, LEAD]
    assert any(isinstance(e, Warning) and "sampling it again" in e.message for e in events)
    assert "return b * a" in (git_repo / "calc.py").read_text()


def test_a_lead_is_for_one_reply(git_repo):
    """The led reply is vetted like any other; when it is refused (it does not parse), the
    reply to that is not led."""
    model = Leading([STATEMENT, "\n    return a +\n```\n", "calc.py\n```python\ndef add(a, b):" + REST])
    conv = conversation(git_repo, model, led())
    events = list(conv.send("add mul to calc.py"))
    assert model.leads_seen == ["", LEAD, ""]
    assert any(isinstance(e, Warning) and "does not parse" in e.message for e in events)
    assert [c.kind for c in events if isinstance(c, CheckRun)][:1] == ["syntax"]
    assert "def mul(a, b):\n    return a * b\n" in (git_repo / "calc.py").read_text()
    assert events[-1].stop_reason == "answered"


def test_no_lead_from_a_refusal_the_nudge_answered(git_repo):
    """A reply that repeats an earlier one's code is nudged; a block of it that was refused
    does not lead the reply after the nudge's answer."""
    long = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(6))
    (git_repo / "big.py").write_text(long)
    snippet = "big.py\n```python\ndef f9():\n    return 9\n```\n"
    whole = "big.py\n```python\n" + long + "def f9():\n    return 9\n```\n"
    model = Leading([snippet, "Done.", snippet, whole, "Done."])
    cfg = led(resample_temperature=0.7)
    conv = conversation(git_repo, model, cfg)
    list(conv.send("add f9 to big.py"))  # snippet refused, then led (the led reply: "Done.")
    events = list(conv.send("add f9 to big.py, really"))  # the same snippet again: nudged
    assert any(isinstance(e, Warning) and "repeats an earlier" in e.message for e in events)
    assert model.leads_seen[2:] == ["", ""]  # after the nudge, the whole file: no lead
    assert "def f9" in (git_repo / "big.py").read_text()


def test_where_fix_mode_resamples_the_led_reply_is_a_fresh_sample(git_repo):
    """fix_mode auto with whole files (resample): the led reply reads the message alone, as a
    fresh sample does, at the fresh temperature; with fix_mode repair it reads the refusal."""
    from test_resample import Sampled

    class LeadingSampled(Leading, Sampled):
        """Leading's lead, then Sampled's reply (its temperature recorded)."""

    model = LeadingSampled([STATEMENT, REST])
    conv = conversation(git_repo, model, led())
    list(conv.send("add mul to calc.py"))
    assert model.leads_seen == ["", LEAD] and model.temps == [0.0, 0.7]
    assert model.seen[1] == model.seen[0]  # the message alone
    assert "def mul" in (git_repo / "calc.py").read_text()
    model = LeadingSampled([STATEMENT, REST.replace("a * b", "b * a")])
    conv = conversation(git_repo, model, led(fix_mode="repair"))
    list(conv.send("make mul return b * a"))
    assert model.leads_seen == ["", LEAD] and model.temps == [0.0, 0.0]
    assert "not saved" in model.seen[1][-1]["content"]

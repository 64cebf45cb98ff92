"""The "diff" edit format (search/replace blocks in a reply, core/searchreplace.py) and the
"auto" format that picks whole files or search/replace blocks by the file's size."""

from __future__ import annotations

import subprocess

from scripted import ScriptedModel, conversation, full_auto, git_repo  # noqa: F401

from agent.config import Config
from agent.core.searchreplace import AUTO_LINES, Edit, apply_edits, apply_one, parse_edits
from agent.events import AgentResult, GitAction, ToolCallFinished, Warning

CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


def sr(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


def fenced(path_line: str, *pairs: str, info: str = "python") -> str:
    return f"{path_line}\n```{info}\n" + "".join(pairs) + "```\n"


def commit(root, name: str, text: str) -> None:
    (root / name).write_text(text)
    subprocess.run(["git", "add", name], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", name], cwd=root, check=True)


# ---- parsing -----------------------------------------------------------------------------

def test_one_and_several_pairs_per_fence_and_several_fences():
    one = fenced("calc.py", sr("x\n", "y\n"))
    assert parse_edits(one) == ([Edit("calc.py", "x\n", "y\n")], [])
    two = fenced("calc.py", sr("a\n", "b\n"), sr("c\n", ""))
    assert parse_edits(two)[0] == [Edit("calc.py", "a\n", "b\n"), Edit("calc.py", "c\n", "")]
    both = one + "\nAnd the other file:\n\n" + fenced("src/util.py", sr("u\n", "v\n"))
    assert [e.path for e in parse_edits(both)[0]] == ["calc.py", "src/util.py"]


def test_path_forms():
    pair = sr("x\n", "y\n")
    for line in ("calc.py", "`calc.py`", "**calc.py**", "calc.py:", "File: calc.py", "# calc.py"):
        assert [e.path for e in parse_edits(fenced(line, pair))[0]] == ["calc.py"], line
    assert [e.path for e in parse_edits(fenced("Here:", pair, info="python calc.py"))[0]] == ["calc.py"]
    inside = "```python\ncalc.py\n" + pair + "util.py\n" + pair + "```\n"  # path lines in the fence
    assert [e.path for e in parse_edits(inside)[0]] == ["calc.py", "util.py"]
    unnamed = "```python\n" + pair + "```\n"
    assert [e.path for e in parse_edits(unnamed, default="calc.py")[0]] == ["calc.py"]
    edits, problems = parse_edits(unnamed)
    assert edits == [] and "names no file" in problems[0]


def test_an_unclosed_fence_or_pair_is_never_applied():
    cut = "calc.py\n```python\n" + sr("x\n", "y\n")  # the fence never closes
    assert parse_edits(cut) == ([], [])
    no_end = "calc.py\n```python\n<<<<<<< SEARCH\nx\n=======\ny\n```\n"
    edits, problems = parse_edits(no_end)
    assert edits == [] and "not closed" in problems[0]
    no_divider = "calc.py\n```python\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE\n```\n"
    edits, problems = parse_edits(no_divider)
    assert edits == [] and "no =======" in problems[0]
    no_search = "calc.py\n```python\nx\n=======\ny\n>>>>>>> REPLACE\n```\n"
    edits, problems = parse_edits(no_search)
    assert edits == [] and "no <<<<<<< SEARCH" in problems[0]
    # in "auto", such a fence is never taken for the whole file either
    from agent.core.wholefile import parse_blocks
    from agent.core.searchreplace import is_edit_fence

    assert parse_blocks(no_search, skip=is_edit_fence) == []


# ---- matching ----------------------------------------------------------------------------

def apply(search: str, replace: str, text: str = CALC) -> tuple[str | None, str, str]:
    return apply_one(text, Edit("calc.py", search, replace))


def test_each_tolerance_level_in_order():
    want = CALC.replace("return a - b", "return b - a")
    assert apply("    return a - b\n", "    return b - a\n") == (want, "exact", "")
    assert apply("    return a - b  \n", "    return b - a\n") == (want, "trailing whitespace", "")
    # one indent too few throughout (the replacement gains it), then one too many
    indented = "class K:\n    def sub(self):\n        return 1\n"
    new, level, _ = apply("def sub(self):\n    return 1\n", "def sub(self):\n    return 2\n",
                          indented)
    assert (new, level) == ("class K:\n    def sub(self):\n        return 2\n", "indentation")
    new, level, _ = apply("            return 1\n", "            return 2\n", indented)  # too many
    assert (new, level) == ("class K:\n    def sub(self):\n        return 2\n", "indentation")
    new, level, _ = apply("def sub(a, b):\n\n    return a - b\n\n", "def sub(a, b):\n    return b - a\n\n")
    assert (new, level) == (want, "blank lines")
    clock = ("class Clock:\n    def __init__(self, hour, minute):\n        self.hour = hour\n"
             "        self.minute = minute\n\n    def __repr__(self):\n"
             "        return f'Clock({self.hour}, {self.minute})'\n")
    typo = ("def __init__(self, hour, minute):\n    self.hour = hour\n"
            "    self.minutes = minute\n")  # an "s" too many, and one indent too few
    new, level, _ = apply(typo, "def __init__(self, hour, minute):\n    self.hour = hour % 24\n"
                          "    self.minute = minute\n", clock)
    assert level == "fuzzy" and new == clock.replace("self.hour = hour\n", "self.hour = hour % 24\n")


def test_fuzzy_is_only_for_long_enough_unique_close_blocks():
    # a one-line near miss is never guessed at
    new, _, why = apply("    return a * b\n", "    return 0\n")
    assert new is None and "not in calc.py" in why
    # the same near-miss block alike to two places is refused
    twice = "def f():\n    x = 1\n    y = 2\n    return x + y\n\n\n" * 2
    new, _, why = apply("def f():\n    x = 1\n    y = 2\n    return x - y\n", "pass\n", twice)
    assert new is None and "2 places" in why


def test_a_non_unique_match_is_refused():
    text = "x = 1\ny = 2\nx = 1\n"
    new, _, why = apply("x = 1\n", "x = 3\n", text)
    assert new is None and "occur at 2 places" in why and "lines 1, 3" in why


def test_matching_is_by_whole_lines():
    new, _, _ = apply("return a\n", "return b\n")  # a part of "    return a + b"
    assert new is None


def test_a_miss_names_the_closest_lines():
    new, _, why = apply("def sub(a, b):\n    return a - c\n", "x\n")
    assert new is None and "closest text is at lines 5-6" in why and "    return a - b" in why
    assert "already in the file" not in why
    # a pair sent again after it was applied
    new, _, why = apply("    return a - c\n", "    return a - b\n")
    assert new is None and "Its REPLACE lines are already in the file" in why


# ---- in a conversation ---------------------------------------------------------------------

def test_a_diff_reply_is_applied_through_write_file_and_committed(git_repo):
    reply = fenced("calc.py", sr("    return a - b\n", "    return b - a\n"),
                   sr("def add(a, b):\n", 'def add(a, b):\n    """Sum."""\n')) + "Done."
    conv = conversation(git_repo, ScriptedModel([reply]), full_auto(edit_format="diff"))
    events = list(conv.send("swap sub and document add in calc.py"))
    assert (git_repo / "calc.py").read_text() == CALC.replace("return a - b", "return b - a") \
        .replace("def add(a, b):\n", 'def add(a, b):\n    """Sum."""\n')
    assert [(e.name, e.ok) for e in events if isinstance(e, ToolCallFinished)] == [("write_file", True)]
    assert any(isinstance(e, GitAction) and e.action == "commit" for e in events)
    assert events[-1].stop_reason == "answered"


def test_a_miss_goes_back_with_the_nearby_lines_and_then_is_fixed(git_repo):
    miss = fenced("calc.py", sr("def sub(a, b):\n    return a - c\n", "def sub(a, b):\n    return b - a\n"))
    fix = fenced("calc.py", sr("def sub(a, b):\n    return a - b\n", "def sub(a, b):\n    return b - a\n"))
    model = ScriptedModel([miss, fix, "Swapped."])
    conv = conversation(git_repo, model, full_auto(edit_format="diff", sandbox="off"))
    events = list(conv.send("swap sub in calc.py"))
    assert any(isinstance(e, Warning) and "not applied" in e.message for e in events)
    back = model.seen[1][-1]
    assert back["role"] == "user" and "not applied" in back["content"]
    assert "closest text is at lines 5-6" in back["content"] and "    return a - b" in back["content"]
    assert "SEARCH/REPLACE" in back["content"]
    assert (git_repo / "calc.py").read_text() == CALC.replace("return a - b", "return b - a")
    assert events[-1].stop_reason == "answered"


def test_misses_go_back_at_most_max_fix_rounds_times(git_repo):
    miss = fenced("calc.py", sr("nothing like it\n", "x\n"))
    model = ScriptedModel([miss] * 5)
    conv = conversation(git_repo, model, full_auto(edit_format="diff", max_fix_rounds=1))
    list(conv.send("change calc.py"))
    assert len(model.seen) == 2 and (git_repo / "calc.py").read_text() == CALC


def test_some_pairs_applied_the_others_reported(git_repo):
    reply = fenced("calc.py", sr("    return a - b\n", "    return b - a\n"), sr("no such line\n", "x\n"))
    model = ScriptedModel([reply, "ok"])
    list(conversation(git_repo, model, full_auto(edit_format="diff", sandbox="off")).send("edit calc.py"))
    assert (git_repo / "calc.py").read_text() == CALC.replace("return a - b", "return b - a")
    back = model.seen[1][-1]["content"]
    assert "block 2 for calc.py is not applied" in back and "The other 1 block(s) for calc.py were applied" in back


def test_an_empty_search_creates_a_new_file_only(git_repo):
    reply = fenced("pkg/new.py", sr("", "VALUE = 1\n"))
    conv = conversation(git_repo, ScriptedModel([reply]), full_auto(edit_format="diff"))
    list(conv.send("create pkg/new.py"))
    assert (git_repo / "pkg/new.py").read_text() == "VALUE = 1\n"
    [fe] = apply_edits([Edit("calc.py", "", "print(1)\n")], git_repo)
    assert fe.content is None and "SEARCH section is empty" in fe.problems[0]
    [fe] = apply_edits([Edit("missing.py", "x\n", "y\n")], git_repo)
    assert fe.content is None and "does not exist" in fe.problems[0]


def test_paths_outside_the_repository_are_refused(git_repo):
    for path in ("../outside.py", ".git/config", "/etc/passwd"):
        [fe] = apply_edits([Edit(path, "", "x = 1\n")], git_repo)
        assert fe.content is None and "not applied" in fe.problems[0], path
    reply = fenced("../outside.py", sr("", "x = 1\n"))
    conv = conversation(git_repo, ScriptedModel([reply]), full_auto(edit_format="diff"))
    events = list(conv.send("write ../outside.py"))
    assert not (git_repo.parent / "outside.py").exists()
    assert not any(isinstance(e, ToolCallFinished) for e in events)


def test_suggest_mode_asks_before_an_edit_is_written(git_repo):
    reply = fenced("calc.py", sr("    return a - b\n", "    return b - a\n"))
    conv = conversation(git_repo, ScriptedModel([reply]), Config(approval_mode="suggest", edit_format="diff"))
    events = list(conv.send("swap sub in calc.py"))
    assert isinstance(events[-1], AgentResult) and events[-1].stop_reason == "approval_required"
    assert (git_repo / "calc.py").read_text() == CALC


def test_diff_takes_whole_files_only_for_new_files(git_repo):
    whole = "calc.py\n```python\n" + CALC.replace("a - b", "b - a") + "```\n"
    model = ScriptedModel([whole, "ok"])
    list(conversation(git_repo, model, full_auto(edit_format="diff")).send("swap sub in calc.py"))
    assert (git_repo / "calc.py").read_text() == CALC
    assert "SEARCH/REPLACE" in model.seen[1][-1]["content"]
    new = "new.py\n```python\nx = 1\n```\n"
    list(conversation(git_repo, ScriptedModel([new]), full_auto(edit_format="diff")).send("new.py"))
    assert (git_repo / "new.py").read_text() == "x = 1\n"


def test_auto_accepts_both_kinds_and_states_the_size_rule(git_repo):
    from agent.core.prompt import system_prompt, tools_for

    big = "".join(f"v{i} = {i}\n" for i in range(AUTO_LINES + 20))
    commit(git_repo, "big.py", big)
    whole_small = "calc.py\n```python\n" + CALC.replace("a - b", "b - a") + "```\n"
    edit_big = fenced("big.py", sr("v7 = 7\n", "v7 = 70\n"))
    conv = conversation(git_repo, ScriptedModel([whole_small + "\n" + edit_big]),
                        full_auto(edit_format="auto"))
    list(conv.send("change both"))
    assert (git_repo / "calc.py").read_text() == CALC.replace("a - b", "b - a")
    assert (git_repo / "big.py").read_text() == big.replace("v7 = 7\n", "v7 = 70\n")
    prompt = system_prompt(git_repo, edit_format="auto")
    assert f"under {AUTO_LINES} lines" in prompt and "<<<<<<< SEARCH" in prompt
    assert "edit_file" not in tools_for("auto") and "edit_file" not in tools_for("diff")


def test_auto_refuses_whole_blocks_for_a_long_file(git_repo):
    big = "".join(f"v{i} = {i}\n" for i in range(AUTO_LINES + 20))
    commit(git_repo, "big.py", big)
    commit(git_repo, "small.py", "".join(f"s{i} = {i}\n" for i in range(20)))
    lines = big.replace("v1 = 1\n", "v1 = 10\n").splitlines(keepends=True)
    cut = "".join(lines[: AUTO_LINES])  # most of the file, cut short: not a snippet to judge()
    model = ScriptedModel(["big.py\n```python\nv1 = 10\n```\n", "ok",
                           "big.py\n```python\n" + cut + "```\n", "ok",
                           "small.py\n```python\ns1 = 10\n```\n", "ok"])
    conv = conversation(git_repo, model, full_auto(edit_format="auto"))
    list(conv.send("set v1 in big.py"))
    rule = f"change a file of {AUTO_LINES} lines or more with SEARCH/REPLACE"
    assert rule in model.seen[1][-1]["content"]
    list(conv.send("set v1 in big.py"))
    assert rule in model.seen[3][-1]["content"]
    assert (git_repo / "big.py").read_text() == big
    list(conv.send("set s1 in small.py"))
    assert "write the whole file to change it" in model.seen[5][-1]["content"]


def test_a_block_that_leaves_the_file_unparseable_is_never_applied(git_repo):
    from agent.events import CheckRun

    broken = fenced("calc.py", sr("    return a - b\n", "    return a -\n"))
    fixed = fenced("calc.py", sr("    return a - b\n", "    return (a - b)\n"))
    for fmt in ("diff", "auto"):
        (git_repo / "calc.py").write_text(CALC)
        model = ScriptedModel([broken, fixed, "ok"])
        events = list(conversation(git_repo, model, full_auto(edit_format=fmt, sandbox="off"))
                      .send("edit calc.py"))
        fed = model.seen[1][-1]["content"]
        assert "calc.py does not parse" in fed and "(line 6" in fed and "not applied" in fed, fmt
        assert [c.ok for c in events if isinstance(c, CheckRun) and c.kind == "syntax"] == [True]
        assert (git_repo / "calc.py").read_text() == CALC.replace("a - b", "(a - b)")
        assert events[-1].stop_reason == "answered"


def test_whole_and_tool_formats_do_not_apply_search_replace_blocks(git_repo):
    big = "".join(f"v{i} = {i}\n" for i in range(20))
    commit(git_repo, "big.py", big)
    reply = fenced("big.py", sr("v7 = 7\n", "v7 = 70\n"))
    for fmt in ("tool", "whole"):
        conv = conversation(git_repo, ScriptedModel([reply, "ok"]), full_auto(edit_format=fmt))
        events = list(conv.send("set v7 in big.py"))
        assert (git_repo / "big.py").read_text() == big, fmt
        assert not any(isinstance(e, ToolCallFinished) for e in events), fmt
        # "whole" judges the fence as a whole file, as before: a snippet of big.py
        assert any(isinstance(e, Warning) and "not applied" in e.message for e in events) == (fmt == "whole")


def test_auto_asks_for_search_replace_fixes_in_a_long_file(git_repo):
    big = "def f():\n    return 0\n" + "".join(f"v{i} = {i}\n" for i in range(AUTO_LINES))
    commit(git_repo, "big.py", big)
    broken = fenced("big.py", sr("    return 0\n", "    return 0 +\n"))
    model = ScriptedModel([broken, "ok"])
    list(conversation(git_repo, model, full_auto(edit_format="auto", sandbox="off")).send("edit big.py"))
    fed = model.seen[1][-1]["content"]
    assert "big.py does not parse" in fed and "whole corrected file" not in fed
    assert (git_repo / "big.py").read_text() == big


def test_a_search_in_another_attached_file_is_named_not_applied(git_repo):
    commit(git_repo, "test_calc.py", "from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n")
    wrong = fenced("test_calc.py", sr("def sub(a, b):\n    return a - b\n", "def sub(a, b):\n    return b - a\n"))
    model = ScriptedModel([wrong, "ok"])
    conv = conversation(git_repo, model, full_auto(edit_format="diff", attach_mentioned=True))
    list(conv.send("fix sub in calc.py; test_calc.py tests it"))
    back = model.seen[1][-1]["content"]
    assert "not in test_calc.py but in calc.py: put calc.py on the line before" in back
    assert (git_repo / "calc.py").read_text() == CALC
    # without the other file attached, only the miss is reported
    [fe] = apply_edits([Edit("test_calc.py", "def sub(a, b):\n", "x\n")], git_repo)
    assert "but in" not in fe.problems[0]


def test_a_pair_that_changes_nothing_goes_back(git_repo):
    same = fenced("calc.py", sr("    return a - b\n", "    return a - b\n"))
    model = ScriptedModel([same, "ok"])
    list(conversation(git_repo, model, full_auto(edit_format="diff")).send("fix sub in calc.py"))
    assert "so it changes nothing" in model.seen[1][-1]["content"]
    # ... and, for the wrong file, where its lines are
    commit(git_repo, "test_calc.py", "from calc import sub\n")
    wrong = Edit("test_calc.py", "    return a - b\n", "    return a - b\n")
    [fe] = apply_edits([wrong], git_repo, ["test_calc.py", "calc.py"])
    assert "but in calc.py" in fe.problems[0] and "changes nothing" in fe.problems[0]

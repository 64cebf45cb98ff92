"""The "whole" edit format (a reply with a file's path and all of its new text in a code
block) and files attached because a message names them."""

from __future__ import annotations

import subprocess

import pytest
from scripted import ScriptedModel, conversation, full_auto, git_repo  # noqa: F401

from agent.config import Config
from agent.core.pymerge import restore, splice
from agent.core.wholefile import FileBlock, judge, parse_blocks, prose
from agent.events import AgentResult, GitAction, ToolCallFinished, Warning

NEW_CALC = "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


def fenced(path_line: str, body: str, info: str = "python") -> str:
    return f"{path_line}\n```{info}\n{body}```\n"


def test_path_line_styles_and_fence_info_are_read():
    body = "x = 1\n"
    for line in ("calc.py", "`calc.py`", "**calc.py**", "calc.py:", "File: calc.py", "# calc.py"):
        assert parse_blocks("Here:\n" + fenced(line, body)) == [FileBlock("calc.py", body)], line
    assert parse_blocks("```python src/a.py\nx = 1\n```") == [FileBlock("src/a.py", body)]
    assert parse_blocks('<file path="a.txt">\nhello\n</file>') == [FileBlock("a.txt", "hello\n")]


def test_blocks_without_a_path_or_unclosed_are_not_files():
    assert parse_blocks("Some prose\n```python\nx = 1\n```") == []
    assert parse_blocks("calc.py\n```python\nx = 1\n") == []  # cut short: never applied
    assert parse_blocks("Updated code here:\n```\nx = 1\n```") == []  # not a path


def test_the_one_attached_file_is_the_default_for_a_single_unnamed_block():
    one = "```python\nx = 1\n```"
    assert parse_blocks(one, default="calc.py") == [FileBlock("calc.py", "x = 1\n")]
    assert parse_blocks(one + "\n" + one, default="calc.py") == []  # which one? neither


def test_judge_skips_quotes_refuses_snippets_and_paths_outside(git_repo):
    old = (git_repo / "calc.py").read_text()
    assert judge(FileBlock("calc.py", old), git_repo) == "same"
    assert judge(FileBlock("calc.py", NEW_CALC), git_repo) == ""
    assert judge(FileBlock("new_module.py", "y = 2\n"), git_repo) == ""
    big = "".join(f"line{i} = {i}\n" for i in range(20))
    (git_repo / "big.py").write_text(big)
    assert "not applied" in judge(FileBlock("big.py", "line1 = 1\nline2 = 2\n"), git_repo)
    assert judge(FileBlock("../outside.py", "z = 3\n"), git_repo) not in ("", "same")
    # A statement copied as the file would delete every definition of a short module.
    (git_repo / "prime.py").write_text("def prime(number):\n    pass\n")
    why = judge(FileBlock("prime.py", "raise ValueError('there is no zeroth prime')\n"), git_repo)
    assert "defines none" in why and "prime" in why
    assert judge(FileBlock("prime.py", "def prime(number):\n    return 2\n"), git_repo) == ""
    assert judge(FileBlock("prime.py", "class Prime:\n    pass\n"), git_repo) == ""
    (git_repo / "consts.py").write_text("X = 1\n")
    assert judge(FileBlock("consts.py", "X = 2\n"), git_repo) == ""  # no definitions to lose
    assert judge(FileBlock(".git/config", "[core]\n"), git_repo) not in ("", "same")
    # A shorter whole rewrite of a Python file (every top-level definition again) is applied;
    # a short block that leaves a definition out is a snippet.
    doc = '    """' + "\n    ".join(f"Line {i} of a long docstring." for i in range(12)) + '"""\n'
    (git_repo / "acr.py").write_text("import re\n\n\ndef abbreviate(words):\n" + doc
                                      + "    return words\n\n\nclass Helper:\n    pass\n")
    short = "def abbreviate(words):\n    return words[:1]\n\n\nclass Helper:\n    pass\n"
    assert judge(FileBlock("acr.py", short), git_repo) == ""
    assert "not applied" in judge(FileBlock("acr.py", "def abbreviate(words):\n    return 1\n"),
                                  git_repo)


def test_a_whole_file_reply_is_written_and_committed(git_repo):
    model = ScriptedModel([fenced("calc.py", NEW_CALC) + "Added a docstring to add."])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", attach_mentioned=True))
    events = list(conv.send("Add a docstring to add in calc.py"))
    assert (git_repo / "calc.py").read_text() == NEW_CALC
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert [(e.name, e.ok) for e in finished] == [("write_file", True)]
    assert any(isinstance(e, GitAction) and e.action == "commit" for e in events)
    assert events[-1].stop_reason == "answered" and not events[-1].is_error
    # the message carried calc.py's text, because it names the file
    assert '<file path="calc.py">\ndef add(a, b):' in model.seen[0][-1]["content"]
    log = subprocess.run(["git", "log", "--format=%s"], cwd=git_repo, capture_output=True,
                         text=True).stdout
    assert "Add a docstring to add in calc.py" in log.splitlines()[0]


def test_a_quote_a_snippet_and_the_tool_format_change_nothing(git_repo):
    before = (git_repo / "calc.py").read_text()
    big = "".join(f"v{i} = {i}\n" for i in range(20))
    (git_repo / "big.py").write_text(big)
    subprocess.run(["git", "add", "big.py"], cwd=git_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "big"], cwd=git_repo, check=True)
    quote = fenced("calc.py", before) + "It adds and subtracts."
    snippet = fenced("big.py", "v1 = 1\n")
    conv = conversation(git_repo, ScriptedModel([quote, snippet]), full_auto(edit_format="whole", attach_mentioned=True))
    first = list(conv.send("What does calc.py do?"))
    second = list(conv.send("Show v1 in big.py"))
    assert (git_repo / "calc.py").read_text() == before and (git_repo / "big.py").read_text() == big
    assert not any(isinstance(e, ToolCallFinished) for e in first + second)
    assert any(isinstance(e, Warning) and "not applied" in e.message for e in second)
    # with the tool edit format a code block in a reply is only text
    conv = conversation(git_repo, ScriptedModel([fenced("calc.py", NEW_CALC)]),
                        full_auto(edit_format="tool"))
    list(conv.send("Add a docstring to add in calc.py"))
    assert (git_repo / "calc.py").read_text() == before


def test_mentioned_files_are_attached_once_and_only_repo_files(git_repo):
    model = ScriptedModel(["ok", "ok", "ok"])
    conv = conversation(git_repo, model, full_auto(attach_mentioned=True))
    list(conv.send("Look at calc.py and missing.py, then calc.py again"))
    msg = model.seen[0][-1]["content"]
    assert msg.count('<file path="calc.py">') == 1 and "missing.py" not in msg.split("Attached")[1]
    (git_repo / ".gitignore").write_text("secret.env\n")
    (git_repo / "secret.env").write_text("TOKEN=1\n")
    list(conv.send("what is in secret.env?"))
    assert "TOKEN=1" not in model.seen[1][-1]["content"]  # ignored files are never attached
    conv = conversation(git_repo, ScriptedModel(["ok"]), full_auto(attach_mentioned=False))
    list(conv.send("Look at calc.py"))
    assert "<file" not in conv.messages[-2]["content"]


def test_the_prompt_offers_edit_tools_only_in_the_tool_format(git_repo):
    from agent.core.prompt import system_prompt, tools_for

    assert "edit_file" not in tools_for("whole") and "read_file" in tools_for("whole")
    assert "edit_file" in tools_for("tool")
    whole = system_prompt(git_repo, edit_format="whole")
    assert "complete new file" in whole and "- edit_file:" not in whole
    assert "- edit_file:" in system_prompt(git_repo, edit_format="tool")


def test_an_approval_stop_in_suggest_mode_writes_nothing(git_repo):
    before = (git_repo / "calc.py").read_text()
    model = ScriptedModel([fenced("calc.py", NEW_CALC)])
    conv = conversation(git_repo, model, Config(approval_mode="suggest", edit_format="whole"))
    events = list(conv.send("Add a docstring to add in calc.py"))
    assert isinstance(events[-1], AgentResult) and events[-1].stop_reason == "approval_required"
    assert (git_repo / "calc.py").read_text() == before


def test_an_unnamed_block_in_another_language_is_not_the_attached_file():
    assert parse_blocks('```json\n{"name": "mean"}\n```', default="stats.py") == []
    assert parse_blocks("```python\nx = 1\n```", default="stats.py") == [FileBlock("stats.py", "x = 1\n")]
    assert parse_blocks("```\nx = 1\n```", default="stats.py") == [FileBlock("stats.py", "x = 1\n")]


def test_the_first_message_lists_the_repository_files(git_repo):
    model = ScriptedModel(["ok", "ok"])
    conv = conversation(git_repo, model, full_auto(attach_mentioned=True))
    list(conv.send("Write a test for calc.py"))
    list(conv.send("thanks"))
    first = model.seen[0][-1]["content"]
    head, _, attached = first.partition("Attached files:")
    assert "Files in the repository:" in head and "calc.py" in head.split("Files in")[1]
    assert '<file path="calc.py">' in attached
    assert "Files in the repository" not in model.seen[1][-1]["content"]


def test_code_names_in_a_message_are_looked_up_and_their_files_attached(git_repo):
    from agent.core.attach import symbols

    assert symbols("Rename fetch_data; is MAX_RETRIES in `area`? UserCache, not calc.py or Hello") \
        == ["fetch_data", "MAX_RETRIES", "area", "UserCache"]
    # a plain word the text calls a function, class, ... is a code name; prose words are not
    assert symbols("Rename the function area to rect_area, the method named push(x) and the "
                   "class called stack; a function that sorts, a method in utils.py") \
        == ["area", "rect_area", "push", "stack"]
    assert symbols("Add a parameter to the module utils.py") == []
    (git_repo / "net.py").write_text("import os\n\nMAX_RETRIES = 5\n")
    (git_repo / "other.py").write_text("print('no names here')\n")
    subprocess.run(["git", "add", "net.py", "other.py"], cwd=git_repo, check=True)
    model = ScriptedModel(["net.py sets it to 5."])
    conv = conversation(git_repo, model, full_auto(attach_mentioned=True))
    list(conv.send("Which file defines MAX_RETRIES?"))
    msg = model.seen[0][-1]["content"]
    assert "Where the names in the message occur:\nnet.py:3: MAX_RETRIES = 5" in msg
    assert '<file path="net.py">' in msg and '<file path="other.py">' not in msg


def test_names_are_not_looked_up_in_the_files_the_message_names(git_repo):
    model = ScriptedModel(["ok"])
    conv = conversation(git_repo, model, full_auto(attach_mentioned=True))
    (git_repo / "use.py").write_text("from calc import sub\nprint(sub(2, 1))\n")
    subprocess.run(["git", "add", "use.py"], cwd=git_repo, check=True)
    list(conv.send("Rename `sub` in calc.py to minus"))
    msg = model.seen[0][-1]["content"]
    assert "use.py:1: from calc import sub" in msg and "calc.py:" not in msg.split("Attached")[0]
    assert '<file path="calc.py">' in msg and '<file path="use.py">' in msg


@pytest.mark.parametrize("reply, want", [
    ("calc.py\n```python\nx = 1\n```\n", ""),
    ("**calc.py**\n\n```python\nx = 1\n```\n\nutil.py:\n```\ny = 2\n```", ""),
    ('<file path="calc.py">\nx = 1\n</file>\n', ""),
    ("```python\nx = 1\n```", ""),
    ("```python\nx = 1\n", ""),  # cut short inside the block
    ("Here is calc.py:\n```python\nx = 1\n```\nDone.", "Here is calc.py:\nDone."),
    ("It is fine as it is.", "It is fine as it is."),
])
def test_prose_is_the_text_outside_code_blocks_and_their_path_lines(reply, want):
    assert prose(reply) == want


def test_a_word_called_a_function_is_looked_up_only_where_a_file_defines_it(git_repo):
    """"Rename the function area" attaches main.py, which uses it (shapes.py defines it);
    "the function returns ..." looks up nothing, since no file defines `returns`."""
    (git_repo / "shapes.py").write_text("def area(w, h):\n    return w * h\n")
    (git_repo / "main.py").write_text("from shapes import area\n\nprint(area(2, 3))\n")
    (git_repo / "log.py").write_text("print('the function returns')\n")
    subprocess.run(["git", "add", "-A"], cwd=git_repo, check=True)
    model = ScriptedModel(["ok", "ok"])
    conv = conversation(git_repo, model, full_auto(attach_mentioned=True))
    list(conv.send("Rename the function area to rect_area in shapes.py."))
    msg = model.seen[0][-1]["content"]
    assert "main.py:1: from shapes import area" in msg and '<file path="main.py">' in msg
    conv = conversation(git_repo, model, full_auto(attach_mentioned=True))
    list(conv.send("In calc.py the function returns a wrong sign: fix it."))
    msg = model.seen[1][-1]["content"]
    assert "Where the names in the message occur" not in msg and '<file path="log.py">' not in msg


GRAPH = '''"""A graph."""
import os

NODE, EDGE, ATTR = range(3)


class Node:
    def __init__(self, name, attrs):
        self.name = name
        self.attrs = attrs


@dataclass
class Graph:
    def __init__(self, data=None):
        pass


def helper():
    """Help."""
    return os.sep
'''


def test_splice_replaces_the_definitions_a_fragment_gives_and_keeps_the_rest():
    frag = ("import re\n\nclass Graph:\n    def __init__(self, data=None):\n"
            "        self.data = data or []\n\n\ndef extra():\n    return re.escape('.')\n")
    out = splice(GRAPH, frag)
    # Graph keeps its decorator (the fragment gives none); extra, new, goes where the
    # fragment has it: after Graph, before helper
    assert out == GRAPH.replace("import os\n", "import os\nimport re\n").replace(
        "class Graph:\n    def __init__(self, data=None):\n        pass\n",
        "class Graph:\n    def __init__(self, data=None):\n        self.data = data or []\n\n\n"
        "def extra():\n    return re.escape('.')\n")
    # a constant is replaced where it stands; an import the file has is not added twice
    out = splice(GRAPH, "import os\nNODE, EDGE, ATTR = 1, 2, 3\n\ndef helper():\n    return 1\n")
    assert "NODE, EDGE, ATTR = 1, 2, 3\n" in out and out.count("import os") == 1
    assert "def helper():\n    return 1\n" in out and "class Node:" in out


@pytest.mark.parametrize("frag", [
    "def other():\n    pass\n",  # revises nothing the file defines
    "NODE = 5\n",  # a constant alone is not a revision of the module's code
    "x = helper()\nprint(x)\n",  # statements, not definitions
    "def helper():\n    pass\nif __name__ == '__main__':\n    helper()\n",
    "    def __init__(self):\n        pass\n",  # a method: does not parse at the top level
    "def helper(:\n",  # broken
    "NODE = 1\n\ndef helper():\n    pass\n",  # one name of `NODE, EDGE, ATTR = ...`
    "def helper():\n    pass\n\n\ndef helper():\n    return 2\n",  # the same name twice
    GRAPH.replace("import os\n", ""),  # ... the whole file, the same definitions: not a splice
])
def test_splice_takes_only_a_set_of_definitions_revising_the_file(frag):
    assert splice(GRAPH, frag) is None
    assert splice("def f():\n    pass\n\n\ndef f():\n    return 1\n", "def f():\n    return 2\n") is None


def test_a_fragment_of_a_module_is_spliced_into_it(git_repo):
    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(6))
    (git_repo / "many.py").write_text(body)
    subprocess.run(["git", "add", "many.py"], cwd=git_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "many"], cwd=git_repo, check=True)
    assert "not applied" in judge(FileBlock("many.py", "def f3(x):\n    return x * 3\n"), git_repo)
    reply = fenced("many.py", "def f3(x):\n    return x * 3\n") + "f3 now multiplies."
    conv = conversation(git_repo, ScriptedModel([reply]), full_auto(edit_format="whole", sandbox="off"))
    events = list(conv.send("Make f3 in many.py multiply"))
    assert (git_repo / "many.py").read_text() == body.replace("x + 3", "x * 3")
    assert any(isinstance(e, Warning) and "spliced" in e.message for e in events)
    assert [e.name for e in events if isinstance(e, ToolCallFinished)] == ["write_file"]
    # the diff format takes no whole blocks for existing files, spliced or not
    conv = conversation(git_repo, ScriptedModel([fenced("many.py", "def f4(x):\n    return 0\n")]),
                        full_auto(edit_format="diff", sandbox="off"))
    list(conv.send("Make f4 in many.py return 0"))
    assert "return x + 4" in (git_repo / "many.py").read_text()


def test_splice_goes_into_a_class_member_by_member():
    old = ("class Account:\n    \"\"\"Money.\"\"\"\n\n    RATE = 1\n\n    def __init__(self):\n"
           "        self.balance = 0\n\n    def deposit(self, n):\n        pass\n\n"
           "    def close(self):\n        pass\n\n\ndef helper():\n    pass\n")
    frag = ("class Account(Base):\n    \"\"\"Money, kept.\"\"\"\n\n    def deposit(self, n):\n"
            "        self.balance += n\n\n    def report(self):\n        return self.balance\n")
    out = splice(old, frag)
    assert out == (
        "class Account(Base):\n    \"\"\"Money, kept.\"\"\"\n\n    RATE = 1\n\n    def __init__(self):\n"
        "        self.balance = 0\n\n    def deposit(self, n):\n        self.balance += n\n\n"
        "    def report(self):\n        return self.balance\n\n    def close(self):\n        pass\n"
        "\n\ndef helper():\n    pass\n")
    # a class the fragment adds, and one it revises, both at the end of the file
    out = splice("class A:\n    def f(self):\n        pass\n",
                 "class A:\n    def g(self):\n        pass\n\n\nclass B:\n    pass\n")
    assert out == ("class A:\n    def f(self):\n        pass\n\n    def g(self):\n        pass\n"
                   "\n\nclass B:\n    pass\n")
    # a statement in a class body is not a definition; indentation that does not fit fails to parse
    assert splice(old, "class Account:\n    x = 1\n    print(x)\n") is None
    assert splice(old, "class Account:\n  def close(self):\n    return 1\n") is None


def test_restore_puts_back_what_a_rewrite_leaves_out_where_it_stood():
    old = ('"""Doc."""\nNODE, EDGE = range(2)\n\n\nclass Node:\n    def __init__(self, name):\n'
           "        self.name = name\n\n    def __eq__(self, other):\n        return True\n\n\n"
           "class Graph:\n    def __init__(self, data=None):\n        pass\n\n\n"
           "def helper():\n    pass\n")
    new = ('"""Better doc."""\n\n\nclass Node:\n    """A node."""\n\n    def __eq__(self, other):\n'
           "        return self.name == other.name\n\n\nclass Graph:\n"
           "    def __init__(self, data=None):\n        self.data = data\n")
    out, kept = restore(old, new)
    assert kept == ["NODE", "EDGE", "__init__", "helper"]
    assert out == ('"""Better doc."""\n\n\nNODE, EDGE = range(2)\n\n\nclass Node:\n    """A node."""\n\n'
                   "    def __init__(self, name):\n        self.name = name\n\n"
                   "    def __eq__(self, other):\n        return self.name == other.name\n\n\n"
                   "class Graph:\n    def __init__(self, data=None):\n        self.data = data\n\n\n"
                   "def helper():\n    pass\n")
    assert restore(old, old) is None and restore(old, "def broken(:\n") is None
    # a name defined another way (imported, assigned in a branch) is not left out
    assert restore("def f():\n    pass\n\n\ndef g():\n    pass\n",
                   "from lib import f\n\n\ndef g():\n    return 1\n") is None


@pytest.mark.parametrize("message, kept", [
    ("Add a docstring to every method of Shape in shapes.py", True),
    ("Remove the unused method area from Shape", False),
    ("Rename area to surface", False),
    ("Move area into geometry.py", False),
])
def test_a_rewrite_that_drops_a_method_keeps_it_unless_the_message_may_want_it_gone(git_repo, message, kept):
    shape = ("class Shape:\n    def __init__(self, w, h):\n        self.w, self.h = w, h\n\n"
             "    def area(self):\n        return self.w * self.h\n\n"
             "    def name(self):\n        return 'shape'\n")
    (git_repo / "shapes.py").write_text(shape)
    subprocess.run(["git", "add", "shapes.py"], cwd=git_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "shapes"], cwd=git_repo, check=True)
    reply = fenced("shapes.py", "class Shape:\n    def __init__(self, w, h):\n        self.w, self.h = w, h\n\n"
                   "    def name(self):\n        \"\"\"Its name.\"\"\"\n        return 'shape'\n")
    conv = conversation(git_repo, ScriptedModel([reply]), full_auto(edit_format="whole", sandbox="off"))
    events = list(conv.send(message))
    text = (git_repo / "shapes.py").read_text()
    assert '"""Its name."""' in text and ("def area(self)" in text) == kept
    assert any(isinstance(e, Warning) and "leaves out area" in e.message for e in events) == kept


# ---- what splice and restore must not do (an adversarial review's cases) ------------------

LOAD = ("import sys\n\n\ndef load(path):\n    with open(path) as f:\n        data = f.read()\n"
        "    rows = [line.split(',') for line in data.splitlines()]\n    return rows\n\n\n"
        "def main():\n    rows = load(sys.argv[1])\n    print(len(rows))\n")


def _members(text, cls):
    import ast

    node = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == cls)
    return [m.name for m in node.body if hasattr(m, "name")]


@pytest.mark.parametrize("frag", [
    "def load(path): ...\n\n\ndef main():\n    rows = load(sys.argv[1])\n    print(len(rows), 'rows')\n",
    "def load(path):\n    # ... existing code ...\n    return rows\n",
    "def load(path):\n    pass\n\n\ndef main():\n    print(len(load(sys.argv[1])), 'rows')\n",
])
def test_splice_never_replaces_code_with_a_placeholder(frag):
    assert splice(LOAD, frag) is None


def test_restore_puts_the_code_back_where_a_rewrite_has_a_placeholder():
    new = LOAD.replace("    with open(path) as f:\n        data = f.read()\n"
                       "    rows = [line.split(',') for line in data.splitlines()]\n    return rows\n",
                       "    ...\n").replace("print(len(rows))", "print(len(rows), 'rows')")
    out, kept = restore(LOAD, new)
    assert kept == ["load"] and out == LOAD.replace("print(len(rows))", "print(len(rows), 'rows')")


@pytest.mark.parametrize("old, frag", [
    ("class A:\n  def f(self):\n    pass\n\n  def g(self):\n    pass\n\n\ndef top():\n  pass\n",
     "class A:\n    def g(self):\n        return 1\n"),
    ("class A:\n    def f(self):\n        pass\n\n    def g(self):\n        pass\n",
     "class A:\n        def g(self):\n            return 1\n"),
])
def test_a_method_at_another_indent_is_never_nested_in_the_one_before(old, frag):
    out = splice(old, frag)
    assert out is None or _members(out, "A") == ["f", "g"]
    back = restore("class A:\n    def f(self):\n        pass\n\n    def g(self):\n        pass\n",
                   "class A:\n  def f(self):\n    return 1\n")
    assert back is None or _members(back[0], "A") == ["f", "g"]


def test_statements_sharing_a_line_are_left_alone():
    old = "X = 1; Y = 2\n\n\ndef f():\n    return X + Y\n\n\ndef g():\n    pass\n"
    assert splice(old, "X = 5\n\n\ndef f():\n    return X * Y\n") is None
    assert restore(old, "X = 10\n\n\ndef f():\n    return X\n") is None


@pytest.mark.parametrize("old, frag", [
    ("import sys\n\n\ndef load(path):\n    return open(path).read()\n\n\ndef main():\n"
     "    print(load(sys.argv[1]))\n\n\nif __name__ == \"__main__\":\n    main()\n",
     "def count_words(text):\n    return len(text.split())\n\n\n"
     "def main():\n    print(count_words(load(sys.argv[1])))\n"),
    ("class Dog:\n    def speak(self):\n        return 'woof'\n\n\ndef make():\n    return Dog()\n",
     "class Animal:\n    def speak(self):\n        raise NotImplementedError\n\n\n"
     "class Dog(Animal):\n    def speak(self):\n        return 'woof'\n"),
    ("def fetch(url, timeout=5):\n    return url\n\n\ndef other():\n    pass\n",
     "TIMEOUT = 10\n\n\ndef fetch(url, timeout=TIMEOUT):\n    return url\n"),
])
def test_a_new_definition_goes_before_what_uses_it(old, frag):
    out = splice(old, frag)
    assert out is not None
    exec(compile(out, "m.py", "exec"), {"__name__": "m"})  # no NameError at import


def test_splice_imports_compile_and_stay_below_a_shebang():
    old = ("import os\nfrom typing import Optional\n\n\ndef f(x: Optional[int]) -> int:\n"
           "    return x or 0\n\n\ndef g():\n    return os.sep\n")
    out = splice(old, "from __future__ import annotations\n\n\ndef f(x: int | None) -> int:\n"
                      "    return x or 0\n")
    assert out is None  # a __future__ import after others does not compile
    old = "#!/usr/bin/env python3\ndef a():\n    return 1\n\n\ndef b():\n    return 2\n"
    out = splice(old, "import os\n\n\ndef a():\n    return os.sep\n")
    assert out.startswith("#!/usr/bin/env python3\nimport os\n")


def test_splice_keeps_decorators_and_bases_a_fragment_leaves_out():
    old = ("from dataclasses import dataclass\n\n\n@dataclass(frozen=True)\nclass Point(Base):\n"
           "    x: int\n    y: int\n\n    def norm(self):\n        return abs(self.x) + abs(self.y)\n\n"
           "    @property\n    def area(self):\n        return 0\n")
    out = splice(old, "class Point:\n    def norm(self):\n        return (self.x ** 2 + self.y ** 2) ** 0.5\n\n"
                      "    def area(self):\n        return 1\n")
    assert "@dataclass(frozen=True)\nclass Point(Base):" in out and "    @property\n    def area" in out
    assert "** 0.5" in out and "return 1" in out


def _many(git_repo):
    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(6))
    (git_repo / "many.py").write_text(body)
    subprocess.run(["git", "add", "many.py"], cwd=git_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "many"], cwd=git_repo, check=True)
    return body


@pytest.mark.parametrize("message", [
    "Delete f1, f2, f3 and f4 from many.py, and make f0 return 0",
    "How could f0 in many.py return 0? Just explain, don't change anything.",
    "Could f0 return 0?",
])
def test_no_splice_where_the_message_may_want_code_gone_or_asks_no_change(git_repo, message):
    body = _many(git_repo)
    reply = fenced("many.py", "def f0(x):\n    return 0\n\n\ndef f5(x):\n    return x + 5\n")
    conv = conversation(git_repo, ScriptedModel([reply, "Done."]),
                        full_auto(edit_format="whole", sandbox="off"))
    events = list(conv.send(message))
    assert (git_repo / "many.py").read_text() == body
    assert not any(isinstance(e, Warning) and "spliced" in e.message for e in events)


@pytest.mark.parametrize("message", ["Undo the helper you added", "Revert the last change to m.py",
                                     "Convert the functions into methods of a Calculator class",
                                     "We don't need the legacy API anymore"])
def test_messages_that_may_want_definitions_gone(message):
    from agent.core.wholefile import keeps_all

    assert not keeps_all(message) and keeps_all("Add a docstring to every function")


def test_agreeing_to_a_proposed_removal_keeps_nothing(git_repo):
    """"yes, go ahead" answers the reply before it: a removal it proposed is not undone."""
    body = "def keep(x):\n    return x\n\n\ndef helper(x):\n    return x * 2\n"
    (git_repo / "m.py").write_text(body)
    subprocess.run(["git", "add", "m.py"], cwd=git_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "m"], cwd=git_repo, check=True)
    model = ScriptedModel(["helper in m.py is unused; shall I remove it?",
                           fenced("m.py", "def keep(x):\n    return x\n")])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
    list(conv.send("Is anything in m.py unused"))
    list(conv.send("yes, go ahead"))
    assert (git_repo / "m.py").read_text() == "def keep(x):\n    return x\n"


RANGES = 'def last_n(items, n):\n    """The last n items."""\n    return items[len(items) - n - 1:]\n'
TEST_RANGES = ("from ranges import last_n\n\n\ndef test_last_n():\n"
               "    assert last_n([1, 2, 3, 4], 2) == [3, 4]\n")


@pytest.mark.parametrize("fmt", ["whole", "auto"])
def test_a_block_that_is_another_attached_files_text_is_not_written_over_a_file(git_repo, fmt):
    """Given a module and its test, the 0.5B wrote the test's text under the module's path,
    which would replace the module's code (and break the test's import): not applied, and
    the model is told; a message that asks for a copy gets it."""
    (git_repo / "ranges.py").write_text(RANGES)
    (git_repo / "test_ranges.py").write_text(TEST_RANGES)
    subprocess.run(["git", "add", "-A"], cwd=git_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "ranges"], cwd=git_repo, check=True)
    model = ScriptedModel([fenced("ranges.py", TEST_RANGES), "I could not fix it."])
    conv = conversation(git_repo, model, full_auto(edit_format=fmt, attach_mentioned=True))
    events = list(conv.send("The test in test_ranges.py fails. Fix the bug in ranges.py."))
    assert (git_repo / "ranges.py").read_text() == RANGES
    told = [e.message for e in events if isinstance(e, Warning)]
    assert any("is the text of test_ranges.py" in m for m in told), told
    assert "is the text of test_ranges.py" in model.seen[1][-1]["content"], [m[-1]["content"] for m in model.seen]
    # the same reply where the message asks for the copy
    model = ScriptedModel([fenced("ranges.py", TEST_RANGES)])
    conv = conversation(git_repo, model, full_auto(edit_format=fmt, attach_mentioned=True))
    list(conv.send("Copy test_ranges.py over ranges.py."))
    assert (git_repo / "ranges.py").read_text() == TEST_RANGES


PAGES = 'def page_count(total, per_page):\n    return total // per_page\n'
TEST_PAGES = "from pages import page_count\n\n\ndef test_page_count():\n    assert page_count(11, 5) == 3\n"
FIXED_PAGES = 'def page_count(total, per_page):\n    return (total + per_page - 1) // per_page\n'


def _commit(root, files):
    for path, text in files.items():
        (root / path).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "files", "--allow-empty"], cwd=root, check=True)


def test_an_unnamed_block_is_for_the_one_attached_file_that_defines_what_it_defines(git_repo):
    """Two files attached (a module and its test), the fix written without a path: it is
    the module's, which alone defines page_count; not in an answer to a question."""
    _commit(git_repo, {"pages.py": PAGES, "test_pages.py": TEST_PAGES})
    assert parse_blocks("x\n```python\n" + FIXED_PAGES + "```\n", owners={
        "pages.py": {"page_count"}, "test_pages.py": {"test_page_count"}}) == [
        FileBlock("pages.py", FIXED_PAGES)]
    both = {"pages.py": {"page_count"}, "other.py": {"page_count"}}  # which one? neither
    assert parse_blocks("```python\n" + FIXED_PAGES + "```\n", owners=both) == []
    reply = "The fix:\n```python\n" + FIXED_PAGES + "```\nNow the test passes."
    model = ScriptedModel(["The fix:\n```python\n" + PAGES.replace("//", "/") + "```", reply])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", attach_mentioned=True))
    list(conv.send("How would page_count in pages.py divide exactly, as test_pages.py asks?"))
    assert (git_repo / "pages.py").read_text() == PAGES  # a question: nothing written
    list(conv.send("The test in test_pages.py fails. Fix page_count in pages.py."))
    assert (git_repo / "pages.py").read_text() == FIXED_PAGES


TEXT = "def repeat(text):\n    return text * 2\n\n\ndef shout(text):\n    return text.upper()\n"
REPEAT = "def repeat(text, times=2):\n    return text * times\n"


@pytest.mark.parametrize("message, lands", [
    ("Add a parameter times with the default value 2 to repeat in text.py.", "text.py"),
    ("Create repeat.py with a repeat function that takes times, like text.py's.", "repeat.py"),
    ("Move repeat from text.py into its own module with a times parameter.", "repeat.py"),
])
def test_a_new_file_that_redefines_an_attached_files_function_is_that_files(git_repo, message, lands):
    """Asked to change repeat in text.py, the 0.5B wrote repeat to a new repeat.py: it goes
    to text.py (kept whole: shout stays). Not where the message names the new file or may
    want code moved."""
    _commit(git_repo, {"text.py": TEXT})
    conv = conversation(git_repo, ScriptedModel([fenced("repeat.py", REPEAT)]),
                        full_auto(edit_format="whole", attach_mentioned=True))
    events = list(conv.send(message))
    if lands == "text.py":
        assert (git_repo / "text.py").read_text() == REPEAT + "\n\n" + TEXT.split("\n\n\n")[1]
        assert not (git_repo / "repeat.py").exists()
        assert any(isinstance(e, Warning) and "written to text.py" in e.message for e in events)
    else:
        assert (git_repo / "repeat.py").read_text() == REPEAT
        assert (git_repo / "text.py").read_text() == TEXT


def test_test_files_and_new_modules_that_define_more_are_not_retargeted(git_repo):
    """A test shown without its file's name is a suggestion, not the test file's text; a new
    module with repeat and more of its own is a new module."""
    _commit(git_repo, {"text.py": TEXT, "test_text.py": "from text import repeat\n\n\n"
                       "def test_repeat():\n    assert repeat('a') == 'aa'\n"})
    suggestion = "```python\ndef test_repeat():\n    assert repeat('a', 3) == 'aaa'\n```\n"
    more = "def repeat(text, times=2):\n    return text * times\n\n\ndef twice(text):\n    return text * 2\n"
    conv = conversation(git_repo, ScriptedModel([fenced("text.py", REPEAT) + suggestion,
                                                 fenced("strings.py", more)]),
                        full_auto(edit_format="whole", attach_mentioned=True))
    list(conv.send("Add a parameter times to repeat in text.py; test_text.py tests it."))
    assert "def test_repeat():\n    assert repeat('a') == 'aa'" in (git_repo / "test_text.py").read_text()
    assert "times=2" in (git_repo / "text.py").read_text()
    list(conv.send("Give repeat a times parameter."))
    assert (git_repo / "strings.py").read_text() == more


def _send_one(root, reply, message, *, earlier=None):
    conv = conversation(root, ScriptedModel([*(["ok"] if earlier else []), reply]),
                        full_auto(edit_format="whole", attach_mentioned=True))
    if earlier:
        list(conv.send(earlier))
    return list(conv.send(message))


APP = "def load():\n    return 1\n\n\ndef main():\n    print(load())\n"
CALC2 = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


def test_code_without_a_file_goes_only_to_a_file_this_message_attached(git_repo):
    """An unnamed block is not written to a file an earlier message attached, nor where the
    message names a new file; JavaScript is not taken for a Python file's code."""
    _commit(git_repo, {"app.py": APP, "utils.py": "def total(xs):\n    return sum(xs)\n",
                       "parser.py": "class Parser:\n    pass\n", "other.py": "X = 1\n"})
    hello = "```python\ndef main():\n    print('hello')\n```\n"
    _send_one(git_repo, hello, "Write me a hello world script.", earlier="What does app.py do?")
    _send_one(git_repo, hello, "Using utils.py and app.py, write a new script report.py.")
    assert (git_repo / "app.py").read_text() == APP
    js = "```\nclass Parser {\n  constructor() {}\n}\nmodule.exports = Parser;\n```\n"
    _send_one(git_repo, js, "Port the Parser class from parser.py to JavaScript; see other.py.")
    assert (git_repo / "parser.py").read_text() == "class Parser:\n    pass\n"
    # of two unnamed blocks for one file (the code before, then the fix) the later one is written
    two = ("Your code:\n```python\n" + CALC2 + "```\nFixed:\n```python\n"
           + CALC2.replace("a - b", "b - a") + "```\n")
    _commit(git_repo, {"calc.py": CALC2})
    _send_one(git_repo, two, "Fix sub in calc.py; utils.py is unrelated.")
    assert "b - a" in (git_repo / "calc.py").read_text()


@pytest.mark.parametrize("message", [
    "Write a fake of calc.py for offline tests where every function returns 0.",
    "Add an ASCII-only variant of add from calc.py in its own module; keep calc.py as it is.",
    "Add type stubs for calc.py.",
])
def test_new_files_a_message_may_want_are_not_retargeted(git_repo, message):
    _commit(git_repo, {"calc.py": CALC2})
    for path, body in (("fake_calc.py", CALC2.replace("a + b", "0").replace("a - b", "0")),
                       ("add.py", "def add(a, b):\n    return a + b\n"),
                       ("calc.pyi", "def add(a: int, b: int) -> int: ...\n")):
        _send_one(git_repo, fenced(path, body), message)
        assert (git_repo / "calc.py").read_text() == CALC2


def test_two_new_files_for_one_file_are_not_both_retargeted_over_each_other(git_repo):
    """repeat.py and shout.py for text.py: the first goes to text.py, the second is left as
    its own file (rather than written over the first from the file before it)."""
    _commit(git_repo, {"text.py": TEXT})
    shout = "def shout(text):\n    return text.upper() + '!'\n"
    _send_one(git_repo, fenced("repeat.py", REPEAT) + fenced("shout.py", shout),
              "In text.py, give repeat a times parameter and make shout add an exclamation mark.")
    assert "times=2" in (git_repo / "text.py").read_text()
    assert (git_repo / "shout.py").read_text() == shout


def test_a_copy_guard_lets_moves_and_resets_through(git_repo):
    """A reply that moves legacy.py's code into core.py while rewriting legacy.py, and a reset
    to an example file, are written."""
    legacy = "def parse(s):\n    return s.split()\n\n\ndef fmt(xs):\n    return ' '.join(xs)\n"
    shim = "from core import parse\n\n\ndef old_parse(s):\n    return parse(s)\n"
    _commit(git_repo, {"legacy.py": legacy, "core.py": "# to fill\nX = 1\n",
                       "settings.py": "A = 2\nB = 3\n", "settings.example.py": "A = 1\nB = 1\n"})
    _send_one(git_repo, fenced("core.py", legacy) + fenced("legacy.py", shim),
              "Put legacy.py's functions into core.py, with old_parse left in legacy.py as a shim.")
    core = (git_repo / "core.py").read_text()
    assert "def parse(s):" in core and "def fmt(xs):" in core  # (its X = 1 is kept too)
    _send_one(git_repo, fenced("settings.py", "A = 1\nB = 1\n"),
              "Reset settings.py to the defaults in settings.example.py.")
    assert (git_repo / "settings.py").read_text() == "A = 1\nB = 1\n"


def test_conftest_and_test_folders_own_no_unnamed_code(git_repo):
    conftest = "import pytest\n\n\n@pytest.fixture\ndef db():\n    return {}\n"
    _commit(git_repo, {"conftest.py": conftest, "store.py": "def put(db, k, v):\n    db[k] = v\n"})
    _send_one(git_repo, "```python\ndef db():\n    return {'a': 1}\n```\n",
              "Make put in store.py return the db; conftest.py has the fixture.")
    assert (git_repo / "conftest.py").read_text() == conftest


def test_the_one_attached_files_code_is_found_beside_a_usage_example(git_repo):
    """One file attached, two unnamed blocks: the code that defines its function, then an
    example that calls it. The first is the file; the example (it defines nothing) is not."""
    _commit(git_repo, {"acc.py": "def accumulate(xs, op):\n    pass\n"})
    code = "def accumulate(xs, op):\n    return [op(x) for x in xs]\n"
    reply = f"```python\n{code}```\nFor example:\n```python\nprint(accumulate([1], str))\n```\n"
    _send_one(git_repo, reply, "Implement accumulate in acc.py.")
    assert (git_repo / "acc.py").read_text() == code


@pytest.mark.parametrize("message", ["Explain what calc.py does. Do not change any file.",
                                     "Change nothing, just tell me what add does"])
def test_a_message_that_forbids_any_change_gets_nothing_written(git_repo, message):
    from agent.core.wholefile import forbids_change
    from scripted import call

    before = (git_repo / "calc.py").read_text()
    new = before.replace("return a + b", "return a + b  # sum")
    model = ScriptedModel([call("write_file", path="calc.py", content=new), fenced("calc.py", new)])
    events = list(conversation(git_repo, model, full_auto(edit_format="whole", sandbox="off"))
                  .send(message))
    assert (git_repo / "calc.py").read_text() == before  # neither the call nor the block wrote
    assert any(isinstance(e, ToolCallFinished) and not e.ok and "no change" in e.output for e in events)
    assert events[-1].stop_reason == "answered" and not events[-1].is_error
    assert not forbids_change("Fix the bug but do not change the tests")
    assert not forbids_change("fix calc.py without touching anything else")
    assert not forbids_change("Do not change any file in tests/")

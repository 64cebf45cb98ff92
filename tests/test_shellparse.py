"""The shell reader behind approvals (tools/shellparse.py) and the denylist cases it enables."""

from __future__ import annotations

import pytest
from scripted import git_repo  # noqa: F401 - fixture

from tools.denylist import denylisted, programs
from tools.shellparse import SUBST, simple_commands


@pytest.mark.parametrize("text,expected", [
    ("ls -la", [["ls", "-la"]]),
    ("# a comment\ngit status", [["git", "status"]]),
    ("echo a#b # trailing", [["echo", "a#b"]]),
    ("echo '# not a comment'", [["echo", "# not a comment"]]),
    ("git \\\n  reset \\\n --hard", [["git", "reset", "--hard"]]),
    ("g\\it 'st'\"atus\"", [["git", "status"]]),
    ('echo "" x', [["echo", "", "x"]]),
    ("a && b || c; d & e | f", [["a"], ["b"], ["c"], ["d"], ["e"], ["f"]]),
    ("{ a; } && ( b )", [["a"], ["b"]]),
    ("echo x >out 2>&1", [["echo", "x", ">", "out", "2", ">&", "1"]]),
    ("rm -rf $(pwd)", [["rm", "-rf", SUBST], ["pwd"]]),
    ("echo `date` \"$(id -u)\"", [["echo", SUBST, SUBST], ["date"], ["id", "-u"]]),
    ("cat <<EOF > f\nrm -rf /\nEOF\necho done", [["cat", "<<", "EOF", ">", "f"], ["echo", "done"]]),
    ("cat <<-'X'\n\trm -rf /\n\tX\nls", [["cat", "<<", "X"], ["ls"]]),
    ("diff <(ls a) <(ls b)", [["diff", SUBST, SUBST], ["ls", "a"], ["ls", "b"]]),
    ("echo $(echo $(rm -rf /))", [["echo", SUBST], ["echo", SUBST], ["rm", "-rf", "/"]]),
])
def test_simple_commands(text, expected):
    assert simple_commands(text) == expected


ASKS = [
    "# tidy\ngit reset --hard", "git reset --har", "git reset --h", "rm -rf $(pwd)", "rm -rf `pwd`/",
    "timeout -s KILL 5 git clean -fdx", "nice -n 5 git checkout .", "env -i A=1 git stash",
    "stdbuf -oL rm -rf ~", "echo . | xargs rm -rf", "find . -exec rm -rf {} +", "find . -delete",
    "bash -lc 'git reset --hard'", "echo 'git reset --hard' | sh", "$(echo rm) -rf .",
    "git -c core.pager='rm -rf .' log", "git checkout-index -a -f", "busybox rm -rf .",
    "watch -n 1 git clean -fdx", "rm -rf ?*", "rm -rf .[!.]* *", "git branch -D main",
    "git push --forc", "git switch --discard-ch main",
]
FREE = [
    "ls -la # rm -rf /", "echo 'git reset --hard'", "git -c color.ui=always status",
    "cat <<EOF > notes.txt\nrm -rf /\nEOF", "find . -name '*.pyc' -delete", "rm -rf build",
    "timeout 60 python -m pytest -q", "git log --oneline | head", "env FOO=1 make test",
]


@pytest.mark.parametrize("command", ASKS)
def test_asks(git_repo, command):
    assert denylisted(command, git_repo), command


@pytest.mark.parametrize("command", FREE)
def test_does_not_ask(git_repo, command):
    (git_repo / "build").mkdir(exist_ok=True)
    assert denylisted(command, git_repo) == "", command


def test_programs_see_through_wrappers_and_substitutions():
    assert programs("timeout 5 nice -n 2 pytest -q && echo $(date)") == ["pytest", "echo", "date"]
    assert programs("find . -exec rm {} +") is None  # find runs what -exec names
    assert programs("sh -c 'ls'") is None

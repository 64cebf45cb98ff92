"""The fault/tamper suite: model replies that drop code, add junk or change nothing, replayed
through the real CLI (`-p --output-format json`, full-auto) with a scripted model.

tests/fixtures/tamper/recorded.jsonl holds runs of the 0.5B and 1.5B models on small task repos
(scripts/record_faults.py records them, each reply exactly as decoded, and adds hand-made
mutations of recorded replies: a trailing `</file>`, the module's data dropped, a cut
mid-function, a markdown line, the file unchanged, a prose-only answer). Each record is
replayed in a repo of its own (its replies in order, then "Done.") and the run must end with:
(a) every top-level name (import, assignment target, def, class) of each original Python file
    still defined, unless the task renames or removes it;
(b) every Python file parsing and defining each top-level name before it is used at import,
    and no commit of the run holding a Python file that does not;
(c) an honest outcome: the exit code and `is_error` those of the `stop_reason` in the table;
    exit 0 only when a change asked was made and the task's tests fail nowhere they passed
    before; a change asked and nothing changed is `no_change` / `edit_failed` /
    `checks_failed` (exit 5) or a run that did not finish (exit 3) -- where blank lines and
    comments alone are no change;
(d) no stray `</file>`, `<file path=...>` or code-fence lines in any file written.
The whole file runs in about 20 s (about 0.3 s a record).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from scripted import ScriptedModel, git, make_repo

from agent.exit_codes import for_stop_reason

FIXTURES = Path(__file__).parent / "fixtures" / "tamper"
RECORDED = FIXTURES / "recorded.jsonl"
HONEST_NO_CHANGE = {"no_change", "edit_failed", "checks_failed"}  # exit 5
DID_NOT_FINISH = {"max_turns", "max_tokens", "repetition"}  # exit 3
STRAY = re.compile(r"^\s*(`{3,}|~{3,}|</file>|<file path=)")
# the record's classes (scripts/record_faults.py classify) -> the fault they are
FAULT_OF = {"drop_code": "drop_code", "cut": "drop_code", "junk": "junk", "unchanged": "no_change",
            "no_block": "no_change", "no_change": "no_change"}
FAULTS = set(FAULT_OF.values())
# record id -> why its replay is expected to fail (a defect of the agent, not of the suite)
KNOWN: dict[str, str] = {
}


def load_records() -> list[dict]:
    if not RECORDED.exists():
        return []
    return [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]


RECORDS = load_records()


def params():
    for rec in RECORDS:
        marks = [pytest.mark.xfail(reason=KNOWN[rec["id"]], strict=True)] if rec["id"] in KNOWN else []
        yield pytest.param(rec, id=rec["id"], marks=marks)


class ReplayModel(ScriptedModel):
    """Replays recorded replies; a reply that ended at the token limit or in a loop ends so
    again (its recorded finish reason)."""

    def __init__(self, turns: list[str], finishes: list[str]):
        super().__init__(turns)
        self.finishes = list(finishes)

    def generate(self, messages, cancel=None, **_):
        finish = self.finishes.pop(0) if self.finishes else "stop"
        for ev in super().generate(messages, cancel):
            if finish in ("length", "repetition") and hasattr(ev, "finish_reason"):
                ev = replace(ev, finish_reason=finish)
            yield ev


def _defines(node: ast.stmt) -> set[str]:
    """Names a top-level statement defines: imports, assignment targets, defs, classes."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def top_names(text: str) -> set[str]:
    return set().union(*map(_defines, ast.parse(text).body))


def _loads(node: ast.AST) -> set[str]:
    """Names a top-level statement reads when the module runs (not in function bodies)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        parts = [*node.decorator_list, *node.args.defaults,
                 *(d for d in node.args.kw_defaults if d is not None)]
    elif isinstance(node, ast.ClassDef):
        parts = [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]
    else:
        parts = [node]
    out: set[str] = set()
    for part in parts:
        inner: set[str] = set()  # lambda and comprehension variables
        for n in ast.walk(part):
            if isinstance(n, ast.Lambda):
                inner.update(a.arg for a in n.args.args)
            elif isinstance(n, ast.comprehension):
                inner.update(x.id for x in ast.walk(n.target) if isinstance(x, ast.Name))
        out.update(n.id for n in ast.walk(part)
                   if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in inner)
    return out


def used_before_defined(text: str) -> list[str]:
    """Top-level names the module reads before the statement that defines them (it would
    raise NameError on import): what a merge that puts code back out of order leaves."""
    body = ast.parse(text).body
    first: dict[str, int] = {}
    for i, node in enumerate(body):
        for name in _defines(node):
            first.setdefault(name, i)
    return sorted({name for i, node in enumerate(body) for name in _loads(node)
                   if first.get(name, -1) > i})


def parse_error(text: str) -> str:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError) as e:
        return str(e)
    return ""


# ---- the task's tests ---------------------------------------------------------------------------

def failures_of(repo: Path, cmd: str) -> tuple[int, set[str]]:
    """(pytest's exit status, the ids of the tests that fail or error) of the task's tests."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(f"{cmd} --tb=no -rfE", shell=True, cwd=repo, capture_output=True,
                       text=True, timeout=120, check=False, env=env)
    failing = {line.split()[1] for line in r.stdout.splitlines()
               if line.startswith(("FAILED ", "ERROR ")) and len(line.split()) > 1}
    return r.returncode, failing


def worse(before: tuple[int, set[str]], after: tuple[int, set[str]]) -> str:
    """How the tests got worse from `before` to `after` ('' when they did not)."""
    if after[0] not in (0, 1) and before[0] in (0, 1):
        return f"pytest ends with status {after[0]} (collection or usage error)"
    if new := sorted(after[1] - before[1]):
        return f"now failing: {', '.join(new)}"
    return ""


_BEFORE: dict[str, tuple[int, set[str]]] = {}


def baseline(rec: dict, tmp: Path) -> tuple[int, set[str]]:
    """The task's tests on its original files (once per set of files)."""
    key = json.dumps([rec["files_before"], rec["test_cmd"]], sort_keys=True)
    if key not in _BEFORE:
        _BEFORE[key] = failures_of(make_repo(tmp / "before", rec["files_before"]), rec["test_cmd"])
    return _BEFORE[key]


# ---- the invariants: each returns its problems as lines ---------------------------------------

def lost_names(before: dict[str, str], repo: Path, allowed: set[str]) -> list[str]:
    """(a) Names of the original Python files missing at the end."""
    out = []
    for path, text in before.items():
        if not path.endswith(".py"):
            continue
        now = repo / path
        if not now.is_file():
            out.append(f"(a) {path} is gone")
            continue
        if parse_error(now.read_text()):
            continue  # (b) says it
        missing = top_names(text) - top_names(now.read_text()) - allowed
        if missing:
            out.append(f"(a) {path} lost {sorted(missing)}")
    return out


def broken_python(repo: Path, start: str) -> list[str]:
    """(b) Python files that do not parse, at the end or in a commit made since `start`."""
    out = []
    for path in sorted(repo.rglob("*.py")):
        if ".git" not in path.parts and (err := broken(path.read_text(errors="replace"))):
            out.append(f"(b) {path.relative_to(repo)} at the end {err}")
    for sha in git(repo, "rev-list", f"{start}..HEAD").split():
        changed = git(repo, "diff-tree", "--no-commit-id", "--name-only", "--diff-filter=AM",
                      "-r", sha).split("\n")
        for path in filter(lambda p: p.endswith(".py"), changed):
            if err := broken(git(repo, "show", f"{sha}:{path}")):
                out.append(f"(b) commit {sha[:8]} holds {path}, which {err}")
    return out


def broken(text: str) -> str:
    """How a Python text is broken: it does not parse, or it reads a top-level name before
    defining it ('' when neither)."""
    if err := parse_error(text):
        return f"does not parse: {err}"
    if early := used_before_defined(text):
        return f"uses {', '.join(early)} before defining it (NameError on import)"
    return ""


def stray_lines(repo: Path) -> list[str]:
    """(d) Reply markup written into a file (Markdown files may hold fences)."""
    out = []
    for path in sorted(repo.rglob("*")):
        if ".git" in path.parts or not path.is_file() or path.suffix in (".md", ".pyc"):
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if STRAY.match(line):
                out.append(f"(d) {path.relative_to(repo)}:{n} is reply markup: {line.strip()[:40]}")
    return out


def same_code(path: str, text: str, was: str) -> bool:
    """Is `text` the file `was` as far as running it goes (for Python, the same syntax tree:
    blank lines and comments alone are no change)?"""
    if text == was:
        return True
    if not path.endswith(".py") or parse_error(text) or parse_error(was):
        return False
    return ast.dump(ast.parse(text)) == ast.dump(ast.parse(was))


def dishonest(rec: dict, repo: Path, code: int, result: dict,
              before: tuple[int, set[str]]) -> list[str]:
    """(c) The outcome against what happened to the files and the tests."""
    out = []
    stop, is_error = result.get("stop_reason"), result.get("is_error")
    said = f"stop_reason {stop!r}, exit {code}, is_error {is_error}"
    if code != for_stop_reason(stop or "") or is_error != (code != 0):
        out.append(f"(c) the exit code and is_error are not those of the table: {said}")
    unchanged = all((repo / p).is_file() and same_code(p, (repo / p).read_text(), t)
                    for p, t in rec["files_before"].items())
    if rec["asks_change"] and unchanged:
        honest = (stop in HONEST_NO_CHANGE and code == 5) or (stop in DID_NOT_FINISH and code == 3)
        if not honest:
            out.append(f"(c) a change was asked and nothing changed, yet {said}")
    if (code == 0 or stop == "answered") and (how := worse(before, failures_of(repo, rec["test_cmd"]))):
        out.append(f"(c) the tests got worse ({how}), yet {said}")
    return out


# ---- the replay --------------------------------------------------------------------------------

def replay(rec: dict, repo: Path, monkeypatch, capsys) -> tuple[int, dict]:
    """Run the CLI on the record's task with its replies; (exit code, the json result)."""
    from agent import runtime
    from agent.cli import main

    model = ReplayModel(rec["replies"], rec.get("finishes", []))
    monkeypatch.setattr(runtime.Runtime, "load", lambda self: self.use_model(model))
    monkeypatch.setenv("SPEC_AGENT_HOME", str(repo.parent / "home"))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    code = main(["-C", str(repo), "-p", rec["task"], "--output-format", "json",
                 *rec["agent_args"]])
    lines = capsys.readouterr().out.strip().splitlines()
    return code, json.loads(lines[-1]) if lines else {}


@pytest.mark.parametrize("rec", list(params()))
def test_replay_keeps_the_files_and_tells_the_truth(rec, tmp_path, monkeypatch, capsys):
    before = baseline(rec, tmp_path)
    repo = make_repo(tmp_path / "repo", rec["files_before"])
    start = git(repo, "rev-parse", "HEAD").strip()
    code, result = replay(rec, repo, monkeypatch, capsys)
    problems = [*lost_names(rec["files_before"], repo, set(rec.get("renames", []))),
                *broken_python(repo, start), *stray_lines(repo),
                *dishonest(rec, repo, code, result, before)]
    assert not problems, f"{rec['id']} ({', '.join(rec['classes'])}):\n" + "\n".join(problems)


def test_the_suite_holds_enough_faulty_replies_from_both_models():
    faults = {r["id"]: {FAULT_OF[c] for c in r["classes"] if c in FAULT_OF} for r in RECORDS}
    faulty = [r for r in RECORDS if faults[r["id"]]]
    assert len(faulty) >= 30
    recorded = {r["model"] for r in faulty if not r["model"].startswith("mutated-from:")}
    assert {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"} <= recorded
    assert set().union(*faults.values()) == FAULTS


# ---- the checks catch what they are for ------------------------------------------------------

MODULE = "import re\n\nTABLE = {'a': 1}\n\n\ndef f(x):\n    return TABLE[x]\n"
TESTS = "from m import f\n\n\ndef test_a():\n    assert f('a') == 1\n\n\ndef test_b():\n    assert f('a')\n"


def test_checks_catch_lost_code_broken_commits_markup_and_false_success(tmp_path):
    cmd = f"{sys.executable} -m pytest -q -p no:cacheprovider test_m.py"
    repo = make_repo(tmp_path / "repo", {"m.py": MODULE, "test_m.py": TESTS})
    start = git(repo, "rev-parse", "HEAD").strip()
    before = failures_of(repo, cmd)
    assert before == (0, set())
    (repo / "m.py").write_text("def f(x):\n    return x\n</file>\n")
    git(repo, "commit", "-qam", "broken")
    (repo / "m.py").write_text("def f(x):\n    return x\n")
    git(repo, "commit", "-qam", "fixed, but the table is gone")
    assert lost_names({"m.py": MODULE}, repo, set()) == ["(a) m.py lost ['TABLE', 're']"]
    assert lost_names({"m.py": MODULE}, repo, {"TABLE", "re"}) == []
    broken = broken_python(repo, start)
    assert len(broken) == 1 and "holds m.py, which does not parse" in broken[0]
    assert used_before_defined("X = Y + 1\nY = [z for z in range(3)]\n\n\n@deco(Z)\ndef f(a=W):\n"
                               "    return X + Q\n\n\nZ = W = Q = 1\ndef deco(z): pass\n") == ["W", "Y", "Z", "deco"]
    assert used_before_defined(MODULE) == []
    (repo / "notes.txt").write_text("ok\n```\n")
    assert stray_lines(repo) == ["(d) notes.txt:2 is reply markup: ```"]
    assert failures_of(repo, cmd) == (1, {"test_m.py::test_a"})
    rec = {"asks_change": True, "files_before": {"m.py": MODULE}, "test_cmd": cmd}
    told = dishonest(rec, repo, 0, {"stop_reason": "answered", "is_error": False}, before)
    assert told == [("(c) the tests got worse (now failing: test_m.py::test_a), yet stop_reason "
                     "'answered', exit 0, is_error False")]
    assert dishonest(rec, repo, 5, {"stop_reason": "checks_failed", "is_error": True}, before) == []
    assert len(dishonest(rec, repo, 5, {"stop_reason": "answered", "is_error": False}, before)) == 2
    (repo / "m.py").write_text(MODULE)
    assert dishonest(rec, repo, 0, {"stop_reason": "answered", "is_error": False}, before) == [
        ("(c) a change was asked and nothing changed, yet stop_reason 'answered', exit 0, "
         "is_error False")]
    assert dishonest(rec, repo, 5, {"stop_reason": "no_change", "is_error": True}, before) == []
    (repo / "m.py").write_text(MODULE.replace("TABLE = ", "# the table\n\nTABLE = "))
    assert len(dishonest(rec, repo, 0, {"stop_reason": "answered", "is_error": False}, before)) == 1
    (repo / "m.py").write_text(MODULE + "\n\nOTHER = 2\n")
    assert dishonest(rec, repo, 0, {"stop_reason": "answered", "is_error": False}, before) == []
    (repo / "m.py").write_text("import re\n\nTABLE = {'a': 1}\n\n\ndef f(x)\n")
    assert worse(before, failures_of(repo, cmd)).startswith("pytest ends with status 2")

"""Exercism Python exercises as a benchmark: the exercises, their repositories, their grading.

The protocol is Aider's code-editing benchmark. Each exercise gets a fresh git repository with
the stub committed and the unittest file beside it (kept out of git's view through
`.git/info/exclude`, so it is neither listed nor attached to a message: the model sees the
instructions and the stub, as in Aider, and can still open or run the tests with its tools).
Try 1 is the introduction and instructions (`.docs/introduction.md`, `instructions.md`,
`instructions.append.md` where present) and the stub's name; the harness then grades; on a
failure, try 2 is the test output and "the tests are correct, fix the code" in the same
conversation.

Grading never trusts the agent's repository: the solution files are copied into a fresh
directory beside the original test file, and pytest runs there in its own process group with
a time limit (the whole group is killed on timeout). An edited test file, a `conftest.py` or
a `pytest.ini` the agent wrote therefore count for nothing. This module runs no model.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from tools import git

SPLIT_FILE = Path(__file__).parent / "exercism_split.json"
SUBSETS = ("tune", "check")
TEST_TIMEOUT_S = 60.0  # one run of an exercise's tests
MAX_OUTPUT_CHARS = 4000  # of the test output given back in try 2
ENV_DIR = "SPEC_AGENT_EXERCISM_DIR"

# Aider's benchmark prompts (aider/benchmark/prompts.py), with its file list.
ADDENDUM = """
####

Use the above instructions to modify the supplied files: {files}
Don't change the names of existing functions or classes, as they may be referenced from other code like unit tests, etc.
Only use standard libraries, don't suggest installing any packages.
"""
FAILURES = """
####

See the testing errors above.
The tests are correct, don't try and change them.
Fix the code in {files} to resolve the errors.
"""


class ExercismError(Exception):
    """The exercises folder is missing or malformed, or a name or subset is unknown."""

    exit_code = 2


@dataclass(frozen=True)
class Exercise:
    name: str
    folder: Path
    subset: str  # "tune", "check" or "" (not in the split)
    solution: tuple[str, ...]  # the stub file(s) the model is to complete
    tests: tuple[str, ...]
    example: str  # the reference solution's path inside the folder
    # Other files beside them that the tests need (error-handling's test_utils.py): handled
    # as the tests are (beside the stub, out of git's view, restored, copied for grading).
    support: tuple[str, ...] = ()

    @property
    def kept(self) -> tuple[str, ...]:
        """The files the harness owns: the tests and the files they need (the agent's copies
        are replaced by the originals before grading)."""
        return (*self.tests, *self.support)

    def instructions(self) -> str:
        docs = self.folder / ".docs"
        parts = [(docs / n).read_text(encoding="utf-8") for n in
                 ("introduction.md", "instructions.md", "instructions.append.md")
                 if (docs / n).is_file()]
        return "\n\n".join(p.strip() for p in parts) + "\n" + ADDENDUM.format(files=" ".join(self.solution))

    def retry_message(self, test_output: str) -> str:
        return test_output.rstrip() + "\n" + FAILURES.format(files=" ".join(self.solution))


def default_dir() -> Path:
    """$SPEC_AGENT_EXERCISM_DIR, else ../shared/benchmarks/exercism-python beside the project."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "benchmarks" / "exercism-python"


def split() -> dict[str, list[str]]:
    return json.loads(SPLIT_FILE.read_text(encoding="utf-8"))


def _load(folder: Path, subset: str) -> Exercise:
    try:
        files = json.loads((folder / ".meta" / "config.json").read_text(encoding="utf-8"))["files"]
        ex = Exercise(folder.name, folder, subset, tuple(files["solution"]), tuple(files["test"]),
                      files.get("example", [".meta/example.py"])[0])
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise ExercismError(f"{folder}: not an exercise ({type(e).__name__}: {e})") from None
    missing = [f for f in (*ex.solution, *ex.tests, ".docs/instructions.md") if not (folder / f).is_file()]
    if missing:
        raise ExercismError(f"{folder}: missing {', '.join(missing)}")
    named = {*ex.solution, *ex.tests}
    support = tuple(sorted(p.name for p in folder.iterdir() if p.is_file() and not p.is_symlink()
                           and not p.name.startswith(".") and p.name not in named))
    return replace(ex, support=support)


def load_exercises(root: Path, which: str = "all") -> list[Exercise]:
    """The exercises `which` names: "all", "tune", "check", a list kept in the split file
    (e.g. "tune10"), or comma-separated exercise names (in that order)."""
    if not root.is_dir():
        raise ExercismError(f"no exercises folder at {root} (give --dir DIR or set {ENV_DIR})")
    sp = split()
    subset_of = {n: s for s in SUBSETS for n in sp[s]}
    present = sorted(p.name for p in root.iterdir() if (p / ".meta" / "config.json").is_file())
    if which == "all":
        names = present
    elif which in sp and isinstance(sp[which], list):
        names = sp[which]
    else:
        names = [n.strip() for n in which.split(",") if n.strip()]
        lists = ", ".join(k for k, v in sp.items() if isinstance(v, list))
        if not names:
            raise ExercismError(f"no exercises named; give all, {lists} or NAME,NAME")
    unknown = [n for n in names if n not in present]
    if unknown:
        raise ExercismError(f"unknown exercise(s) in {root}: {', '.join(unknown[:10])}")
    return [_load(root / n, subset_of.get(n, "")) for n in names]


def _git(root: Path, *args: str) -> str:
    return git.run(root, *args, timeout=30).stdout


def make_repo(ex: Exercise, root: Path) -> str:
    """The exercise's repository in `root`: the stub committed, the tests beside it, out of
    git's view. Returns the commit's sha."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    for key, value in (("user.name", "Eval User"), ("user.email", "eval@example.com"),
                       ("commit.gpgsign", "false")):
        _git(root, "config", key, value)
    for name in (*ex.solution, *ex.kept):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ex.folder / name, root / name)
    exclude = root / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    exclude.write_text("".join(f"/{t}\n" for t in ex.kept) + "__pycache__/\n.pytest_cache/\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "stub")
    return _git(root, "rev-parse", "HEAD").strip()


def restore_tests(ex: Exercise, repo: Path) -> None:
    """Put the original test files (and the files they need) back in the agent's repository."""
    for name in ex.kept:
        shutil.copyfile(ex.folder / name, repo / name)


def run_command(argv: list[str], cwd: Path, timeout_s: float) -> tuple[int | None, str]:
    """(exit code or None on timeout, stdout+stderr) of `argv` in its own process group; on
    timeout the whole group is killed."""
    # the grading run is the same whoever runs it: none of the caller's pytest settings or plugins
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, text=True, errors="replace", env=env,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout_s)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = p.communicate()
        return None, out


def grade(ex: Exercise, repo: Path, timeout_s: float = TEST_TIMEOUT_S,
          tb: str = "short") -> tuple[bool, str]:
    """(passed, test output) for the solution files in `repo`, run against the original tests
    in a fresh directory. `tb`: pytest's traceback style ("short": the failing line; "auto":
    pytest's default, the failing test's whole body)."""
    with tempfile.TemporaryDirectory(prefix=f"spec-agent-grade-{ex.name}-") as tmp:
        work = Path(tmp)
        for name in ex.solution:
            src = repo / name
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            if src.is_file() and not src.is_symlink():
                shutil.copyfile(src, work / name)
        for name in ex.kept:
            shutil.copyfile(ex.folder / name, work / name)
        argv = [sys.executable, "-m", "pytest", "-q", f"--tb={tb}", "--no-header",
                "-p", "no:cacheprovider", "-p", "no:randomly", *ex.tests]
        code, out = run_command(argv, work, timeout_s)
    out = out.replace(str(work) + os.sep, "")
    if code is None:
        return False, _clip(out) + f"\nthe tests ran longer than {timeout_s:.0f} s and were stopped"
    return code == 0, _clip(out)


def _clip(text: str) -> str:
    """The test output as try 2 gets it: at most MAX_OUTPUT_CHARS (its start and its summary)."""
    text = text.strip()
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    tail = text.splitlines()[-1]
    return text[: MAX_OUTPUT_CHARS - len(tail) - 6].rstrip() + "\n...\n" + tail

"""Eval tasks as data: one TOML file per task under agent/eval/tasks/.

A task is a small repository (`[files]`), an instruction for the agent, a check and a
reference solution. The check passes when every part it names holds:
- `script`: Python code run with this interpreter in the repo root (exit 0 = pass), so the
  agent cannot weaken it by editing the repo's own tests;
- `answer`: regular expressions the agent's final answer must each match (case-insensitive);
- `unchanged`: the working tree and HEAD still equal the initial commit (questions).
`[reference]` gives files to write (whole contents) and/or an answer; tests check that every
task's check fails on the untouched repo and passes on the reference.
Each task belongs to the `tune` subset (used while improving prompts and tools) or the
held-out `check` subset (only reported). This module runs no model.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tools import git

TASK_DIR = Path(__file__).parent / "tasks"
SUBSETS = ("tune", "check")
CHECK_TIMEOUT_S = 60.0


class TaskError(Exception):
    """A task file is malformed, or a task name is unknown."""

    exit_code = 2


@dataclass(frozen=True)
class Task:
    name: str
    category: str
    subset: str
    instruction: str
    files: dict[str, str]
    script: str = ""
    answer: tuple[str, ...] = ()
    unchanged: bool = False
    reference_files: dict[str, str] = field(default_factory=dict)
    reference_answer: str = ""


def _load(path: Path) -> Task:
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        check, ref = data.get("check", {}), data.get("reference", {})
        task = Task(
            name=path.stem, category=data["category"], subset=data["subset"],
            instruction=data["instruction"], files=dict(data["files"]),
            script=check.get("script", ""), answer=tuple(check.get("answer", ())),
            unchanged=bool(check.get("unchanged", False)),
            reference_files=dict(ref.get("files", {})), reference_answer=ref.get("answer", ""))
    except (tomllib.TOMLDecodeError, KeyError, TypeError, OSError) as e:
        raise TaskError(f"{path}: {type(e).__name__}: {e}") from None
    if task.subset not in SUBSETS:
        raise TaskError(f"{path}: subset must be one of {SUBSETS}, got {task.subset!r}")
    if not (task.script or task.answer or task.unchanged):
        raise TaskError(f"{path}: the check names nothing to check")
    return task


def load_tasks(subset: str = "all", names: list[str] | None = None) -> list[Task]:
    """Tasks of `subset` ("tune", "check" or "all"), or exactly `names` (in that order)."""
    tasks = {p.stem: _load(p) for p in sorted(TASK_DIR.glob("*.toml"))}
    if names:
        unknown = [n for n in names if n not in tasks]
        if unknown:
            raise TaskError(f"unknown task(s): {', '.join(unknown)}; known: {', '.join(tasks)}")
        return [tasks[n] for n in names]
    if subset != "all" and subset not in SUBSETS:
        raise TaskError(f"subset must be 'all', 'tune' or 'check', got {subset!r}")
    return [t for t in tasks.values() if subset in ("all", t.subset)]


def _git(root: Path, *args: str) -> str:
    return git.run(root, *args, timeout=30).stdout


def make_repo(task: Task, root: Path) -> str:
    """Create the task's repository in `root` (one commit); returns the commit's sha."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    for key, value in (("user.name", "Eval User"), ("user.email", "eval@example.com"),
                       ("commit.gpgsign", "false")):
        _git(root, "config", key, value)
    write_files(root, task.files)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "initial")
    return _git(root, "rev-parse", "HEAD").strip()


def write_files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def apply_reference(task: Task, root: Path) -> str:
    """Write the reference solution into `root`; returns the reference answer."""
    write_files(root, task.reference_files)
    return task.reference_answer


def _changed(root: Path, initial: str) -> bool:
    head = _git(root, "rev-parse", "HEAD").strip()
    return head != initial or bool(_git(root, "status", "--porcelain").strip())


def check(task: Task, root: Path, answer: str, initial: str) -> tuple[bool, str]:
    """(passed, why not) for the repo in `root` and the agent's final `answer`."""
    for pattern in task.answer:
        if not re.search(pattern, answer, re.IGNORECASE):
            return False, f"the answer does not mention /{pattern}/"
    if task.unchanged and _changed(root, initial):
        return False, "the repository was changed"
    if task.script:
        try:
            from tools import procs  # its own group, killed on timeout, dying with us

            p = procs.run([sys.executable, "-c", task.script], cwd=root, text=True,
                          timeout=CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False, f"the check ran longer than {CHECK_TIMEOUT_S:.0f} s"
        if p.returncode != 0:
            lines = (p.stderr or p.stdout).strip().splitlines()
            return False, lines[-1][:200] if lines else f"check exited {p.returncode}"
    return True, ""

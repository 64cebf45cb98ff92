"""The lint-and-test loop: checks run after the agent edits files, their failures fed back.

When a message's model turn ends with an answer and the message edited files since the last
check, the conversation runs, in order:
- `syntax`: each edited `.py` file compiled (`compile()`, as `py_compile` does; nothing runs);
- `ruff`: `ruff check` with only the rules for errors that stop a program (syntax, undefined
  names; Aider's fatal flake8 set) on those files, when `ruff` is installed;
- `lint`: the configured `lint_cmd`, with the edited files appended;
- `test`: the configured `test_cmd`.
The last two run through the `run_shell` tool (the sandbox and its time limit apply). The
first failing check stops the round; its output goes back to the model as a user message,
at most `max_fix_rounds` times per message (0 turns the loop off). `lint_cmd` and `test_cmd`
may not come from a repository's own config (they run commands). Nothing here renders.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUFF_RULES = "E9,F63,F7,F82"  # syntax errors, bad comparisons, misplaced statements, undefined names
MAX_FEEDBACK_CHARS = 3000


@dataclass(frozen=True)
class Outcome:
    kind: str  # syntax | ruff | lint | test
    command: str
    ok: bool
    output: str


def python_files(paths: list[str], root: Path) -> list[str]:
    return [p for p in dict.fromkeys(paths) if p.endswith(".py") and (root / p).is_file()]


def syntax(paths: list[str], root: Path) -> Outcome:
    """Compile each file; the first error as Python reports it (file, line, the line, caret)."""
    import traceback

    for p in paths:
        try:
            source = (root / p).read_text(encoding="utf-8")
            compile(source, p, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            text = "".join(traceback.format_exception_only(type(e), e)).rstrip()
            return Outcome("syntax", f"python -m py_compile {p}", False, text)
        except (OSError, UnicodeDecodeError) as e:
            return Outcome("syntax", f"python -m py_compile {p}", False, f"{p}: {e}")
    return Outcome("syntax", "python -m py_compile " + " ".join(paths), True, "")


def ruff(paths: list[str], root: Path, timeout_s: float = 30.0) -> Outcome | None:
    """`ruff check` on the files with the fatal rules only; None when ruff is not installed."""
    beside = Path(sys.executable).parent / "ruff"  # installed in this interpreter's venv
    exe = shutil.which("ruff") or (str(beside) if beside.is_file() else None)
    if exe is None:
        return None
    argv = [exe, "check", "--no-cache", "--isolated", "--select", RUFF_RULES,
            "--output-format", "concise", "--quiet", "--", *paths]
    shown = "ruff check --select " + RUFF_RULES + " " + " ".join(paths)
    try:
        p = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Outcome("ruff", shown, True, f"ruff did not run: {e}")  # not the code's fault
    out = (p.stdout + p.stderr).strip()
    return Outcome("ruff", shown, p.returncode == 0, out)


def shell(kind: str, command: str, ctx: Any) -> Outcome:
    """A configured command through the run_shell tool (sandbox and time limit apply)."""
    from tools import call_tool

    r = call_tool("run_shell", {"command": command}, ctx)
    return Outcome(kind, command, r.ok, r.output)  # ok: exit code 0


def run_checks(cfg: Any, edited: list[str], ctx: Any):
    """The checks for the files `edited`, in order, stopping at the first failure (a
    generator of Outcomes)."""
    root = Path(ctx.root)
    py = python_files(edited, root)
    if cfg.auto_lint and py:
        out = syntax(py, root)
        yield out
        if not out.ok:
            return
        out = ruff(py, root)
        if out is not None:
            yield out
            if not out.ok:
                return
    present = [p for p in dict.fromkeys(edited) if (root / p).is_file()]
    if cfg.auto_lint and cfg.lint_cmd and present:
        out = shell("lint", f"{cfg.lint_cmd} " + " ".join(_quote(p) for p in present), ctx)
        yield out
        if not out.ok:
            return
    if cfg.auto_test and cfg.test_cmd:
        yield shell("test", cfg.test_cmd, ctx)


def _quote(path: str) -> str:
    import shlex

    return shlex.quote(path)


def feedback(out: Outcome) -> str:
    """The user message that gives a failed check back to the model."""
    text = out.output.strip()
    if len(text) > MAX_FEEDBACK_CHARS:
        text = text[: MAX_FEEDBACK_CHARS // 2] + "\n...\n" + text[-MAX_FEEDBACK_CHARS // 2:]
    what = {"syntax": "The file you wrote does not compile",
            "ruff": "The linter found errors in the code you wrote",
            "lint": "The lint command failed", "test": "The tests failed"}[out.kind]
    return f"{what} (`{out.command}`):\n```\n{text}\n```\nFix the code."

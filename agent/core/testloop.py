"""The lint-and-test loop of one message: which test command it has (`test_command`), the
tests run before its first reply (`tests_now`) and after its edits (`checks`), test files its
replies wrote (`tests_written`), a last check of files an earlier check failed on
(`recheck`), and the files as the message before tested them (`start_state`) or as this
message found them (`start_tested`).

A failed check's output goes back to the model (core/checks.py writes it); what else a
failure leads to, a fresh reply or the best attempt written back, is core/recovery.py's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ..events import CheckRun, Event, Warning
from .approvals import decide
from .attach import ADDED, typed_text
from .attempts import Attempt, read_files, run_score
from .runstate import Run
from .searchreplace import whole_fixes

if TYPE_CHECKING:
    from .conversation import Conversation

TESTS_NOW = ADDED[4] + "{cmd}`):\n{output}"


def test_command(conv: Conversation, text: str) -> tuple[str, bool]:
    """The message's test command: `test_cmd`, else the failing tests `text` shows, else
    the test files it says fail, where infer_test_cmd is on and the approval policy runs
    it sandboxed without asking (core/testcmd.py); and whether it came from what the
    message says (then it is run before the first reply)."""
    cfg = conv.cfg
    if cfg.test_cmd or not (cfg.auto_test and cfg.infer_test_cmd):
        return cfg.test_cmd, False
    if conv.ctx.sandbox == "off":
        return "", False
    from .attach import repo_files
    from .testcmd import infer, says_failing

    said = False
    cmd = infer(text, Path(conv.root))
    if not cmd and says_failing(typed := typed_text(text)):
        cmd, said = infer(typed, Path(conv.root), set(repo_files(conv.ctx))), True
    # only a command the approval policy runs, sandboxed, without asking (full-auto)
    if not cmd or decide(cfg.approval_mode, "shell", "run_shell", {"command": cmd},
                         Path(conv.root)).ask:
        return "", False
    return cmd, said


def tests_now(conv: Conversation, run: Run) -> Iterator[Event]:
    """Run the message's tests before its first reply (a message that says they fail and
    names them); returns what to add to the message: their output when they fail."""
    from .checks import clipped, shell

    if run.cancel.cancelled:
        return ""
    out = shell("test", run.test_cmd, conv.ctx)
    run.tests_fail = not out.ok
    run.start_score = (run.test_cmd, run_score(out.ok, out.output))
    yield CheckRun("test", run.test_cmd, out.ok, out.output, 0, False)
    return "" if out.ok else TESTS_NOW.format(cmd=run.test_cmd, output=clipped(out.output))


def tests_judge(conv: Conversation, run: Run) -> bool:
    """Whether a test command runs after the message's edits (auto_test on)."""
    return conv.cfg.auto_test and bool(run.test_cmd)


def tests_written(conv: Conversation, run: Run, edited: list[str]) -> Iterator[Event]:
    """A message without a test command whose replies wrote or changed test files: those
    files (every reply's so far) are its test command (core/testcmd.written_test_files),
    run after this reply's edits and every later one of the message, under the same
    conditions as an inferred command (infer_test_cmd on, the approval policy running it
    sandboxed without asking). A small model asked for a test often writes the function
    under test instead, or a test function that takes the value to test as an argument;
    the run shows it."""
    cfg = conv.cfg
    if not (cfg.auto_test and cfg.infer_test_cmd) or cfg.test_cmd:
        return
    if conv.ctx.sandbox == "off":
        return
    from .testcmd import pytest_command, written_test_files

    root = Path(conv.root)
    files = list(dict.fromkeys(run.written_tests + written_test_files(edited, root)))
    if files == run.written_tests:
        return
    cmd = pytest_command(files, root)
    if not cmd or decide(cfg.approval_mode, "shell", "run_shell", {"command": cmd}, root).ask:
        return
    run.test_cmd, run.written_tests = cmd, files
    yield Warning(f"the reply wrote test files; `{cmd}` runs after each edit of this message")


def checks(conv: Conversation, run: Run, rewrote: bool = False,
           afresh: Callable[[Conversation, Run, str], Iterator[Event]] | None = None,
           given_back: Callable[[Conversation, Run, bool], bool] | None = None) -> Iterator[Event]:
    """Check the files edited since the last check (core/checks.py); returns the message
    that gives a failure back to the model, or '' (all passed, or the rounds are spent).
    `rewrote`: the files are a reply's unchanged rewrite, so a failure of any check is one
    the model was already shown. `afresh` and `given_back`: the recovery rules a failure
    goes through (core/recovery.py hands them in)."""
    from .checks import feedback, importer_texts, run_checks

    cfg = conv.cfg
    edited, run.edited = run.edited, []
    if cfg.max_fix_rounds <= 0:
        return ""
    if not run.test_cmd or run.written_tests:
        yield from tests_written(conv, run, edited)
    for out in run_checks(cfg, edited, conv.ctx, run.task, run.test_cmd):
        back = not out.ok and run.fix_rounds < cfg.max_fix_rounds
        shown = out.output + (f"\n{out.missing}" if out.missing else "")
        yield CheckRun(out.kind, out.command, out.ok, shown, run.fix_rounds + 1, back)
        run.work.checked(out.kind, out.ok, () if out.kind in ("test", "lint") else edited)
        if out.kind == "test":
            score = run_score(out.ok, out.output)
            files = read_files(conv.root, run.touched)
            run.attempts.tested_run(score, files, run.fix_rounds + 1)
        elif not out.ok:
            run.attempts.rejected()
        if not out.ok:
            free = given_back is not None and given_back(conv, run, rewrote and out.kind == "test")
            run.fix_rounds += back and not free
            if back and out.kind == "test" and afresh is not None:
                yield from afresh(conv, run, score.describe())
            elif back and rewrote and afresh is not None:  # shown, and written out again
                yield from afresh(conv, run, f"the {out.kind} check still fails")
            whole = whole_fixes(cfg.edit_format, edited, conv.root)
            return (feedback(out, conv.root, whole, importer_texts(out, conv.ctx))
                    if back else "")
    run.work.passed(edited)  # every check of these files passed (some yield only failures)
    return ""


def recheck(conv: Conversation, run: Run) -> None:
    """Check again the files an earlier check failed on (a later edit of another file may
    have mended them: an importer that now follows a rename), so the outcome is their
    state at the end of the message. The tests are not run again."""
    from .checks import run_checks

    files = sorted(set().union(*(v for k, v in run.work.failing.items()
                                 if k not in ("test", "lint"))) - {""})
    if not files or run.cancel.cancelled:
        return
    cfg = replace(conv.cfg, auto_test=False, lint_cmd="")
    for out in run_checks(cfg, files, conv.ctx, run.task, ""):
        run.work.checked(out.kind, out.ok, files)
        if not out.ok:
            return
    run.work.passed(files)


def start_state(conv: Conversation, test_cmd: str,
                last: tuple[str, Attempt | None]) -> Attempt | None:
    """The files as the last message's tests saw them (`last`: its test command and those
    files), while the same test command runs and the files are still as they were then (the
    user may have changed them since)."""
    cmd, seen = last
    if (seen is None or not conv.cfg.auto_test or not test_cmd or cmd != test_cmd
            or not seen.on_disk(conv.root)):
        return None
    return seen


def start_tested(conv: Conversation, run: Run) -> Iterator[Event]:
    """Score the files as the message found them, where its tests fail at its end and no test
    run of this message saw those files (a first message has no attempt 0): the score of the
    tests run before its first reply (`tests_now`), else one run of the test command with
    those files written in place (a snapshot taken first), the last attempt's written back
    right after. It becomes the message's attempt 0, which `keep_best` writes back when the
    message left the files worse than it found them. Skipped where a file the message wrote
    did not exist before it, or was not text that could be read back (it could not be put
    back as it was), and where the message edited test files (the two would be scored by
    different tests)."""
    from .testcmd import written_test_files

    att = run.attempts
    if (att.now is None or att.now.ok or att.last is None or run.cancel.cancelled
            or run.written_tests or (att.best is not None and att.best.round == 0)):
        return
    last = att.last.files
    if (not last or any(run.start_files.get(p) is None or last[p] is None for p in last)
            or written_test_files(list(last), Path(conv.root))):
        return
    start = {p: run.start_files[p] for p in last}
    if start == last or not att.last.on_disk(conv.root):
        return
    if run.start_score is not None and run.start_score[0] == run.test_cmd:
        score = run.start_score[1]
    else:
        yield Warning("the tests fail after this message's edits; running them on the files "
                      "as the message found them, to keep the better of the two")
        score, problem = _score_in_place(conv, run, start, last)
        if problem:
            att.edited()  # the files are not known to be as last tested
            yield Warning(problem)
        if score is None:
            return
        run.start_score = (run.test_cmd, score)  # (a Stop hook's further turns reuse it)
    att.start_scored(Attempt(score, start, 0))


def _score_in_place(conv: Conversation, run: Run, start: dict[str, str | None],
                    last: dict[str, str]) -> tuple:
    """(the test command's score with `start` written in place of `last`, or None; '' or
    what went wrong putting `last` back). `last` is put back whatever happens, with its
    modification times, and the bytecode Python cached of these files is dropped before and
    after the run (a cache keyed by size and whole-second time could pass for either text)."""
    import os

    from tools._paths import PathError, confine
    from tools.write_file import atomic_write

    from .checks import shell
    from .snapshots import SnapshotError

    root = conv.root
    try:
        conv.snapshots.take("test the files as the message found them", conv.id)
        times = {p: os.stat(confine(root, p), follow_symlinks=False).st_mtime_ns for p in last}
    except (SnapshotError, PathError, OSError) as e:
        return None, f"the files as the message found them were not tested: {e}"

    def put(files: dict[str, str | None]) -> str:
        try:
            for p, text in files.items():
                atomic_write(confine(root, p), text or "", root)
        except (PathError, OSError) as e:
            return str(e)
        finally:
            _drop_bytecode(root, list(files))
        return ""

    score = None
    try:
        if not put(start):
            out = shell("test", run.test_cmd, conv.ctx)
            score = run_score(out.ok, out.output)
    finally:
        failed = put(last)
        for p, ns in times.items():
            try:
                os.utime(confine(root, p), ns=(ns, ns), follow_symlinks=False)
            except (PathError, OSError, NotImplementedError):
                pass
    if failed:
        return None, (f"the files of the last attempt could not all be put back after testing "
                      f"the files as the message found them ({failed}); `spec-agent undo` "
                      "restores the snapshot taken before")
    return score, ""


def _drop_bytecode(root: Path, paths: list[str]) -> None:
    """Remove `__pycache__/<module>.*.pyc` beside each Python file of `paths`."""
    for p in paths:
        if not p.endswith(".py"):
            continue
        where = (Path(root) / p).parent / "__pycache__"
        for pyc in where.glob(f"{Path(p).stem}.*.pyc") if where.is_dir() else ():
            try:
                pyc.unlink()
            except OSError:
                pass

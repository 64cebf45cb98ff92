"""Edits as the conversation applies them: the files a reply's code blocks write (the
"whole", "diff" and "auto" edit formats), an edit call vetted before it is written and undone
when it leaves a file that does not parse, the snapshot before it, and the commit after.

`block_calls` reads a reply's code blocks (core/wholefile.py, core/searchreplace.py), judges
each against the file (core/editguard.py vets whole-file blocks: markup stripped, left-out
code kept, or refused) and returns the `write_file` calls to make; the conversation runs them
as it runs the model's own calls, so approvals, snapshots and commits apply alike. What the
blocks came to (refused, snippets, files written out as they are) goes to `run.reply` for the
recovery rules (core/recovery.py). Not here: the turn loop, approvals, and what a refusal
leads to.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from tools import ToolResult, call_tool

from ..events import Event, GitAction, Warning
from .attach import ATTACHED, typed_text
from .callformat import ParsedCall, strip_calls
from .editguard import parse_problem, same_code, vet
from .git import GitSafetyError
from .runstate import Run
from .searchreplace import apply_edits, is_edit_fence, parse_edits, whole_verdict
from .snapshots import SnapshotError
from .wholefile import (FileBlock, asks_change, copies, current_text, defined, forbids_change,
                        is_snippet, judge, names_new_file, owners_in, parse_blocks, prose, quotes,
                        retarget, spliced)

if TYPE_CHECKING:
    from .conversation import Conversation


def block_calls(conv: Conversation, run: Run, reply: str, message: str) -> Iterator[Event]:
    """The `write_file` calls for the files `reply` gives in full and, in "diff" and "auto",
    for its search/replace blocks (core/searchreplace.py); each block is judged and vetted
    here, against the text the reply read. Why a block was not applied goes to
    `run.reply.refused` (and to the outcome, core/outcome.py)."""
    calls = []
    rep = run.reply
    rep.refused, rep.snippets = [], []  # (about this reply only)
    attached = list(dict.fromkeys(ATTACHED.findall(message)))
    default = attached[0] if len(attached) == 1 else ""
    text, fmt, root = strip_calls(reply), conv.cfg.edit_format, conv.root
    rep.bare = not prose(text)
    edited: set[str] = set()
    if fmt != "whole":
        edits, malformed = parse_edits(text, default)
        problems = list(malformed)
        for fe in apply_edits(edits, root, attached):
            problems += fe.problems
            if fe.problems:
                run.work.edit_failed(fe.path, fe.problems[0])
            if fe.content is not None:
                edited.add(fe.path)
                calls.append(ParsedCall("write_file", {"path": fe.path, "content": fe.content}))
        for why in problems:
            yield Warning(why)
        rep.refused += problems
        for why in malformed:
            run.work.edit_failed("", why)
    skip = is_edit_fence if fmt != "whole" else None
    asked, wanted = intent(conv, run)
    shown_files = list(dict.fromkeys(p for m in conv.messages if m["role"] == "user"
                                     for p in ATTACHED.findall(str(m["content"]))))
    # Code without its file's name, or under a new file's, goes to a file this message
    # attached; not for a message that only asks a question or names a new file.
    owners = (owners_in(root, attached)
              if asks_change(asked) and not names_new_file(asked, root) else {})
    blocks = parse_blocks(text, default, skip, owners)
    written = [b.path for b in blocks]
    seen = shown_files + written
    for block in blocks:
        if block.path in edited:  # the reply's edit blocks for it win
            continue
        if (owner := retarget(block, root, owners, asked, wanted, written)):
            yield Warning(f"the code block names {block.path}, a new file, and redefines "
                          f"{', '.join(sorted(defined(block.content)))} of {owner}; "
                          f"written to {owner}")
            written.append(owner)  # (one block a file: a second one is not merged in)
            block = FileBlock(owner, block.content)
        shown = run.marks.shown.get(block.path)
        verdict = judge(block, root, shown)
        if (fmt != "diff" and is_snippet(verdict)
                and (whole := spliced(block, root, wanted, asked, shown))):
            yield Warning(f"the code block for {block.path} is only some of its definitions; "
                          "spliced them into the file")
            block, verdict = whole, "same" if judge(whole, root) == "same" else ""
        elif fmt != "whole":
            verdict = whole_verdict(block, root, fmt)
        if verdict == "" and (other := copies(block, root, seen, wanted, tuple(written))):
            verdict = (f"the code block for {block.path} is the text of {other}, not a "
                       f"version of {block.path}: not applied")
        if verdict == "":
            block, verdict = yield from vetted(root, block, wanted, shown)
        if verdict == "same":
            rep.same.append(block.path)
            # (UNCHANGED asks for the whole file again, which "diff" does not take)
            if fmt != "diff" and wrote_before(conv.messages, block.content):
                rep.unchanged.append(block.path)
            continue
        if verdict:
            yield Warning(verdict)
            if not quotes(block, root):
                rep.refused.append(verdict)
                run.work.edit_failed(block.path, verdict)
                if fmt == "whole" and is_snippet(verdict):
                    rep.snippets.append(block.path)
            continue
        calls.append(ParsedCall("write_file", {"path": block.path, "content": block.content}))
    if calls and forbids_change(asked):
        yield Warning("the message asks for no change: the reply's code for "
                      f"{', '.join(c.arguments['path'] for c in calls)} is not written")
        return []
    return calls


def intent(conv: Conversation, run: Run) -> tuple[str, str]:
    """(what the message typed; that, the earlier request and the reply before the
    message): what a reply that writes only part of a file answers (core/pymerge.py). A
    restarted reply answers the earlier request; a "yes, go ahead" agrees to the reply."""
    asked = typed_text(run.task)
    parts = [asked]
    if 0 <= run.request < len(conv.messages):
        parts.append(typed_text(conv.messages[run.request]["content"]))
    before = next((m["content"] for m in reversed(conv.messages[:max(run.base - 1, 0)])
                   if m["role"] == "assistant"), "")
    return asked, "\n".join([*parts, prose(before)])


def vetted(root: Path, block: FileBlock, wanted: str, shown: str | None) -> Iterator[Event]:
    """(block, verdict) once core/editguard.py has vetted a whole-file block: markup
    stripped, left-out code put back, or why it is refused; "same" where it now equals
    the file."""
    old = current_text(root, block.path, shown)
    got = vet(block.path, old, block.content, wanted)
    for note in got.notes:
        yield Warning(note)
    if got.problem:
        return block, got.problem
    if got.kept:
        listed = ", ".join(got.kept[:6]) + (", ..." if len(got.kept) > 6 else "")
        yield Warning(f"the code block for {block.path} leaves out {listed}, which the "
                      "message does not ask to remove; kept them")
    block = FileBlock(block.path, got.content)
    if old is not None and same_code(block.path, old, block.content):
        return block, "same"  # (blank lines or comments alone are no change)
    return block, "same" if judge(block, root) == "same" else ""


def wrote_before(messages: list[dict[str, str]], content: str) -> bool:
    """Did an assistant message before the last one already write out `content`? (A
    model that writes out a file it wrote before, after being told it fails, is stuck;
    a first quote of a file is a fair answer.)"""
    body = content.strip("\n")
    return bool(body) and any(m["role"] == "assistant" and body in m["content"]
                              for m in messages[:-1])


def edit(conv: Conversation, call: ParsedCall, tool, run: Run,
         vetting: bool = True) -> Iterator[Event]:
    """Run an edit call through core/editguard.py: a whole-file write is vetted before it
    is written (with `vetting`: markup stripped, left-out code kept, or refused); any edit that
    leaves a file that does not parse is undone, so nothing broken is written or
    committed."""
    root = conv.root
    if forbids_change(typed_text(run.task)):
        return ToolResult.error("the message asks for no change to any file: not written")
    paths = [str(call.arguments.get(arg, "")) for arg in tool.paths]
    before = {p: current_text(root, p) for p in paths}
    if vetting and call.name == "write_file" and paths:
        path = paths[0]
        _, wanted = intent(conv, run)
        got = vet(path, before[path], str(call.arguments.get("content", "")), wanted)
        for note in got.notes:
            yield Warning(note)
        if got.problem:
            return ToolResult.error(got.problem)
        if got.kept:
            yield Warning(f"the write of {path} leaves out {', '.join(got.kept[:6])}, "
                          "which the message does not ask to remove; kept them")
        call = ParsedCall(call.name, {**call.arguments, "content": got.content})
    result = call_tool(call.name, call.arguments, conv.ctx)
    note_start(root, run, before, result.changed)
    for path in result.changed:
        text = current_text(root, path)
        problem = parse_problem(path, text) if text is not None else ""
        if problem:
            return undo_write(root, path, before.get(path), problem)
    return result


def note_start(root: Path, run: Run, before: dict[str, str | None], changed: list[str]) -> None:
    """Record, for each file an edit changed, its text before the message's first edit of it
    (`before`: by the call's path, which may be spelled otherwise than the changed one)."""
    from tools._paths import PathError, confine

    for path in changed:
        if path in run.start_files:
            continue
        text = before.get(path)
        if path not in before:
            try:
                full = confine(root, path)
                text = next((t for p, t in before.items() if confine(root, p) == full), None)
            except PathError:
                text = None
        run.start_files[path] = text


def snapshot(conv: Conversation, call: ParsedCall) -> str:
    """Save the work tree before an action that may change it ('' or why it could not be)."""
    what = call.arguments.get("command") or call.arguments.get("path") or ""
    try:
        conv.snapshots.take(f"{call.name} {what}", conv.id)
    except SnapshotError as e:
        return f"{e}; not running {call.name} (nothing was changed)"
    return ""


def protect(conv: Conversation, path: str) -> str:
    """'' when `path` may be edited (inside the repo; the user's changes to it saved first,
    core/git.py), else why not."""
    from tools._paths import PathError, confine

    try:
        confine(conv.root, path)
    except PathError as e:
        return str(e)
    return conv.git.protect(path)


def commit(conv: Conversation, changed: list[str], run: Run) -> Iterator[Event]:
    """Commit the turn's changed files, less any that do not parse."""
    broken = [p for p in dict.fromkeys(changed)
              if parse_problem(p, current_text(conv.root, p) or "")]
    if broken:  # (changed since the edit, e.g. by a command): never committed
        yield Warning(f"not committed: {', '.join(broken)} does not parse")
        changed = [p for p in changed if p not in broken]
    if not changed:
        return
    try:
        sha = conv.git.commit_turn(changed, run.task, run.turn)
    except GitSafetyError as e:
        yield Warning(str(e))
        return
    if sha:
        files = tuple(sorted(set(changed)))
        yield GitAction("commit", f"committed the agent's edits as {sha}", sha, files)


def undo_write(root: Path, path: str, before: str | None, problem: str) -> ToolResult:
    """Put `path` back as it was before an edit that left it unparseable (remove it where the
    edit created it); the result says so, for the model."""
    from tools._paths import PathError, confine
    from tools.write_file import atomic_write

    try:
        full = confine(root, path)
        if before is None:
            full.unlink(missing_ok=True)
        else:
            atomic_write(full, before, root)
    except (PathError, OSError) as e:
        return ToolResult.error(f"{path} does not parse after this edit ({problem}), and it "
                                f"could not be put back: {e}")
    return ToolResult.error(f"{path} does not parse after this edit ({problem}): not applied; "
                            "the file is as it was")

"""What the model reads of a conversation, item by item, and the user's hold on it: the
`/context`, `/add` and `/drop` commands (agent/ui/slash.py).

`report` lists the system prompt, each message and each file attached to it, with tokens, and
the total against the model's window. `add` attaches files to the conversation as a note (a
user message holding them, as `@path` would). `drop` leaves attached files, or the last
message the user sent and everything after it (a cancelled one, say), out of what the model
reads from then on: each such message is replaced in the conversation's `Budget` view by a
short note, as the context budget elides old outputs (agent/core/budget.py), so the history
stays well-formed and the saved history keeps everything (a resumed conversation reads it
whole again).

Engine-neutral: tokens come from the backend's `count_tokens` where its capabilities
(agent/core/backend.py) have one, else are estimated as characters / 3. Nothing here draws, loads a model or runs one.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Callable

from .attach import ADDED, approx_tokens, attachment, repo_files, size, typed_text
from .callformat import RESULT_OPEN

# An attached file as core/attach.py writes it: a `<file path=...>` line, the text, and a
# `</file>` line that ends the message or comes before the next block or a part the agent
# added after it (each begins with a blank line: ADDED). A message can hold several runs of
# blocks: the `@path` files a UI attached, then the agent's listing, lookups and files.
BLOCK = re.compile(r'\n<file path="([^"\n]+)">\n(.*?)\n</file>(?=\n<file path="|\n\n|\Z)',
                   re.DOTALL)
ADD_NOTE = "Files the user added to the conversation (/add):"
DROPPED_FILE = "[file {path}: {chars} characters, dropped from the context by the user]"
WITHDRAWN = "[message withdrawn by the user (/drop last)]"
WITHDRAWN_AFTER = "[left out with the withdrawn message before it]"
MAX_ADD = 20  # files one /add may attach
# What a chat template may raise for a message it does not take alone (e.g. roles that must
# alternate; also jinja2's TemplateError, see `_count_errors`): the count falls back to the
# estimate.
COUNT_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError, KeyError, IndexError)


def _count_errors() -> tuple[type[BaseException], ...]:
    try:
        from jinja2 import TemplateError
    except ImportError:  # a backend without chat templates
        return COUNT_ERRORS
    return (*COUNT_ERRORS, TemplateError)


class ContextError(Exception):
    """A /add or /drop argument that names nothing it could act on (one line for the user)."""


@dataclass(frozen=True)
class Item:
    """One line of `report`: a message (`depth` 0) or a file attached to it (`depth` 1)."""

    label: str
    tokens: int
    depth: int = 0


def view(conv: Any) -> list[dict[str, str]]:
    """The history as the model reads it (drops and the budget's elisions applied)."""
    return conv.budget.view(conv.messages)


class Counter:
    """Tokens of a text or a prompt by the model's own counter where it has one (a one-message
    prompt less the same prompt with the text empty), else characters / 3."""

    def __init__(self, model: Any):
        self.count: Callable[[list[dict[str, str]]], int] | None = model.capabilities.count_tokens
        self._empty: dict[str, int] = {}
        self.exact = self.count is not None
        self.errors = _count_errors() if self.count is not None else ()

    def text(self, text: str, role: str = "user") -> int:
        if self.count is not None:
            try:
                if role not in self._empty:
                    self._empty[role] = self.count([{"role": role, "content": ""}])
                return max(0, self.count([{"role": role, "content": text}]) - self._empty[role])
            except self.errors:
                self.exact = False
        return approx_tokens(len(text))

    def prompt(self, messages: list[dict[str, str]]) -> int | None:
        if self.count is not None:
            try:
                return self.count(messages)
            except self.errors:
                self.exact = False
        return None


def items(conv: Any, counter: Counter) -> list[Item]:
    """The system prompt, each message of the view, and each file attached to a message."""
    out: list[Item] = []
    for i, m in enumerate(view(conv)):
        text = m["content"]
        if i == 0 and m["role"] == "system":
            out.append(Item("system prompt", counter.text(text, "system")))
            continue
        out.append(Item(f"#{i} {_label(m)}", counter.text(text, m["role"])))
        at = text.find(ADDED[3])
        if m["role"] == "user" and at >= 0:
            for b in BLOCK.finditer(text, at):
                out.append(Item(b.group(1), counter.text(b.group(0), "user"), 1))
    return out


def _label(m: dict[str, str]) -> str:
    text = m["content"]
    if text.startswith(RESULT_OPEN):
        name = re.match(r'<tool_result name="([^"\n]*)"', text)
        return f"tool result{' of ' + name.group(1) if name else ''}"
    first = (typed_text(text) if m["role"] == "user" else text).strip().split("\n", 1)[0]
    return f"{m['role']}: {first[:60]}{'…' if len(first) > 60 else ''}"


def report(conv: Any) -> str:
    """What the model reads now, a line an item with its tokens, and the total against the
    model's window (the `/context` command)."""
    counter = Counter(conv.model)
    rows = items(conv, counter)
    total = counter.prompt(view(conv))
    summed = sum(r.tokens for r in rows if not r.depth)  # (a file is part of its message)
    if total is not None and total > summed:
        rows.append(Item("chat template (role markers, tool schemas)", total - summed))
    total = summed if total is None else max(total, summed)
    caps = conv.model.capabilities
    limit, reserve = caps.context_limit, caps.reply_reserve
    mark = "" if counter.exact else "~"
    head = f"context: {mark}{total} tokens"
    if limit:
        head += f" of {limit} ({total / limit:.0%}); the reply may take up to {reserve} more"
    width = len(str(max([r.tokens for r in rows] + [total])))
    lines = [head] + [f"  {r.tokens:>{width}}  " + "  " * r.depth + r.label for r in rows]
    lines.append("/add PATH attaches a file; /drop PATH|all leaves attached files out; "
                 "/drop last leaves out the last message and its replies")
    return "\n".join(lines)


def add(conv: Any, ctx: Any, args: list[str]) -> str:
    """Attach the repository files `args` name (paths or glob patterns, `@` optional) to the
    conversation as one note; returns what was added. ContextError when none can be."""
    files = repo_files(ctx)
    known = set(files)
    wanted: list[str] = []
    for arg in args:
        arg = arg.removeprefix("@").removeprefix("./")
        hits = fnmatch.filter(files, arg) if any(c in arg for c in "*?[") else [arg] * (arg in known)
        if not hits:
            raise ContextError(f"/add: no file in the repository matches {arg}")
        wanted += hits
    wanted = list(dict.fromkeys(wanted))
    if len(wanted) > MAX_ADD:
        raise ContextError(f"/add: {len(wanted)} files match; at most {MAX_ADD} at a time")
    present = {b.group(1): b.group(2) for m in view(conv) if m["role"] == "user"
               for b in BLOCK.finditer(m["content"])}
    blocks, added, same = [], [], []
    for path in wanted:
        content = attachment(ctx.root, path)
        if content is None:
            raise ContextError(f"/add: {path} cannot be attached (binary, unreadable or not a "
                               "regular file)")
        if present.get(path) == content:
            same.append(path)
            continue
        blocks.append(f'<file path="{path}">\n{content}\n</file>')
        added.append(f"{path} ({size(len(content))}, ~{approx_tokens(len(content))} tokens)")
    if blocks:
        conv.add_note(ADD_NOTE + ADDED[3] + "\n" + "\n".join(blocks))
    out = [f"added {', '.join(added)}"] if added else []
    if same:
        out.append(f"already in the context as it is: {', '.join(same)}")
    return "; ".join(out)


def drop(conv: Any, args: list[str]) -> str:
    """Leave out of what the model reads: the attached files `args` name (paths or globs),
    every attached file (`all`), or the last message the user sent and what followed it
    (`last`). Returns what was dropped; ContextError when nothing matches."""
    if args == ["last"]:
        return _drop_last(conv)
    everything = args == ["all"]
    patterns = [a.removeprefix("@").removeprefix("./") for a in args]
    dropped: dict[str, int] = {}

    def one(b: re.Match) -> str:
        path = b.group(1)
        if not everything and not any(fnmatch.fnmatchcase(path, p) for p in patterns):
            return b.group(0)
        dropped[path] = dropped.get(path, 0) + 1
        return f"\n{DROPPED_FILE.format(path=path, chars=len(b.group(2)))}"

    for i, m in enumerate(view(conv)):
        at = m["content"].find(ADDED[3])
        if m["role"] != "user" or at < 0:
            continue
        text = m["content"]
        new = text[:at] + BLOCK.sub(one, text[at:])
        if new != text:
            conv.budget.done[i] = {**m, "content": new}
    if not dropped:
        what = "no file is attached" if everything else f"not attached: {' '.join(args)}"
        raise ContextError(f"/drop: {what} (/context lists what is)")
    return "dropped " + ", ".join(p + (f" (x{n})" if n > 1 else "") for p, n in dropped.items())


def last_request(conv: Any) -> int:
    """The index of the last message the user sent (not a tool result, not a note the agent
    added itself); -1 when there is none."""
    at = conv.last_request
    if 0 <= at < len(conv.messages):
        return at
    for i in range(len(conv.messages) - 1, 0, -1):  # (a resumed conversation: no record)
        m = conv.messages[i]
        if m["role"] == "user" and not m["content"].startswith(RESULT_OPEN):
            return i
    return -1


def _drop_last(conv: Any) -> str:
    at = last_request(conv)
    seen = view(conv)
    if at < 0 or seen[at]["content"] == WITHDRAWN:
        raise ContextError("/drop last: no message to drop")
    for i in range(at, len(seen)):
        conv.budget.done[i] = {**seen[i], "content": WITHDRAWN if i == at else WITHDRAWN_AFTER}
    n = len(seen) - at
    first = typed_text(conv.messages[at]["content"]).strip().split("\n", 1)[0][:60]
    return (f"dropped the last message ({first!r}) and {n - 1} after it from what the model "
            "reads (the saved history keeps them)")


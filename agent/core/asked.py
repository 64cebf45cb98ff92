"""Names a message asks the agent to create, and whether its edits contain them.

"Add a --shout flag to hello.py", "Add a parameter greeting to greet", "Create test_strutil.py
with a test function test_shout", "Rename area to rect_area": each names something that does
not exist yet and must exist once the message is done. A small model often writes code that
does something near the request without it (the output upper-cased with no flag, the existing
parameter given a default, the function copied into the test file), and the file compiles,
lints and imports. The lint-and-test loop (core/checks.py) checks, after the message's edits,
that each such name occurs in an edited file, and tells the model which ones do not.

A name counts as asked for only where the request is explicit: a sentence with a verb of
creation (add, create, write, introduce, define, implement, support, accept, rename ... to)
that names it as a command-line flag (`--name`), after a kind word ("a parameter greeting", "a
test function test_shout", "a method called load"), or as the new name of a rename. It must
occur in none of the repository's files when the message arrives (a name that exists is not
being created), and at most MAX_ASKED names are kept. Nothing runs; files are read as a
message's attachments are (agent/core/attach.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .attach import NOT_NAMES, attachment

MAX_ASKED = 4
MAX_SCANNED = 400  # repository files searched for the names before the message's edits
_CREATE = re.compile(r"\b(?:add|adds|adding|create|creates|creating|write|introduce|define|"
                     r"implement|support|accept|rename|renaming)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")
_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*\w)")
_KINDED = re.compile(r"\b(?:(?:function|method|class|variable|constant|attribute|field|parameter|"
                     r"argument|property|option|flag)\s+)+(?:(?:called|named)\s+)?"
                     r"`?([A-Za-z_]\w*)`?(?!\w|\.\w)", re.IGNORECASE)
_RENAMED_TO = re.compile(r"\brenam\w*\b.*?\bto\s+`?([A-Za-z_]\w*)`?(?!\w|\.\w)", re.IGNORECASE)


def _word(name: str) -> re.Pattern:
    if name.startswith("-"):
        return re.compile(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])")
    return re.compile(r"\b" + re.escape(name) + r"\b")


def requested(text: str) -> list[str]:
    """The names `text` asks to create (flags, kind-worded names, rename targets), in order."""
    found: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        if not _CREATE.search(sentence):
            continue
        hits = [(m.start(1), m.group(1)) for m in _FLAG.finditer(sentence)]
        hits += [(m.start(1), m.group(1)) for m in _KINDED.finditer(sentence)]
        hits += [(m.start(1), m.group(1)) for m in _RENAMED_TO.finditer(sentence)]
        for _, name in sorted(hits):
            if name.startswith("-") or (len(name) >= 3 and name.lower() not in NOT_NAMES):
                found.append(name)
    return list(dict.fromkeys(found))


def asked_names(text: str, root: Path, files: list[str]) -> list[str]:
    """The names `text` asks to create that none of the repository's `files` contains now."""
    names = requested(text)
    if not names:
        return []
    left = {n: _word(n) for n in names}
    for path in files[:MAX_SCANNED]:
        content = attachment(root, path)
        if content is None:
            continue
        for n in [n for n, pat in left.items() if pat.search(content)]:
            del left[n]
        if not left:
            return []
    return list(left)[:MAX_ASKED]


def missing_asked(names: list[str], paths: list[str], root: Path) -> list[str]:
    """The `names` that none of the files `paths` (as they are now) contains."""
    texts = [t for t in (attachment(root, p) for p in paths) if t is not None]
    return [n for n in names if not any(_word(n).search(t) for t in texts)]


def message_names(message: str, ctx: Any) -> list[str]:
    """`asked_names` for a user message as it arrives: its typed text, the repository's files."""
    from .attach import repo_files, typed_text

    typed = typed_text(message)
    if not requested(typed):
        return []
    return asked_names(typed, Path(ctx.root), repo_files(ctx))

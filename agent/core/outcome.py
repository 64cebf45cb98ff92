"""How a message that the model answered really ended: the work done, or why not.

A turn loop ends "answered" when the model stops calling tools. That says nothing of the
work: an edit may have been refused or failed, the checks of the edits may still fail, or no
file changed though the person asked for a change. Each gets its own stop reason, an error
in `-p` (exit code 5, agent/exit_codes.py) and a line in every UI, so a run never reports
success on damage or on nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .testcmd import sentences
from .wholefile import forbids_change

# verbs that ask for a change to the code (in a sentence that is not a question, or in a
# request phrased as one: "Can you fix ...?")
CHANGE = re.compile(
    r"\b(?:fix|repair|add|implement|change|update|make|rename|remove|delete|drop|refactor|"
    r"rewrite|write|create|replace|convert|move|support|handle|correct|improve|optimi[sz]e|"
    r"extend|modify|edit|clean|introduce|use|bump|upgrade|port|insert|append|split|merge|"
    r"extract|inline|document|annotate|reformat|sort|raise|return|allow|prevent|ensure|set|"
    r"turn|patch|resolve|complete|finish|generate|debug|adjust|tweak|restore|revert|undo)\b",
    re.IGNORECASE)
REQUEST = re.compile(r"^\s*(?:please\b|(?:can|could|would|will) you\b|pls\b)", re.IGNORECASE)
# a verb a sentence negates ("do not change the tests") asks for nothing
NEGATED = re.compile(r"\b(?:do not|don't|dont|without|never|not)\s+\w+", re.IGNORECASE)

# the three stop reasons of a message whose work is not done, with the line a UI shows
NOT_DONE = {
    "checks_failed": "the checks of the edits still fail",
    "edit_failed": "an edit was refused or failed, and no later one replaced it",
    "no_change": "no file changed, though the message asks for a change",
}


def asks_edit(text: str) -> bool:
    """Does `text` (what the person typed) ask for a change to files? Not where it forbids
    every change ("do not change any file", "just explain"); a verb it negates ("fix it but
    do not change the tests") does not count."""
    if forbids_change(text):
        return False
    for s in sentences(text):
        if not CHANGE.search(NEGATED.sub(" ", s)):
            continue
        if not s.rstrip().endswith("?") or REQUEST.search(s):
            return True
    return False


@dataclass
class Work:
    """What one message's replies did, as far as the outcome goes."""

    failed: dict[str, str] = field(default_factory=dict)  # path -> why its last edit failed
    # check kind -> the files it last failed on ("" for a check of the whole repository)
    failing: dict[str, set[str]] = field(default_factory=dict)
    changed: bool = False  # a file of the work tree changed (an edit applied)
    shell_ran: bool = False  # a shell command ran (it may have changed files unseen)

    def edit_failed(self, path: str, why: str) -> None:
        self.failed[path] = why

    def edit_applied(self, paths: tuple[str, ...] | list[str]) -> None:
        for p in paths:
            self.failed.pop(p, None)
        self.changed = self.changed or bool(paths)

    def checked(self, kind: str, ok: bool, files: list[str] | tuple[str, ...] = ()) -> None:
        """A check of `kind` over `files` (none: the whole repository, as the tests) ran."""
        if not ok:
            self.failing.setdefault(kind, set()).update(files or ("",))
        elif not files:
            self.failing.pop(kind, None)
        else:
            self.passed(files, (kind,))

    def passed(self, files: list[str] | tuple[str, ...], kinds: tuple[str, ...] = ()) -> None:
        """Checks of `kinds` (every kind) passed on `files`: failures on them are over."""
        for kind in list(kinds or self.failing):
            left = self.failing.get(kind, set()) - set(files)
            if left:
                self.failing[kind] = left
            else:
                self.failing.pop(kind, None)


def verdict(asked: str, work: Work) -> tuple[str, str]:
    """(stop_reason, error) of a message the model answered: ("answered", "") when the work is
    done as far as anything shows, else a reason of NOT_DONE and its one-line detail."""
    failing = list(work.failing)
    if failing:
        return "checks_failed", f"{NOT_DONE['checks_failed']} ({', '.join(failing)})"
    wants = asks_edit(asked)
    if work.failed and wants:
        first = next(iter(work.failed.values()))
        more = f" (+{len(work.failed) - 1} more)" if len(work.failed) > 1 else ""
        return "edit_failed", f"{NOT_DONE['edit_failed']}: {first}{more}"
    if wants and not work.changed and not work.shell_ran:
        return "no_change", NOT_DONE["no_change"]
    return "answered", ""

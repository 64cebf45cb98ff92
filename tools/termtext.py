"""A command's output as plain text: terminal control sequences taken out.

What a program prints for a terminal (colours, cursor moves, window titles, progress bars
redrawn with carriage returns, backspace overstrikes) is noise, or a trick, once the output is
read instead of shown: `plain_output(text)` is the text a terminal would leave on screen,
line by line. It is applied to `run_shell`'s output (what the model gets) and to the user's
`!command` output (what the screen, the model and the saved conversation get). It does not
escape what is left for display: agent/core/shown.py does that, for every UI.
"""

from __future__ import annotations

import re

# ESC-introduced sequences (ECMA-48) and their one-character C1 forms. String sequences
# (OSC, DCS, SOS, PM, APC) end at BEL or ST; an unended one is dropped to the end of its line.
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI: colours (SGR), cursor moves, erases
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"  # two-character escapes: charsets (ESC ( B), keypad, reset (ESC c)
)
_LEFT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # controls but tab and newline


def _last_redraw(line: str) -> str:
    """What is left of a line redrawn with carriage returns: its last non-empty version."""
    parts = [p for p in line.split("\r") if p]
    return parts[-1] if parts else ""


def _overstruck(line: str) -> str:
    """A line with each backspace taking back the character before it."""
    kept: list[str] = []
    for ch in line:
        if ch != "\x08":
            kept.append(ch)
        elif kept:
            kept.pop()
    return "".join(kept)


def plain_output(text: str) -> str:
    """`text` without escape sequences and control characters (tab and newline kept); a line
    rewritten with `\\r` (a progress bar) becomes its last version, a backspace removes the
    character before it (the overstrike of man pages)."""
    if not _LEFT.search(text):
        return text
    text = _SEQUENCE.sub("", text)
    text = text.replace("\r\n", "\n")
    if "\r" in text:
        text = "\n".join(_last_redraw(line) if "\r" in line else line for line in text.split("\n"))
    if "\x08" in text:
        text = "\n".join(_overstruck(line) if "\x08" in line else line for line in text.split("\n"))
    return _LEFT.sub("", text)

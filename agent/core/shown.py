"""Text a UI shows the user to decide on, with nothing in it a terminal would act on.

A model-written command can carry a carriage return or an escape sequence that makes the
approval *display* as something else (`rm -f x\\r$ ls` shows as `$ ls`), or bidi controls
that reorder what is read. `shown(text)` escapes them visibly: C0 controls but newline and
tab, DEL, C1 controls, and the Unicode bidi embedding, override, isolate and mark characters
become `\\r`, `\\x1b`, `\\u202e`, ... Every approval (REPL, TUI, ACP, `-p` logs) is built from
text passed through it (agent/core/preview.py builds the request; the ACP title and the `-p`
lines call it too). What it does not do: judge the command.
"""

from __future__ import annotations

import re

_NAMED = {"\r": "\\r", "\b": "\\b", "\f": "\\f", "\v": "\\v", "\x00": "\\0", "\x1b": "\\x1b"}
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}\u2028\u2029]")


def _escape(m: re.Match) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def shown(text: str, keep_newlines: bool = True) -> str:
    """`text` with control and bidi characters escaped (newline and tab kept unless
    `keep_newlines` is False: then `\\n` and `\\t` are escaped too, for one-line displays)."""
    text = _CONTROL.sub(_escape, text)
    if not keep_newlines:
        text = text.replace("\n", "\\n").replace("\t", "\\t")
    return text


def has_controls(text: str) -> bool:
    return bool(_CONTROL.search(text))

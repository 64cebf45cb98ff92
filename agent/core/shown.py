"""Text a terminal shows, with nothing in it the terminal would act on or hide.

Everything the UIs write to a terminal that the model, a tool, a repository file, an MCP
server or a command wrote goes through `shown(text)`: the REPL (agent/ui/repl.py writes every
line through it, the live view too), the `-p` text log (agent/ui/render.py) and the TUI
(agent/ui/tui_widgets.py builds its renderables from it, as plain `Text`, never markup).
A model-written command can carry a carriage return or an escape sequence that makes the
approval *display* as something else (`rm -f x\\r$ ls` shows as `$ ls`), a tool result can
carry `ESC[8m` that hides the approval after it, and bidi or zero-width characters reorder or
hide what is read. `shown` escapes them visibly: C0 controls but newline and tab, DEL, C1
controls, the Unicode bidi embedding, override, isolate and mark characters, zero-width and
other invisible format characters become `\\r`, `\\x1b`, `\\u202e`, ... The result holds no
control character, so `shown(shown(t)) == shown(t)`. Approvals are built from it too
(agent/core/preview.py). What it does not do: judge the text, or take sequences out of a
command's output (`plain_output`, tools/termtext.py, does that before the output is kept).
JSON outputs are not terminals: json.dumps escapes for them.
"""

from __future__ import annotations

import re

from tools.termtext import plain_output  # noqa: F401 - output cleaning beside display escaping

_NAMED = {"\r": "\\r", "\b": "\\b", "\f": "\\f", "\v": "\\v", "\x00": "\\0", "\x1b": "\\x1b"}
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# Shown as nothing, or as a join: soft hyphen, Mongolian vowel separator, zero-width space,
# (non-)joiner, word joiner and invisible operators, BOM, the tag characters.
_INVISIBLE = "\u00ad\u180e\u200b-\u200d\u2060-\u2064\ufeff\U000e0000-\U000e007f"
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}{_INVISIBLE}\u2028\u2029]")


def _escape(m: re.Match) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def shown(text: str, keep_newlines: bool = True) -> str:
    """`text` with control, bidi and invisible characters escaped (newline and tab kept unless
    `keep_newlines` is False: then `\\n` and `\\t` are escaped too, for one-line displays)."""
    text = _CONTROL.sub(_escape, text)
    if not keep_newlines:
        text = text.replace("\n", "\\n").replace("\t", "\\t")
    return text


def has_controls(text: str) -> bool:
    return bool(_CONTROL.search(text))

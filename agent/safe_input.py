"""Parsing what comes from outside (files, a server, a client) without crashing on it.

Python's json and tomllib parsers recurse once per nesting level, so a document of
`[[[[...` raises RecursionError (an uncaught crash, not a parse error) and a lone surrogate
escape (`"\\ud800"`) gives a string no UTF-8 stream can write. Every boundary that reads
JSON or TOML made by someone else goes through here:

- `loads(text)`: `json.loads` that refuses nesting deeper than MAX_DEPTH before parsing
  (raising `json.JSONDecodeError`, which callers already handle as "not JSON") and turns
  lone surrogates into U+FFFD.
- `loads_toml(text)`: `tomllib.loads` with the same nesting answer (`TOMLDecodeError`).
- `clean_text(text)`: a string with lone surrogates replaced (for text that did not come
  through `loads`).

Nothing here knows what the documents mean; the callers check types and fields.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64  # deeper than any document we or a conforming peer writes
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def nesting(text: str) -> int:
    """How deeply the arrays and objects of the JSON `text` nest (brackets inside strings
    do not count; for text that is not JSON, an estimate)."""
    brackets = _BRACKET.findall(_STRING.sub("", text)) if ("[" in text or "{" in text) else []
    if not brackets:
        return 0
    return max(accumulate(1 if b in "[{" else -1 for b in brackets))


def check_depth(text: str, max_depth: int = MAX_DEPTH) -> None:
    """json.JSONDecodeError when `text` nests deeper than `max_depth` (for callers of
    `json.JSONDecoder.raw_decode`, which parses a prefix)."""
    depth = nesting(text)
    if depth > max_depth:
        raise json.JSONDecodeError(f"nested {depth} levels deep (the limit is {max_depth})", text, 0)


def clean_text(text: str) -> str:
    """`text` with each lone surrogate (it cannot be written as UTF-8) replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def clean_value(obj: Any) -> Any:
    """`obj` (parsed JSON) with lone surrogates in its strings replaced."""
    if isinstance(obj, str):
        return clean_text(obj)
    if isinstance(obj, list):
        return [clean_value(v) for v in obj]
    if isinstance(obj, dict):
        return {clean_text(k): clean_value(v) for k, v in obj.items()}
    return obj


def loads(data: str | bytes, max_depth: int = MAX_DEPTH, clean: bool = True) -> Any:
    """`json.loads(data)` with nesting limited to `max_depth` (json.JSONDecodeError beyond)
    and lone surrogates replaced unless not `clean` (our own conversation files keep the
    text exactly as it was written). Bytes must be UTF-8 (UnicodeDecodeError otherwise;
    both are ValueError)."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    check_depth(text, max_depth)
    obj = json.loads(text)
    if clean and (_SURROGATE_ESCAPE.search(text) or _SURROGATE.search(text)):
        return clean_value(obj)
    return obj


def loads_toml(text: str) -> dict[str, Any]:
    """`tomllib.loads(text)`; nesting too deep for the parser is a `TOMLDecodeError` too."""
    import tomllib

    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError("arrays or tables nested too deeply") from None

"""JSON Schema checks of tool arguments, bounded in time and size: tools' schemas may come
from outside (an MCP server's `inputSchema`), and so do the arguments (a model's call).

- `schema_problem(schema)`: '' or why the agent cannot use a schema: too large or deep, not
  valid JSON Schema, a regex the engine rejects, or a trial validation past the bounds
  (e.g. a `$ref` to itself). Cached per schema.
- `check(arguments, schema)`: '' and '' when the arguments fit, else (message, where).

The bounds: arguments and schemas are measured without recursion before anything else
reads them; every keyword checks a deadline (VALIDATE_TIME_S per call); `uniqueItems` is
linear; and regexes (`pattern`, `patternProperties`, and the latter's use by
`additionalProperties` / `unevaluatedProperties`) run in the `regex` module with a timeout:
Python's `re` backtracks without end on `^(a+)+$` against "aaaa…!". jsonschema has no hook
for another regex engine (python-jsonschema/jsonschema#1142), so the `re` its keyword modules
use is replaced, for the whole process, by a stand-in whose `search` does this (the MCP SDK's
check of tool results goes through it too). A validation past a bound is an error, not a hang.
"""

from __future__ import annotations

import json
import re
import threading
import time
from functools import lru_cache
from typing import Any

import jsonschema
import regex
from jsonschema.exceptions import ValidationError, best_match
from jsonschema.validators import Draft202012Validator, extend, validator_for
from referencing.exceptions import Unresolvable

MAX_SCHEMA_DEPTH = 32  # objects and arrays, nested
MAX_SCHEMA_NODES = 20_000  # values in the whole schema
MAX_SCHEMA_CHARS = 200_000
MAX_ARGUMENT_DEPTH = 64
MAX_ARGUMENT_NODES = 200_000
VALIDATE_TIME_S = 1.0  # one call's arguments against its schema
PATTERN_TIME_S = 0.5  # one regex against one string


class Unbounded(RuntimeError):
    """A validation that ran past a bound (time, recursion, an unusable regex)."""


_local = threading.local()


def _time_left() -> float:
    """Seconds left of this thread's validation (PATTERN_TIME_S outside one); past the
    deadline, Unbounded."""
    deadline = getattr(_local, "deadline", None)
    if deadline is None:
        return PATTERN_TIME_S
    left = deadline - time.monotonic()
    if left <= 0:
        raise Unbounded(f"validation did not finish within {VALIDATE_TIME_S:g} s")
    return min(left, PATTERN_TIME_S)


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    return regex.compile(pattern)  # VERSION0: the syntax and meaning of Python's re


class _BoundedRe:
    """Stands in for `re` in jsonschema's keyword modules: `search` cannot run past a timeout."""

    error = re.error

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    @staticmethod
    def search(pattern: str, string: str, flags: int = 0) -> Any:
        try:
            return _compiled(pattern).search(string, timeout=_time_left())
        except TimeoutError:
            raise Unbounded(f"the pattern {pattern[:80]!r} did not finish on a string of "
                            f"{len(string)} characters") from None
        except regex.error as e:
            raise Unbounded(f"the pattern {pattern[:80]!r} is not a usable regex ({e})") from None


def _install() -> None:
    from jsonschema import _keywords, _legacy_keywords, _utils

    for module in (_keywords, _legacy_keywords, _utils):
        if getattr(module, "re", None) is re:
            module.re = _BoundedRe()


_install()


def _canon(v: Any) -> Any:
    """A hashable key equal for values JSON Schema calls equal (1 == 1.0, True != 1)."""
    if isinstance(v, bool) or v is None:
        return ("const", v)
    if isinstance(v, (int, float)):
        return ("number", v)
    if isinstance(v, list):
        return ("array", tuple(_canon(x) for x in v))
    if isinstance(v, dict):
        return ("object", frozenset((k, _canon(x)) for k, x in v.items()))
    return ("string", v)


def _unique_items(validator, unique, instance, schema):
    if unique and validator.is_type(instance, "array"):
        if len({_canon(v) for v in instance}) != len(instance):
            yield ValidationError(f"{instance!r:.200} has non-unique elements")


def _timed(keyword):
    def run(validator, value, instance, schema):
        _time_left()
        errors = keyword(validator, value, instance, schema)
        if errors is not None:
            yield from errors
    return run


@lru_cache(maxsize=None)
def _bounded(base: type) -> type:
    """`base` (a jsonschema validator class) with a deadline on every keyword."""
    keywords = {k: _timed(v) for k, v in base.VALIDATORS.items()}
    if "uniqueItems" in keywords:
        keywords["uniqueItems"] = _timed(_unique_items)
    return extend(base, keywords)


def shape_problem(value: Any, max_depth: int, max_nodes: int) -> str:
    """'' when `value` nests at most `max_depth` objects/arrays deep and holds at most
    `max_nodes` values, else which bound it passes (walked level by level, no recursion)."""
    level, depth, nodes = [value], 0, 0
    while level:
        nodes += len(level)
        if nodes > max_nodes:
            return f"larger than {max_nodes} values"
        below: list[Any] = []
        for v in level:
            if isinstance(v, dict):
                below.extend(v.values())
            elif isinstance(v, list):
                below.extend(v)
        depth += 1
        if depth > max_depth and any(isinstance(v, (dict, list)) for v in level):
            return f"nested deeper than {max_depth} levels"
        level = below
    return ""


def _patterns(schema: Any) -> list[str]:
    """Every `pattern` string and `patternProperties` key in a schema."""
    out, stack = [], [schema]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if isinstance(v.get("pattern"), str):
                out.append(v["pattern"])
            if isinstance(v.get("patternProperties"), dict):
                out += list(v["patternProperties"])
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


def schema_problem(schema: Any) -> str:
    """'' when arguments can be checked against `schema` within the bounds, else why not."""
    why = shape_problem(schema, MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES)
    if why:
        return f"its schema is {why}"
    try:
        text = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):
        return "its schema is not JSON"
    if len(text) > MAX_SCHEMA_CHARS:
        return f"its schema is larger than {MAX_SCHEMA_CHARS} characters"
    return _problem_of(text)


@lru_cache(maxsize=256)
def _problem_of(text: str) -> str:
    schema = json.loads(text)
    if not isinstance(schema, (dict, bool)):
        return "its schema is not an object"
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as e:
        return f"its schema is not valid JSON Schema ({' '.join(e.message.split())[:160]})"
    except (Unbounded, RecursionError, Unresolvable) as e:
        return f"its schema cannot be checked ({type(e).__name__})"
    for p in _patterns(schema):
        try:
            _compiled(p)
        except regex.error as e:
            return f"its schema has a pattern {p[:80]!r} that is not a usable regex ({e})"
    message, _ = check({}, schema)  # a trial: a schema that loops shows it on any instance
    return message if message.startswith("its schema") else ""


def check(arguments: Any, schema: Any) -> tuple[str, str]:
    """('', '') when `arguments` fit `schema`; else (what is wrong, where in the arguments).
    A schema problem or a bound passed starts with 'its schema' / 'the arguments'."""
    why = shape_problem(arguments, MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_NODES)
    if why:
        return f"the arguments are {why}", "arguments"
    cls = _bounded(validator_for(schema, default=Draft202012Validator))
    _local.deadline = time.monotonic() + VALIDATE_TIME_S
    try:
        error = best_match(cls(schema).iter_errors(arguments))
    except Unbounded as e:
        return f"its schema cannot be checked within the bounds: {e}", "arguments"
    except RecursionError:
        return "its schema cannot be checked within the bounds: it refers to itself without end", "arguments"
    except Unresolvable as e:
        return f"its schema cannot be checked: a $ref does not resolve ({str(e)[:120]})", "arguments"
    finally:
        _local.deadline = None
    if error is None:
        return "", ""
    return error.message, "/".join(str(p) for p in error.absolute_path) or "arguments"

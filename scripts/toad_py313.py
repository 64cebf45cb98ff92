"""Run Toad (`batrachian-toad`, which requires Python >= 3.14) on Python 3.13, for machines
that have no 3.14: how `spec-agent acp` was checked against Toad where 3.14 could not be had.

Usage: `python3.13 -m venv /tmp/toad && /tmp/toad/bin/pip install --ignore-requires-python
batrachian-toad`, then `/tmp/toad/bin/python scripts/toad_py313.py acp "spec-agent acp" DIR`.

Three 3.14 behaviours Toad relies on are supplied here, nothing else is changed: Toad's own
modules are compiled with `from __future__ import annotations` (3.14 defers annotations,
PEP 649); `inspect.signature` evaluates string annotations in the function's module (3.14
hands annotations out as objects); `concurrent.futures.InterpreterPoolExecutor` (new in 3.14,
a ThreadPoolExecutor subclass) is a ThreadPoolExecutor. With Python 3.14, run `toad` itself.
"""

from __future__ import annotations

import __future__
import concurrent.futures
import importlib.machinery
import inspect
import sys
from types import CodeType
from typing import Any

FLAG = __future__.annotations.compiler_flag


class _Loader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        return compile(self.get_data(path), path, "exec", flags=FLAG, dont_inherit=True)


class _Finder(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "toad" and not name.startswith("toad."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _Loader(spec.loader.name, spec.loader.path)
        return spec


_signature = inspect.signature


def _evaluated_signature(obj: Any, *args: Any, **kwargs: Any) -> inspect.Signature:
    if "eval_str" not in kwargs:
        try:
            return _signature(obj, *args, eval_str=True, **kwargs)
        except (NameError, TypeError, SyntaxError, AttributeError):  # names only type checkers see
            pass
    return _signature(obj, *args, **kwargs)


def main() -> int:
    if sys.version_info >= (3, 14):
        print("Python 3.14 runs Toad as it is: use `toad`", file=sys.stderr)
    sys.meta_path.insert(0, _Finder)
    inspect.signature = _evaluated_signature
    if not hasattr(concurrent.futures, "InterpreterPoolExecutor"):
        concurrent.futures.InterpreterPoolExecutor = concurrent.futures.ThreadPoolExecutor
    sys.dont_write_bytecode = True  # Toad's cached bytecode was compiled without the flag
    from toad.cli import main as toad_main

    return toad_main()


if __name__ == "__main__":
    sys.exit(main())

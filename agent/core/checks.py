"""The lint-and-test loop: checks run after the agent edits files, their failures fed back.

When a message's model turn ends with an answer and the message edited files since the last
check, the conversation runs, in order:
- `syntax`: each edited `.py` file compiled (`compile()`, as `py_compile` does; nothing runs);
- `ruff`: `ruff check` with only the rules for errors that stop a program (syntax, undefined
  names; Aider's fatal flake8 set) on those files, when `ruff` is installed;
- `names`: the names the repository's other Python files import from each edited module that
  it no longer defines (core/pynames.py; nothing runs);
- `stubs`: functions an edited file leaves without a body (only `pass`, `...` or `raise
  NotImplementedError`): every function of the file, or one the message names, unless the
  message asks for stubs (nothing runs);
- `lint`: the configured `lint_cmd`, with the edited files appended;
- `test`: the configured `test_cmd`, or the one a message implies (core/testcmd.py).
`ruff` and the last two run through the `run_shell` tool (the sandbox and its time limit
apply). What the checks read themselves (the files, the lines a report names, the files
attached to a names failure) is read through tools/_paths.read_inside: regular files inside
the repository only, no symlink followed, so a link a command planted (`x.py ->
~/.ssh/id_rsa`) is neither checked nor quoted. The first failing check stops the round;
its output goes back to the model as a user message, at most `max_fix_rounds` times per
message (0 turns the loop off). `lint_cmd` and `test_cmd` may not come from a repository's
own config (they run commands). Nothing here renders.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tools._paths import PathError, is_regular_inside, read_inside

RUFF_RULES = "E9,F63,F7,F82"  # syntax errors, bad comparisons, misplaced statements, undefined names
MAX_FEEDBACK_CHARS = 3000
MAX_IMPORTERS, MAX_IMPORTER_CHARS = 4, 20_000  # files a names failure attaches


@dataclass(frozen=True)
class Outcome:
    kind: str  # syntax | ruff | names | stubs | lint | test
    command: str
    ok: bool
    output: str
    # With a failed ruff check: the `names` report of the same files, when it failed too (an
    # edit that dropped a definition shows as undefined names in the file and as imports of
    # it elsewhere; the model is told both at once).
    missing: str = ""
    # `names`: the files that import what the edit removed (relative to the root).
    importers: tuple[str, ...] = ()


def python_files(paths: list[str], root: Path) -> list[str]:
    """The `.py` files of `paths` that are regular files inside `root` reached without a
    symlink (a symlink is not checked: what it points to is, when it was edited)."""
    return [p for p in dict.fromkeys(paths) if p.endswith(".py") and is_regular_inside(root, p)]


def syntax(paths: list[str], root: Path) -> Outcome:
    """Compile each file; the first error as Python reports it (file, line, the line, caret)."""
    import traceback

    for p in paths:
        try:
            source = read_inside(root, p)
        except (PathError, OSError) as e:
            return Outcome("syntax", f"python -m py_compile {p}", False, f"{p}: {e}")
        try:
            compile(source, p, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            text = "".join(traceback.format_exception_only(type(e), e)).rstrip()
            return Outcome("syntax", f"python -m py_compile {p}", False, text)
    return Outcome("syntax", "python -m py_compile " + " ".join(paths), True, "")


def ruff(paths: list[str], root: Path, timeout_s: float = 30.0, ctx: Any = None) -> Outcome | None:
    """`ruff check` on the files with the fatal rules only, run as `run_shell` runs a command
    (`ctx`'s sandbox; by default the sandbox, without the network); None when ruff is not
    installed."""
    from dataclasses import replace as _replace

    from tools import ToolContext
    from tools.run_shell import run_shell

    beside = Path(sys.executable).parent / "ruff"  # installed in this interpreter's venv
    exe = shutil.which("ruff") or (str(beside) if beside.is_file() else None)
    if exe is None:
        return None
    argv = [exe, "check", "--no-cache", "--isolated", "--select", RUFF_RULES,
            "--output-format", "concise", "--quiet", "--", *paths]
    shown = "ruff check --select " + RUFF_RULES + " " + " ".join(paths)
    ctx = _replace(ctx if ctx is not None else ToolContext(root), root=root,
                   shell_timeout_s=timeout_s, allow_network=False)
    r = run_shell(ctx, shlex.join(argv) + " </dev/null")
    head, _, out = r.output.partition("\n")
    if not head.startswith("exit code ") or head in ("exit code 126", "exit code 127"):
        # no sandbox, a time limit, not found in the sandbox: not the code's fault
        return Outcome("ruff", shown, True, f"ruff did not run: {r.output.strip()[:300]}")
    return Outcome("ruff", shown, r.ok, out.strip())


def names(paths: list[str], root: Path) -> Outcome:
    """The names other files import from the edited modules that these no longer define."""
    from .pynames import missing_names

    lines, importers = [], []
    for p in paths:
        for m in missing_names(root, p):
            listed = ", ".join(f"`{n}`" for n in m.names)
            lines.append(f"{p} does not define {listed}, which {m.importer} imports from it")
            importers.append(m.importer)
    return Outcome("names", "imports of " + " ".join(paths), not lines, "\n".join(lines),
                   importers=tuple(dict.fromkeys(importers)))


_ABSTRACT = {"abstractmethod", "abstractproperty", "overload"}
# A message that asks for stubs or placeholders: the check does not apply.
_ASKS_FOR_STUBS = re.compile(
    r"\b(?:add|write|create|leave|keep|make|generate)\b[^.\n]{0,40}?\b(?:stubs?|placeholders?|"
    r"skeletons?|empty (?:bod(?:y|ies)|functions?|methods?)|unimplemented|NotImplementedError)\b"
    r"|\b(?:don't|do not|without) implement|\b(?:does|do|doing) nothing\b|\bno-?ops?\b", re.I)


def _placeholder(fn) -> bool:
    """A function whose body (past its docstring) is only `pass`, `...` or a raise of
    NotImplementedError, and that is not declared abstract or an overload."""
    import ast

    for d in fn.decorator_list:
        name = d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")
        if name in _ABSTRACT:
            return False
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    for st in body:
        if isinstance(st, ast.Pass):
            continue
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) \
                and st.value.value is Ellipsis:
            continue
        if isinstance(st, ast.Raise) and st.exc is not None:
            exc = st.exc.func if isinstance(st.exc, ast.Call) else st.exc
            if getattr(exc, "id", "") == "NotImplementedError":
                continue
        return False
    return True


def _functions(tree) -> list[tuple[str, object]]:
    """(qualified name, node) of every function in the module, methods as Class.name;
    the methods of an abstract class or a Protocol left out (their bodies are meant empty)."""
    import ast

    out: list[tuple[str, object]] = []

    def walk(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((prefix + child.name, child))
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in child.bases}
                if not bases & {"ABC", "Protocol"}:
                    walk(child, prefix + child.name + ".")

    walk(tree, "")
    return out


def stubs(paths: list[str], root: Path, message: str = "") -> Outcome:
    """Functions the edited files leave as placeholders: all of a file's functions (the
    edit implemented nothing there), or any the message names."""
    import ast

    shown = "function bodies in " + " ".join(paths)
    if _ASKS_FOR_STUBS.search(message):
        return Outcome("stubs", shown, True, "")
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", message))
    lines = []
    for p in paths:
        try:
            tree = ast.parse(read_inside(root, p))
        except (OSError, SyntaxError, ValueError, RecursionError):  # (PathError too)
            continue
        fns = _functions(tree)
        empty = [(q, fn) for q, fn in fns if _placeholder(fn)]
        if not empty:
            continue
        if len(empty) < len(fns):  # the file implements something: only the named ones
            empty = [(q, fn) for q, fn in empty if fn.name in words]
        for q, fn in empty:
            lines.append(f"{p}:{fn.lineno}: `{q}` has no implementation (its body is only a "
                         "placeholder)")
    return Outcome("stubs", shown, not lines, "\n".join(lines))


TEST_OUTPUT_CHARS = 65536  # a test run's output kept: its summary comes last (core/attempts.py)


def shell(kind: str, command: str, ctx: Any) -> Outcome:
    """A configured command through the run_shell tool (sandbox and time limit apply). A test
    run keeps more output than a tool call would, so that its summary line is not cut off
    (what goes back to the model is clipped in `feedback`)."""
    from dataclasses import replace as _replace

    from tools import call_tool

    if kind == "test":
        ctx = _replace(ctx, max_output_chars=max(ctx.max_output_chars, TEST_OUTPUT_CHARS))
    r = call_tool("run_shell", {"command": command}, ctx)
    return Outcome(kind, command, r.ok, r.output)  # ok: exit code 0


def run_checks(cfg: Any, edited: list[str], ctx: Any, message: str = "",
               test_cmd: str | None = None):
    """The checks for the files `edited`, in order, stopping at the first failure (a
    generator of Outcomes); `message`: the user's message the edits answer; `test_cmd`: the
    message's test command (default: the configured one)."""
    test_cmd = cfg.test_cmd if test_cmd is None else test_cmd
    root = Path(ctx.root)
    py = python_files(edited, root)
    if cfg.auto_lint and py:
        out = syntax(py, root)
        yield out
        if not out.ok:
            return
        out = ruff(py, root, ctx=ctx)
        if out is not None:
            if not out.ok:
                gone = names(py, root)
                yield replace(out, missing="" if gone.ok else gone.output,
                              importers=gone.importers)
                return
            yield out
        out = names(py, root)
        if not out.ok:  # (shown only when it fails: most modules have no importers)
            yield out
            return
        out = stubs(py, root, message)
        if not out.ok:  # (shown only when it fails)
            yield out
            return
    present = [p for p in dict.fromkeys(edited) if (root / p).is_file()]
    if cfg.auto_lint and cfg.lint_cmd and present:
        out = shell("lint", f"{cfg.lint_cmd} " + " ".join(_quote(p) for p in present), ctx)
        yield out
        if not out.ok:
            return
    if cfg.auto_test and test_cmd:
        yield shell("test", test_cmd, ctx)


def _quote(path: str) -> str:
    return shlex.quote(path)


def feedback(out: Outcome, root: Path | None = None, whole_files: bool = False,
             importers: dict[str, str] | None = None) -> str:
    """The user message that gives a failed check back to the model: what failed, its output
    (not fenced: a small model copies a fenced block back as if it were the file), the source
    lines a syntax or ruff report names, and how to reply (`whole_files`: the "whole" edit
    format, where a fix is the whole file again). `importers`: the text of the files that
    import what the edit removed (`importer_texts`), attached so that a rename or removal the
    message asked for can be carried into them."""
    text = clipped(out.output)
    what = {"syntax": "The file you wrote does not compile",
            "ruff": "The linter found errors in the code you wrote",
            "names": "Other files import names your edit removed",
            "stubs": "The code you wrote leaves functions unimplemented",
            "lint": "The lint command failed", "test": "The tests failed"}[out.kind]
    parts = [f"{what} (`{out.command}`):", text]
    named = _named_lines(text, root) if root is not None and out.kind in ("syntax", "ruff") else ""
    if named:
        parts += ["", "The lines it names:", named]
    if out.missing:
        parts += ["", "Other files import names your edit removed:", out.missing]
    if out.kind == "stubs":
        parts += ["", "Write the code that each of them needs to do what the message asks."]
    keep = ("keep every function, class and constant that other files import, defined at the "
            "top level of the module (not inside a class or a function).")
    if (out.kind == "names" or out.missing) and importers:
        which = ", ".join(importers)
        parts += ["", (f"If the message asks to rename or remove these names, change the files "
                       f"that import them as well ({which}, attached below); otherwise {keep}")]
    elif out.kind == "names" or out.missing:
        parts += ["", keep[0].upper() + keep[1:]]
    if whole_files and importers:
        parts += ["", ("Fix the code: for each file you change, reply with its path on one line "
                       "and then the whole corrected file in one code block.")]
    else:
        parts += ["", "Fix the code: reply with the file's path on one line and then the whole "
                  "corrected file in one code block." if whole_files else "Fix the code."]
    if importers:
        parts += ["", "Attached files:", *(f'<file path="{p}">\n{t}\n</file>'
                                           for p, t in importers.items())]
    return "\n".join(parts)


def clipped(output: str) -> str:
    """A check's output as it goes to the model: stripped, at most MAX_FEEDBACK_CHARS (its
    head and tail, where a test run's failures and summary are)."""
    text = output.strip()
    if len(text) > MAX_FEEDBACK_CHARS:
        text = text[: MAX_FEEDBACK_CHARS // 2] + "\n...\n" + text[-MAX_FEEDBACK_CHARS // 2:]
    return text


def importer_texts(out: Outcome, ctx: Any) -> dict[str, str]:
    """The text of each file that imports what a failed check says the edit removed: only
    files git lists (an ignored or excluded file, such as tests kept out of the agent's view,
    is never shown; agent/core/attach.py), read through `read_inside` (no symlink, nothing
    but a regular file), never a binary one, at most `MAX_IMPORTERS` files and
    `MAX_IMPORTER_CHARS` characters in all."""
    if out.ok or not out.importers:
        return {}
    from .attach import repo_files

    listed = set(repo_files(ctx))
    texts: dict[str, str] = {}
    total = 0
    for path in out.importers:
        if path not in listed or len(texts) >= MAX_IMPORTERS:
            continue
        try:
            text = read_inside(Path(ctx.root), path, MAX_IMPORTER_CHARS * 4)
        except (PathError, OSError):
            continue
        if "\x00" in text or total + len(text) > MAX_IMPORTER_CHARS:
            continue
        texts[path] = text
        total += len(text)
    return texts


LOCATION = re.compile(r'^(?:File "([^"]+)", line (\d+)|([^\s:]+\.py):(\d+):\d+:)', re.M)
MAX_NAMED_LINES = 8


def _named_lines(report: str, root: Path) -> str:
    """'path:N: text' for the first source lines a report names (at most MAX_NAMED_LINES)."""
    seen: dict[tuple[str, int], str] = {}
    for m in LOCATION.finditer(report):
        path, line = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        key = (path, int(line))
        if key in seen or len(seen) >= MAX_NAMED_LINES:
            continue
        try:
            text = read_inside(root, path).split("\n")
        except (OSError, ValueError):  # (PathError too: outside, a symlink, not a file)
            continue
        if 1 <= key[1] <= len(text):
            seen[key] = f"{path}:{key[1]}: {text[key[1] - 1].rstrip()}"
    return "\n".join(seen.values())

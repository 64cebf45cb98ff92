"""A repository map: an outline of the files most relevant to a message, budgeted in tokens.

For a repository too big to attach, the first message of a conversation carries, per file, its
top-level and class-level definitions (classes, functions and methods with their signature
lines; for Python also module constants, for Go exported constants), like Aider's repo map:

    agent/core/attach.py:
      def attach_mentions(text: str, ctx: Any, plain: bool = False) -> tuple[str, list[str]]
      class Store:
        def put(self, key: str) -> None

Files are ranked by relevance to the message: files it names, then files defining a code name
it mentions, then files that use those files' definitions or whose definitions they use, with
the words of the message matched against paths and definition names (test files count a
quarter of that); the rest by how many other files use their definitions, then by path depth.
Whole file entries are added in that order while they fit the budget (an entry that does not
fit is left out, never cut). Names starting with one `_` are left out.

Parsing uses tree-sitter with the tree-sitter project's grammar packages (Python, JavaScript,
TypeScript/TSX, Go, Rust, Java). Without them, Python files are outlined with the standard
library's `ast` and other languages are not outlined. A file with a syntax error is skipped.

Only files git lists are read, under the same confinement and special-file rules as
attachments (tools/_paths.confine, tools/read_file.open_regular: nothing outside the
repository, no symlink out of it, never a FIFO or device), binary files and files over
MAX_FILE_BYTES are skipped, and the work is bounded by MAX_FILES files parsed, MAX_BYTES read
and MAX_SECONDS of wall clock.

Tokens are counted as characters / 3 (rounded up) unless a counter is given: Qwen2.5's
tokenizer reads a map at about 3.3 characters a token (this repository's map: 4,076 characters,
1,250 tokens), so the estimate errs on the side of a shorter map.
"""

from __future__ import annotations

import ast
import io
import os
import re
import time
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEADER = "Repository map (definitions per file, most relevant first):"
MAX_FILES = 400  # files parsed
MAX_FILE_BYTES = 256_000  # a bigger file is not outlined
MAX_BYTES = 6_000_000  # read in all
MAX_SECONDS = 5.0  # parsing stops after this long
MAX_SIG_CHARS = 150  # a longer signature line is cut, ending in "..."

# extension -> language
LANGUAGES = {".py": "python", ".pyi": "python", ".js": "javascript", ".jsx": "javascript",
             ".mjs": "javascript", ".cjs": "javascript", ".ts": "typescript", ".mts": "typescript",
             ".cts": "typescript", ".tsx": "tsx", ".go": "go", ".rs": "rust", ".java": "java"}

# Message words that say nothing about where code is.
STOP = frozenset(["a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "could", "do", "does", "for", "from", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no", "not", "of", "on", "or", "our", "please", "should", "so", "that", "the", "their", "then", "there", "these", "this", "those", "to", "use", "was", "we", "what", "when", "where", "which", "who", "why", "will", "with", "would", "you", "your", "file", "files", "code", "function", "functions", "method", "methods", "class", "classes", "repository", "repo", "project"])

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CONSTANT = re.compile(r"[A-Z][A-Z0-9_]*")


def approx_tokens(text: str) -> int:
    """Tokens `text` takes, estimated as characters / 3 (rounded up)."""
    return -(-len(text) // 3)


@dataclass
class Outline:
    path: str
    entries: list[tuple[int, str, str]]  # (depth: 0 top level, 1 class member; signature; name)
    idents: set[str] = field(default_factory=set)  # every identifier in the file

    @property
    def names(self) -> set[str]:
        return {name for _, _, name in self.entries if name}

    def render(self) -> str:
        return "\n".join([f"{self.path}:", *("  " * (d + 1) + sig for d, sig, _ in self.entries)])


# ---- the map ---------------------------------------------------------------------------------


def repo_map(root: Path, files: list[str], message: str, budget: int, *, names: list[str] = (),
             named: list[str] = (), exclude: set[str] = frozenset(),
             count: Callable[[str], int] | None = None) -> str:
    """The map of repository `files` (repo-relative, as git lists them) for `message`, at most
    `budget` tokens by `count` (default approx_tokens), or "" when nothing fits or budget is 0.
    `names`: code names the message mentions; `named`: files it names; `exclude`: files whose
    whole text the message already carries (read for ranking, not shown)."""
    if budget <= 0:
        return ""
    count = count or approx_tokens
    words = _keys(message)
    outlines = _outlines(root, _candidates(files, words, named), time.monotonic() + MAX_SECONDS)
    ranked = rank(outlines, words, set(names), set(named), set(IDENT.findall(message)))
    blocks, used = [], count(HEADER)
    for o in ranked:
        if o.path in exclude or not o.entries:
            continue
        block = o.render()
        cost = count("\n" + block)
        if used + cost <= budget:
            blocks.append(block)
            used += cost
    return "\n".join([HEADER, *blocks]) if blocks else ""


def rank(outlines: list[Outline], words: set[str], names: set[str], named: set[str],
         plain: set[str] = frozenset()) -> list[Outline]:
    """`outlines` most relevant first (see the module docstring): `words` are the message's
    word keys (`_keys`), `names` the code names it mentions, `named` the files it names,
    `plain` every identifier-like word in it."""
    defined: dict[str, list[Outline]] = {}
    for o in outlines:
        for name in o.names:
            defined.setdefault(name, []).append(o)
    # A name defined in many files (`run`, `__init__`) links nothing.
    telling = {n for n, where in defined.items() if len(where) <= 3 and len(n) >= 4
               and not n.startswith("__")}
    # A plain word of the message that names a definition (found in at most 3 files) is a
    # mention of it too.
    names = names | {w for w in plain if len(w) >= 3 and 0 < len(defined.get(w, ())) <= 3}
    top = [o for o in outlines if o.path in named or o.names & names]
    top_defs = set().union(*(o.names & telling for o in top)) if top else set()
    top_uses = set().union(*(o.idents for o in top)) if top else set()
    used_by: dict[str, set[str]] = {o.path: set() for o in outlines}
    for o in outlines:
        for ident in o.idents & telling:
            for d in defined[ident]:
                if d is not o:
                    used_by[d.path].add(o.path)

    def score(o: Outline) -> float:
        s = 1000.0 * (o.path in named) + 300.0 * len(o.names & names) + 30.0 * len(o.idents & names)
        near = 0.0
        if o not in top:
            links = len(o.idents & top_defs) + len((o.names & telling) & top_uses)
            near += 10.0 * min(links, 10)
        path_keys = _keys(o.path.replace("/", " ").replace(".", " "))
        def_keys = set().union(*(_keys(n) for n in o.names)) if o.names else set()
        near += 20.0 * (3 * len(words & path_keys) + len(words & def_keys))
        # Tests come after the code they test unless the message names them or their names.
        return s + (near / 4 if is_test(o.path) else near)

    return sorted(outlines, key=lambda o: (-score(o), -len(used_by[o.path]), o.path.count("/"), o.path))


def _candidates(files: list[str], words: set[str], named: list[str]) -> list[str]:
    """The files worth parsing, in the order they are parsed (the caps cut the tail): files
    the message names, then those whose path shares its words, then the shallowest."""
    known = [f for f in files if os.path.splitext(f)[1] in LANGUAGES]
    first = set(named)

    def key(f: str) -> tuple[int, int, int, str]:
        return (f not in first, -len(words & _keys(f.replace("/", " ").replace(".", " "))),
                f.count("/"), f)

    return sorted(known, key=key)[:MAX_FILES]


SUFFIXES = ("ing", "ed", "es", "er", "en", "e", "s")


def _keys(text: str) -> set[str]:
    """The words of `text` (identifiers split at `_` and case changes), lower case, stop
    words dropped, stemmed (`_stem`)."""
    out = set()
    for ident in IDENT.findall(text):
        for part in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", ident):
            part = part.lower()
            if len(part) >= 3 and part not in STOP and not part.isdigit():
                out.add(_stem(part))
    return out


def _stem(word: str) -> str:
    """`word` without up to two common English endings and a doubled last letter, so `cache`,
    `cached`, `caches` meet, and `write`, `writes`, `written` (and `prefix` stays apart from
    `prefill`)."""
    for _ in range(2):
        for suffix in SUFFIXES:
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[:-len(suffix)]
                break
        else:
            break
    if len(word) >= 4 and word[-1] == word[-2]:
        word = word[:-1]
    return word


def is_test(path: str) -> bool:
    """Whether `path` looks like a test file (a `tests`/`test` folder, `test_*`, `*_test.*`,
    `*.test.*`, `*.spec.*`)."""
    parts = path.split("/")
    name = parts[-1]
    return (any(p in ("test", "tests", "__tests__") for p in parts[:-1]) or name.startswith("test_")
            or bool(re.search(r"[._]test\.|\.spec\.", name)))


# ---- reading and parsing ---------------------------------------------------------------------


def _outlines(root: Path, paths: list[str], deadline: float) -> list[Outline]:
    out, read = [], 0
    for path in paths:
        if time.monotonic() > deadline or read >= MAX_BYTES:
            break
        data = read_source(root, path, min(MAX_FILE_BYTES, MAX_BYTES - read))
        if data is None:
            continue
        read += len(data)
        try:
            entries = outline(path, data)
        except Exception:  # noqa: BLE001 - a parser failure on one file skips that file
            entries = None
        if entries is not None:
            text = data.decode("utf-8", "replace")
            out.append(Outline(path, entries, set(IDENT.findall(text))))
    return out


def read_source(root: Path, path: str, max_bytes: int) -> bytes | None:
    """The bytes of repository file `path`, or None when it may not be read (outside the
    repository or in .git, symlinks followed; not a regular file), is binary or not UTF-8,
    or is over `max_bytes` (then at most max_bytes + 1 bytes are read)."""
    from tools._paths import PathError, confine
    from tools.read_file import open_regular

    try:
        with open_regular(confine(root, path), path) as f:
            if os.fstat(f.fileno()).st_size > max_bytes:
                return None
            data = f.read(max_bytes + 1)
    except (PathError, OSError):
        return None
    if len(data) > max_bytes or b"\x00" in data[:8192]:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return data


def outline(path: str, data: bytes) -> list[tuple[int, str, str]] | None:
    """The definitions in the source `data` of file `path`: (depth, signature line, name) in
    file order; None when its language is not outlined here or it does not parse."""
    lang = LANGUAGES.get(os.path.splitext(path)[1])
    if lang is None:
        return None
    parser = _parser(lang)
    if parser is not None:
        tree = parser.parse(data)
        if tree.root_node.has_error:
            return None
        entries: list[tuple[int, str, str]] = []
        _walk(tree.root_node, data, TABLES[lang], 0, entries, lang)
        return entries
    if lang == "python":
        return python_outline(data.decode("utf-8"))
    return None


_PARSERS: dict[str, Any] = {}


def _grammar(lang: str) -> Any:
    """The tree-sitter Language for `lang`, or None when tree-sitter or its grammar package
    is not installed."""
    try:
        import tree_sitter

        if lang == "python":
            import tree_sitter_python as g
            capsule = g.language()
        elif lang == "javascript":
            import tree_sitter_javascript as g
            capsule = g.language()
        elif lang in ("typescript", "tsx"):
            import tree_sitter_typescript as g
            capsule = g.language_typescript() if lang == "typescript" else g.language_tsx()
        elif lang == "go":
            import tree_sitter_go as g
            capsule = g.language()
        elif lang == "rust":
            import tree_sitter_rust as g
            capsule = g.language()
        elif lang == "java":
            import tree_sitter_java as g
            capsule = g.language()
        else:
            return None
        return tree_sitter.Language(capsule)
    except (ImportError, ValueError, AttributeError):
        return None


def _parser(lang: str) -> Any:
    if lang not in _PARSERS:
        grammar = _grammar(lang)
        if grammar is None:
            _PARSERS[lang] = None
        else:
            import tree_sitter

            _PARSERS[lang] = tree_sitter.Parser(grammar)
    return _PARSERS[lang]


# ---- tree-sitter: which nodes are definitions --------------------------------------------------

# node type -> "def" (a signature line), "class" (a signature line, and at the top level its
# members), "wrap" (look inside: decorators, `export`), or a handler for the node.
DEF, CLASS, WRAP = "def", "class", "wrap"


def _py_constant(node: Any, src: bytes, depth: int, out: list) -> None:
    """A module-level `NAME = ...` with an upper-case name."""
    a = node.named_children[0] if node.named_children else None
    if depth or a is None or a.type != "assignment":
        return
    left = a.child_by_field_name("left")
    name = _text(src, left) if left is not None else ""
    if left is not None and left.type == "identifier" and CONSTANT.fullmatch(name):
        out.append((depth, _first_line(src, node), name))


def _js_declaration(node: Any, src: bytes, depth: int, out: list) -> None:
    """A top-level `const f = (...) => ...` (or function/class expression), or an upper-case
    constant."""
    if depth:
        return
    for d in node.named_children:
        if d.type != "variable_declarator":
            continue
        name_node, value = d.child_by_field_name("name"), d.child_by_field_name("value")
        name = _text(src, name_node) if name_node is not None else ""
        if name.startswith("_") and not name.startswith("__"):
            continue
        if value is not None and value.type in ("arrow_function", "function_expression", "function",
                                                "generator_function", "class"):
            body = value.child_by_field_name("body")
            end = body.start_byte if body is not None else value.end_byte
            out.append((depth, _clean(src[node.start_byte:end].decode("utf-8", "replace")), name))
        elif CONSTANT.fullmatch(name):
            out.append((depth, _first_line(src, node), name))


def _go_specs(node: Any, src: bytes, depth: int, out: list) -> None:
    """`type X ...` for each type, `const X = ...` for each exported constant."""
    keyword = "type" if node.type == "type_declaration" else "const"
    for spec in node.named_children:
        if spec.type not in ("type_spec", "type_alias", "const_spec"):
            continue
        name_node = spec.child_by_field_name("name")
        name = _text(src, name_node) if name_node is not None else ""
        if keyword == "const" and not name[:1].isupper():
            continue
        kind = spec.child_by_field_name("type")
        if kind is not None and kind.type in ("struct_type", "interface_type"):  # not its fields
            head = src[spec.start_byte:kind.start_byte].decode("utf-8", "replace")
            out.append((depth, _clean(f"type {head}{kind.type.split('_')[0]}"), name))
        else:
            out.append((depth, f"{keyword} {_first_line(src, spec)}", name))


TABLES: dict[str, dict[str, Any]] = {
    "python": {"function_definition": DEF, "class_definition": CLASS, "decorated_definition": WRAP,
               "expression_statement": _py_constant},
    "javascript": {"function_declaration": DEF, "generator_function_declaration": DEF,
                   "class_declaration": CLASS, "method_definition": DEF, "export_statement": WRAP,
                   "lexical_declaration": _js_declaration, "variable_declaration": _js_declaration},
    "go": {"function_declaration": DEF, "method_declaration": DEF, "type_declaration": _go_specs,
           "const_declaration": _go_specs},
    "rust": {"function_item": DEF, "function_signature_item": DEF, "struct_item": DEF,
             "enum_item": DEF, "union_item": DEF, "type_item": DEF, "const_item": DEF,
             "static_item": DEF, "macro_definition": DEF, "trait_item": CLASS, "impl_item": CLASS,
             "mod_item": CLASS},
    "java": {"class_declaration": CLASS, "interface_declaration": CLASS, "enum_declaration": CLASS,
             "record_declaration": CLASS, "method_declaration": DEF, "constructor_declaration": DEF,
             "enum_body_declarations": WRAP},
}
TABLES["typescript"] = {**TABLES["javascript"], "abstract_class_declaration": CLASS,
                        "interface_declaration": CLASS, "type_alias_declaration": DEF,
                        "enum_declaration": DEF, "function_signature": DEF, "method_signature": DEF,
                        "abstract_method_signature": DEF, "ambient_declaration": WRAP}
TABLES["tsx"] = TABLES["typescript"]


def _walk(node: Any, src: bytes, table: dict[str, Any], depth: int, out: list, lang: str) -> None:
    for child in node.named_children:
        kind = table.get(child.type)
        if kind is None:
            continue
        if kind == WRAP:
            _walk(child, src, table, depth, out, lang)
        elif callable(kind):
            kind(child, src, depth, out)
        else:
            name_node = child.child_by_field_name("name") or child.child_by_field_name("type")
            name = _text(src, name_node) if name_node is not None else ""
            if name.startswith("_") and not name.startswith("__"):
                continue  # private by convention
            out.append((depth, _signature(child, src, lang), name))
            body = child.child_by_field_name("body")
            if kind == CLASS and depth == 0 and body is not None:
                _walk(body, src, table, 1, out, lang)


def _signature(node: Any, src: bytes, lang: str) -> str:
    """The text of `node` up to its body (for Python up to the `:` before it), or its first
    line when it has none, on one line."""
    body = node.child_by_field_name("body")
    if body is None:
        return _first_line(src, node)
    end = body.start_byte
    if lang == "python":
        colons = [c.start_byte for c in node.children if c.type == ":" and c.start_byte < end]
        end = colons[-1] if colons else end
    text = src[node.start_byte:end].decode("utf-8", "replace")
    if lang == "java":  # annotations (`@Override`) say little and cost tokens
        text = re.sub(r"^\s*(@[\w.]+(\([^()]*\))?\s*)+", "", text)
    return _clean(text)


def _text(src: bytes, node: Any) -> str:
    return src[node.start_byte:node.end_byte].decode("utf-8", "replace")


def _first_line(src: bytes, node: Any) -> str:
    text = _text(src, node)
    line = text.split("\n", 1)[0]
    if "\n" in text.rstrip():
        line = line.rstrip().removesuffix("{").rstrip() + " ..."
    return _clean(line)


def _clean(text: str) -> str:
    """`text` on one line: whitespace runs made one space, none inside brackets' edges, no
    trailing `{`, `:` or `;`; at most MAX_SIG_CHARS characters."""
    text = " ".join(text.split())
    text = re.sub(r"([(\[]) ", r"\1", text)
    text = re.sub(r",? ([)\]])", r"\1", text)
    text = text.rstrip(" {:;")
    if len(text) > MAX_SIG_CHARS:
        text = text[:MAX_SIG_CHARS - 3].rstrip() + "..."
    return text


# ---- Python without tree-sitter: the standard library's ast ------------------------------------


def python_outline(source: str) -> list[tuple[int, str, str]] | None:
    """The definitions of Python `source` as `outline` gives them, from `ast`; None when it
    does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    lines = source.splitlines(keepends=True)
    out: list[tuple[int, str, str]] = []

    def visit(body: list[ast.stmt], depth: int) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name.startswith("_") and not node.name.startswith("__"):
                    continue
                out.append((depth, _py_header(lines, node), node.name))
                if isinstance(node, ast.ClassDef) and depth == 0:
                    visit(node.body, 1)
            elif depth == 0 and isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if (len(targets) == 1 and isinstance(targets[0], ast.Name)
                        and CONSTANT.fullmatch(targets[0].id)):
                    line = lines[node.lineno - 1].rstrip("\r\n")
                    if (node.end_lineno or node.lineno) > node.lineno:
                        line = line.rstrip().removesuffix("{").rstrip() + " ..."
                    else:  # without a comment after it (offsets count UTF-8 bytes)
                        line = line.encode()[:node.end_col_offset].decode("utf-8", "replace")
                    out.append((depth, _clean(line), targets[0].id))

    visit(tree.body, 0)
    return out


def _py_header(lines: list[str], node: ast.stmt) -> str:
    """`def name(...) -> T` / `class Name(...)`: the source from the keyword to the `:` that
    ends the header (found with tokenize, brackets counted)."""
    text = "".join(lines[node.lineno - 1:])[node.col_offset:]  # indentation: ASCII
    depth, end = 0, None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth -= 1
            elif tok.type == tokenize.OP and tok.string == ":" and depth == 0:
                end = tok.start
                break
    except (tokenize.TokenError, SyntaxError):
        pass
    if end is None:
        return _clean(lines[node.lineno - 1])
    head = text.splitlines(keepends=True)
    return _clean("".join(head[:end[0] - 1]) + head[end[0] - 1][:end[1]])

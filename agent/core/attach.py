"""Repository files attached to a user message.

With `attach_mentioned` on, a message also says where the code names it mentions (`fetch_data`,
`MAX_RETRIES`, `UserCache`, or any word in backticks) occur in files it does not name, with
those files attached, and the first message of a conversation lists the repository's files: a small model
then starts from what it would otherwise have to find with tool calls.

Two ways a message names files: `@path` (the interactive UIs' explicit attachment) and, when
`attach_mentioned` is on, a plain mention of a repository path (`calc.py`, `src/app.py`, or a
file name that only one repository file has). The files' contents follow the message in
`<file path="...">` blocks, so the model starts from the text it is asked to change instead of
having to read it first.

When the repository has more files than the listing names or more source text than a message
could attach, the first message also carries a repository map (agent/core/repomap.py): the
definitions in the files most relevant to the message, at most `repo_map_tokens` tokens
(ToolContext.repo_map_tokens, from the config; 0 = none).

What the user did not name is bounded and shown: files attached because the message mentions
names defined in them come to at most `budget` tokens (characters / 3; the
`auto_attach_tokens` config key), the rest are listed as not attached, and documentation,
change logs, licences, package metadata and lock files (`is_doc`) are never searched or
attached unless the message names them. `attach` returns what it added with sizes, and its
`ContextAttached` event lists it for every UI.

Only files git lists (ignored files are not attached) are considered. A file is read under the
same confinement and special-file rules as the read_file tool (nothing outside the repository,
never a FIFO or device), binary files are skipped, and a big file is read only as far as is
attached.
"""

from __future__ import annotations

import codecs
import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..events import ContextAttached

MENTION = re.compile(r"(?<![\w@])@([\w./\-]+)")
WORD = re.compile(r"[\w./\-]+")
ATTACHED = re.compile(r'<file path="([^"\n]+)">')  # the path of each attached file
MAX_ATTACH_CHARS = 20_000  # per file
MAX_MENTIONED = 6  # files attached by plain mention, per message
MAX_MENTIONED_CHARS = 40_000  # their total
MAX_LISTED = 60  # files named in a conversation's first message
AUTO_ATTACH_TOKENS = 4096  # files the message does not name, in all (the auto_attach_tokens key)
# Files searched for names or attached only when a message names them: documentation, change
# logs, licences, package metadata, lock files (they mention every name and help little).
DOC_NAMES = ("readme*", "changelog*", "changes*", "history*", "news*", "authors*",
             "contributors*", "contributing*", "licen[cs]e*", "copying*", "notice*",
             "code_of_conduct*", "security*", "pkg-info", "*.md", "*.markdown", "*.rst",
             "*.txt", "*.adoc", "*.org", "*.lock", "package-lock.json", "npm-shrinkwrap.json",
             "pnpm-lock.yaml", "go.sum", "*.min.js", "*.map")
DOC_DIRS = ("*.egg-info", "*.dist-info")
IDENT = re.compile(r"`([^`\s]+)`|(?<![\w.])([A-Za-z_]\w*)(?![\w.])")
# A plain word is a code name where the text says what kind of name it is: "the function area",
# "a method called load" (a kind word, optionally "called"/"named", then the name).
KIND = re.compile(r"\b(?:functions?|methods?|class(?:es)?|variables?|constants?|attributes?|"
                  r"fields?|parameters?|arguments?|propert(?:y|ies))\s+(?:(?:called|named)\s+)?"
                  r"([A-Za-z_]\w*)(?!\w|\.\w)", re.IGNORECASE)
# Words that follow a kind word in prose without being a name ("the function that sorts").
NOT_NAMES = frozenset("""a an the that which who whose this these those it its they them there
and or but nor so if then than when where while with without within into onto from for of to
in on at by as is are was were be been being has have had do does did can could should would
will shall may might must not no any all each every some other another one two same such
called named first last new old above below here""".split())
MAX_SYMBOLS = 6  # code names looked up per message
MAX_SCANNED = 400  # files searched for them
MAX_HITS = 24  # lines shown
# What the agent adds after the text a person typed, in this order (the output of tests the
# message says fail, the last entry, comes before the others when present).
ADDED = ("\n\nFiles in the repository:", "\n\nRepository map (",
         "\n\nWhere the names in the message occur:", "\n\nAttached files:",
         "\n\nThe tests fail now (the agent ran `")  # (the last: core/conversation.py TESTS_NOW)


def repo_files(ctx: Any) -> list[str]:
    """The repository's files (git's view: ignored files excluded), repo-relative."""
    from tools.list_files import repo_files as listing

    return listing(ctx)


def is_doc(path: str) -> bool:
    """Whether repo file `path` is documentation, a change log, a licence, package metadata or
    a lock file (DOC_NAMES, DOC_DIRS; case-insensitive): never searched for names or attached
    unless a message names it."""
    *dirs, name = path.lower().split("/")
    return (any(fnmatch.fnmatchcase(name, p) for p in DOC_NAMES)
            or any(fnmatch.fnmatchcase(d, p) for d in dirs for p in DOC_DIRS))


Sizes = tuple[tuple[str, int], ...]  # (what, characters)


@dataclass(frozen=True)
class Attached:
    """What `attach` added to a message (sizes in characters)."""

    text: str  # the message with what was added
    named: Sizes = ()  # files the message names: `@path`, a repository path, a file name
    found: Sizes = ()  # files defining names the message mentions (at most `budget` tokens)
    left_out: Sizes = ()  # files not attached: over `budget` (or MAX_MENTIONED_CHARS)
    extras: Sizes = ()  # the file listing, the repository map, the lines where names occur
    budget: int = AUTO_ATTACH_TOKENS

    @property
    def paths(self) -> list[str]:
        return [p for p, _ in (*self.named, *self.found)]

    def attached_line(self) -> str:
        """`attached a.py (1.2k chars), ...`: the files attached, with sizes; "" when none."""
        got = (*self.named, *self.found)
        return "attached " + ", ".join(f"{p} ({size(n)})" for p, n in got) if got else ""

    def event(self) -> ContextAttached | None:
        """The event that lists what was added and left out; None when nothing was."""
        added = (*self.named, *self.found, *self.extras)
        if not added and not self.left_out:
            return None
        return ContextAttached(notice(added, self.left_out, self.budget), added, self.left_out,
                               self.budget)


def notice(added: Sizes, left_out: Sizes, budget: int) -> str:
    """One line: what was added to a message, with sizes, and the files left out."""
    parts = []
    if added:
        total = sum(approx_tokens(n) for _, n in added)
        parts.append("added to the message: " + ", ".join(f"{p} ({size(n)})" for p, n in added)
                     + f"; ~{total} tokens in all")
    if left_out:
        parts.append(f"not attached (over the {budget}-token budget for files the message does "
                     "not name): " + ", ".join(f"{p} ({size(n)})" for p, n in left_out)
                     + "; @PATH or /add PATH attaches one")
    return "; ".join(parts)


def approx_tokens(chars: int) -> int:
    """Tokens `chars` characters take, estimated as characters / 3 (as core/repomap.py)."""
    return -(-chars // 3)


def size(chars: int) -> str:
    return f"{chars / 1000:.1f}k chars" if chars >= 1000 else f"{chars} chars"


def attach_mentions(text: str, ctx: Any, plain: bool = False,
                    listing: bool = False) -> tuple[str, list[str]]:
    """`attach` with the default budget, as (message, attached paths)."""
    got = attach(text, ctx, plain, listing)
    return got.text, got.paths


def attach(text: str, ctx: Any, plain: bool = False, listing: bool = False,
           budget: int = AUTO_ATTACH_TOKENS) -> Attached:
    """`text` with the contents of every `@path` naming a repository file appended (and, with
    `plain`, of every repository file the text names without `@`, and the lines and files
    where its code names occur, those files `budget` tokens at most and no `is_doc` file).
    A file already attached to `text` is not attached again. `listing`: the repository's
    files are listed (and, when `too_big`, mapped: agent/core/repomap.py) between the text
    and the attachments (a conversation's first message)."""
    files = repo_files(ctx)
    known = set(files)
    explicit = [m.group(1).rstrip(".,;:") for m in MENTION.finditer(text)]
    explicit = [p for p in explicit if p in known]
    named, found, hits = _lookup(text, ctx, files, explicit) if plain else ([], {}, [])
    taken, left = _choose(text, ctx.root, (explicit, named), found, budget)
    preface, extras = [], []
    if listing and files:
        shown = {*taken, *ATTACHED.findall(text)}  # their whole text is in the message
        preface = _head(text, ctx, files, [p for p in [*explicit, *named] if p in known], shown)
        extras += zip(("file listing", "repository map"), map(len, preface))
    if hits:
        preface.append(ADDED[2].strip() + "\n" + "\n".join(hits))
        extras.append((f"{len(hits)} lines where its names occur", len(preface[-1])))
    text = "\n\n".join([text, *preface])
    if taken:
        text += ADDED[3] + "\n" + "\n".join(f'<file path="{p}">\n{c}\n</file>'
                                            for p, c in taken.items())
    return Attached(text, tuple((p, len(c)) for p, c in taken.items() if p not in found),
                    tuple((p, len(c)) for p, c in taken.items() if p in found), tuple(left),
                    tuple(extras), budget)


def _lookup(text: str, ctx: Any, files: list[str],
            explicit: list[str]) -> tuple[list[str], dict[str, str], list[str]]:
    """(the repository files `text` names without `@`; the files where its code names occur,
    with their text; `path:line: text` of those lines). Names are looked up in the files the
    message does not name (those come whole) and never in `is_doc` files."""
    named = _named(text, files, set(files))
    others = [f for f in files if f not in named and f not in explicit and not is_doc(f)]
    names = symbols(text)
    # A plain word the text calls a function, class, ... is looked up only where a file
    # defines it ("the function area"; not "the function returns", "constant time"); a named
    # file counts (shapes.py defining the area it is asked to rename), a doc file does not.
    plain = {w for _, w in _kinded(text)} - set(_shaped(text))
    if plain & set(names):
        code = [f for f in files if not is_doc(f)]
        known_defs = defined_somewhere(ctx.root, code, plain & set(names))
        names = [n for n in names if n not in plain or n in known_defs]
    hits, found = symbol_hits(ctx.root, others, names)
    return named, found, hits


def _choose(text: str, root: Path, named: tuple[list[str], list[str]], found: dict[str, str],
            budget: int) -> tuple[dict[str, str], list[tuple[str, int]]]:
    """({path: text} of the files to attach, [(path, characters)] of those left out). The files
    `named` (with `@`, without) come first and whole: `@path` ones always, the others
    (MAX_MENTIONED of them) while all files without `@` stay under MAX_MENTIONED_CHARS; then
    the `found` ones (as many as make MAX_MENTIONED with those) while they also stay under
    `budget` tokens."""
    explicit = list(dict.fromkeys(named[0]))
    plain = [p for p in dict.fromkeys(named[1]) if p not in explicit][:MAX_MENTIONED]
    extra = [p for p in found if p not in plain][:max(0, MAX_MENTIONED - len(plain))]
    taken: dict[str, str] = {}
    left: list[tuple[str, int]] = []
    total = spent = 0  # characters without `@`; of found files
    for path in dict.fromkeys([*explicit, *plain, *extra]):
        if f'<file path="{path}">' in text:
            continue
        content = found[path] if path in found else attachment(root, path)
        if content is None:
            continue
        mine = path in explicit
        over = not mine and total + len(content) > MAX_MENTIONED_CHARS
        if path in extra and not over:
            over = approx_tokens(spent + len(content)) > budget
        if over:
            left.append((path, len(content)))
            continue
        total += 0 if mine else len(content)
        spent += len(content) if path in extra else 0
        taken[path] = content
    return taken, left


def _head(text: str, ctx: Any, files: list[str], named: list[str], shown: set[str]) -> list[str]:
    """What a conversation's first message begins with after its text: the file listing and,
    for a repository too big to list or attach (`too_big`), its map (`repo_map_tokens`)."""
    head = [file_listing(files)]
    limit = int(getattr(ctx, "repo_map_tokens", 0) or 0)
    if limit > 0 and too_big(ctx.root, files):
        from .repomap import repo_map

        typed = typed_text(text)
        outline = repo_map(ctx.root, files, typed, limit, names=symbols(typed), named=named,
                           exclude=shown)
        if outline:
            head.append(outline)
    return head


def too_big(root: Path, files: list[str]) -> bool:
    """Whether repository `files` are more than a first message shows: more files than the
    listing names, or more source text (the files a repository map outlines, by size on
    disk) than the files attached to one message may hold."""
    from .repomap import LANGUAGES

    if len(files) > MAX_LISTED:
        return True
    total = 0
    for f in files:
        if os.path.splitext(f)[1] in LANGUAGES:
            try:
                total += os.lstat(root / f).st_size
            except OSError:
                continue
            if total > MAX_MENTIONED_CHARS:
                return True
    return False


def typed_text(message: str) -> str:
    """The part of a user message its author typed: without the listing, lookups and files
    the agent added (for titles and replays)."""
    cut = min((i for i in (message.find(m) for m in ADDED) if i >= 0), default=len(message))
    return message[:cut]


def symbols(text: str) -> list[str]:
    """Code names in `text`, in order: words in backticks, words that look like identifiers
    (snake_case, CamelCase, CONSTANT_CASE) and words the text calls a function, method,
    class, variable, constant, attribute, field, parameter, argument or property ("the
    function area"); file names are not among them."""
    found = _shaped_at(text) + _kinded(text)
    return list(dict.fromkeys(w for _, w in sorted(found)))[:MAX_SYMBOLS]


def _shaped_at(text: str) -> list[tuple[int, str]]:
    """(position, word) of each word in backticks or shaped like an identifier."""
    found: list[tuple[int, str]] = []
    for m in IDENT.finditer(text):
        word = m.group(1) or m.group(2)
        if not word or not re.fullmatch(r"[A-Za-z_]\w{2,}", word):
            continue
        inner = word.strip("_")
        mixed = any(c.isupper() for c in inner[1:]) and any(c.islower() for c in inner)
        if m.group(1) or "_" in inner or mixed or (inner.isupper() and len(inner) >= 3):
            found.append((m.start(), word))
    return found


def _shaped(text: str) -> list[str]:
    return [w for _, w in _shaped_at(text)]


def _kinded(text: str) -> list[tuple[int, str]]:
    """(position, word) of each word `text` calls a function, class, ... ("the function area")."""
    return [(m.start(1), m.group(1)) for m in KIND.finditer(text)
            if len(m.group(1)) >= 3 and m.group(1).lower() not in NOT_NAMES]


def defined_somewhere(root: Path, files: list[str], names: set[str]) -> set[str]:
    """The `names` that one of the repository's `files` defines (a def, a class, an assignment
    at the start of a line), looked for in at most MAX_SCANNED files."""
    if not names:
        return set()
    alt = "|".join(map(re.escape, sorted(names)))
    pattern = re.compile(rf"^[ \t]*(?:(?:async[ \t]+)?def|class)[ \t]+({alt})\b"
                         rf"|^[ \t]*({alt})[ \t]*(?::[^=\n]*)?=(?!=)", re.M)
    out: set[str] = set()
    for path in files[:MAX_SCANNED]:
        content = attachment(root, path)
        if content is None:
            continue
        out.update(a or b for a, b in pattern.findall(content))
        if out >= names:
            break
    return out


def symbol_hits(root: Path, files: list[str], names: list[str]) -> tuple[list[str], dict[str, str]]:
    """(`path:line: text` for each line of a repository file with one of `names` as a whole
    word, at most MAX_HITS; the files those lines are in, in order, with their text)."""
    if not names:
        return [], {}
    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\b")
    hits: list[str] = []
    where: dict[str, str] = {}
    for path in files[:MAX_SCANNED]:
        content = attachment(root, path)
        if content is None or not pattern.search(content):
            continue
        where[path] = content
        for no, line in enumerate(content.splitlines(), 1):
            if len(hits) < MAX_HITS and pattern.search(line):
                hits.append(f"{path}:{no}: {line.strip()[:160]}")
    return hits, where


def file_listing(files: list[str], limit: int = MAX_LISTED) -> str:
    """One line naming the repository's `files`, at most `limit` of them, for the first
    message of a conversation: a small model then knows which files exist."""
    shown = ", ".join(files[:limit])
    more = f" (and {len(files) - limit} more)" if len(files) > limit else ""
    return f"{ADDED[0].strip()} {shown}{more}."


def _named(text: str, files: list[str], known: set[str]) -> list[str]:
    """Repository files `text` names without `@`: a word equal to a repo path, or to the file
    name of exactly one repo file."""
    by_name: dict[str, list[str]] = {}
    for f in files:
        by_name.setdefault(f.rsplit("/", 1)[-1], []).append(f)
    out = []
    for m in WORD.finditer(text):
        if m.start() and text[m.start() - 1] == "@":
            continue
        word = m.group(0).rstrip(".,;:").removeprefix("./")
        if word in known:
            out.append(word)
        elif "/" not in word and len(by_name.get(word, ())) == 1:
            out.append(by_name[word][0])
    return list(dict.fromkeys(out))


def attachment(root: Path, path: str) -> str | None:
    """The text of repo file `path`, cut after MAX_ATTACH_CHARS; None when it may not or
    cannot be attached: outside the repo or in .git (symlinks followed), not a regular file
    (a FIFO, device or socket is never opened in a way that blocks or acts), binary or
    unreadable. Only the first MAX_ATTACH_CHARS characters' worth of bytes are read, however
    big the file."""
    from tools._paths import PathError, confine
    from tools.read_file import open_regular

    limit = MAX_ATTACH_CHARS * 4  # UTF-8: at most 4 bytes a character
    try:
        with open_regular(confine(root, path), path) as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(limit + 1)
    except (PathError, OSError):
        return None
    cut = len(data) > limit
    if b"\x00" in data[:8192]:
        return None
    try:  # a cut may split the last character: the decoder holds it back instead of failing
        content = codecs.getincrementaldecoder("utf-8")().decode(data[:limit], final=not cut)
    except UnicodeDecodeError:
        return None
    if cut or len(content) > MAX_ATTACH_CHARS:
        shown = content[:MAX_ATTACH_CHARS]
        rest = size - len(shown.encode("utf-8"))
        return shown + f"\n[... {rest} more bytes]"
    return content

"""Custom slash commands: Markdown files whose text is sent as a message.

`.spec-agent/commands/NAME.md` in the repository and `commands/NAME.md` in the user's config
folder (`~/.config/spec-agent/commands/`) each make `/NAME` (a file in a subfolder, `a/b.md`,
makes `/a:b`; the repository's wins over the user's of the same name; a built-in command's name
is never taken). Typing `/NAME words` sends the file's text with `$ARGUMENTS` replaced by
`words` (and `$1` … `$9` by single words); a file with neither gets the words appended.
Optional front matter, as Claude Code's command files have it, gives the help text:

    ---
    description: Review the staged changes
    argument-hint: [focus]
    ---
    Review `git diff --cached` for bugs. Focus on: $ARGUMENTS

Only the text is used: nothing in a command file runs a program, and the UIs send it as a
message even when it starts with `!` (never as the user's own `!command`). The repository's
files are read only from a real folder inside it (no symlink from the repository root down,
opened with O_NOFOLLOW), regular files only (no FIFO, no device), at most MAX_FILE_BYTES each;
`warnings(root)` says what was refused. The user's folder may itself be a symlink (theirs).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

MAX_FILE_BYTES = 64_000
MAX_COMMANDS = 200  # per folder
MAX_ENTRIES = 2_000  # read of one folder
MAX_DEPTH = 3  # subfolders below a commands folder
REPO_PARTS = (".spec-agent", "commands")
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
CACHE_S = 2.0  # the folders are read again after this long (completion asks on every key)
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_:.-]{0,60}$")
_POSITIONAL = re.compile(r"\$([1-9])")


@dataclass(frozen=True)
class CustomCommand:
    name: str
    description: str
    hint: str  # what the arguments are, e.g. "[file]"
    body: str
    path: Path

    def expand(self, arguments: str) -> str:
        words = arguments.split()
        text = _POSITIONAL.sub(lambda m: words[int(m.group(1)) - 1] if int(m.group(1)) <= len(words) else "",
                               self.body)
        if "$ARGUMENTS" in text:
            return text.replace("$ARGUMENTS", arguments).strip()
        if _POSITIONAL.search(self.body):
            return text.strip()
        return (text.strip() + ("\n\n" + arguments if arguments else "")).strip()


def user_commands_dir() -> Path:
    from ..config import user_config_path

    return user_config_path().parent / "commands"


def repo_commands_dir(root: Path) -> Path:
    return root.joinpath(*REPO_PARTS)


def parse_file(text: str) -> tuple[dict[str, str], str]:
    """(front matter keys, body) of a command file; no front matter: ({}, text)."""
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---", 4)
    if end < 0:
        return {}, text
    meta = {}
    for line in text[4:end].splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            meta[key.strip().lower()] = value.strip().strip("\"'")
    return meta, text[end + 4:].lstrip("-").lstrip("\n")


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_folder(root: Path, parts: tuple[str, ...]) -> tuple[int | None, str]:
    """(a descriptor of root/parts, "") opened one part at a time without following a symlink,
    or (None, why not); (None, "") when the folder does not exist."""
    try:
        fd = os.open(root, _DIR)
    except OSError:
        return None, ""
    for i, part in enumerate(parts):
        try:
            inner = os.open(part, _DIR | os.O_NOFOLLOW, dir_fd=fd)
        except FileNotFoundError:
            inner, why = None, ""
        except OSError as e:
            rel = "/".join(parts[: i + 1])
            inner, why = None, (f"{rel} is a symlink" if _is_link(part, fd) else
                                f"{rel} is not a folder" if e.errno in (errno.ENOTDIR, errno.ELOOP)
                                else f"{rel}: {e.strerror}")
        os.close(fd)
        if inner is None:
            return None, why and f"{why}; command files are read only from a real folder inside the repository"
        fd = inner
    return fd, ""


def _read_regular(name: str, dir_fd: int) -> str | None:
    """A regular file's text (at most MAX_FILE_BYTES), opened without following a symlink and
    without blocking on a FIFO; None for anything else or a bigger file."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            return None
        data = os.read(fd, MAX_FILE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if len(data) > MAX_FILE_BYTES else data.decode("utf-8", errors="replace")


def _walk(fd: int, prefix: tuple[str, ...], out: dict[tuple[str, ...], str], depth: int = 0) -> None:
    """Fill `out` with (relative parts) -> text for the `.md` files under the folder `fd` (closed
    here): real folders and regular files only, MAX_DEPTH deep, MAX_COMMANDS files."""
    try:
        with os.scandir(fd) as it:
            entries = sorted((e for _, e in zip(range(MAX_ENTRIES), it)), key=lambda e: e.name)
        for e in entries:
            if len(out) >= MAX_COMMANDS or e.is_symlink():
                continue
            if e.is_dir(follow_symlinks=False) and depth < MAX_DEPTH:
                try:
                    inner = os.open(e.name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
                except OSError:
                    continue
                _walk(inner, (*prefix, e.name), out, depth + 1)
            elif e.name.endswith(".md") and e.is_file(follow_symlinks=False):
                text = _read_regular(e.name, fd)
                if text is not None:
                    out[(*prefix, e.name[: -len(".md")])] = text
    except OSError:
        pass
    finally:
        os.close(fd)


def _read_dir(fd: int | None, folder: Path, where: str) -> dict[str, CustomCommand]:
    found: dict[tuple[str, ...], str] = {}
    if fd is not None:
        _walk(fd, (), found)
    out: dict[str, CustomCommand] = {}
    for parts, text in found.items():
        name = ":".join(parts)
        if not _NAME.match(name):
            continue
        meta, body = parse_file(text)
        first = next((ln.strip("# ").strip() for ln in body.splitlines() if ln.strip()), "")
        description = meta.get("description") or first[:60] or "(empty)"
        out[name] = CustomCommand(name, f"{description} ({where})", meta.get("argument-hint", ""),
                                  body, folder.joinpath(*parts[:-1], parts[-1] + ".md"))
    return out


_cache: dict[Path, tuple[float, dict[str, CustomCommand], list[str]]] = {}


def _read_all(root: Path | None) -> tuple[dict[str, CustomCommand], list[str]]:
    """The user's commands (their folder may be a symlink: it is the user's own), then the
    repository's, from a real folder only; and what was refused."""
    folder = user_commands_dir()
    try:
        user = os.open(folder, _DIR)
    except OSError:
        user = None
    found = _read_dir(user, folder, "user")
    if root is None:
        return found, []
    fd, why = _open_folder(root, REPO_PARTS)
    found.update(_read_dir(fd, repo_commands_dir(root), "project"))
    return found, [why] if why else []


def _cached(root: Path | None) -> tuple[dict[str, CustomCommand], list[str]]:
    key = root.resolve() if root is not None else Path("/")
    hit = _cache.get(key)
    if hit is None or time.monotonic() - hit[0] >= CACHE_S:
        hit = (time.monotonic(), *_read_all(root))
        _cache[key] = hit
    return hit[1], hit[2]


def load(root: Path | None, builtin: set[str] | frozenset[str] = frozenset()) -> dict[str, CustomCommand]:
    """The custom commands for repository `root` (cached for CACHE_S), built-in names left out."""
    return {n: c for n, c in _cached(root)[0].items() if n not in builtin}


def warnings(root: Path | None) -> list[str]:
    """Why command files of repository `root` were not read (a symlinked folder), one line each."""
    return list(_cached(root)[1])

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

Only the text is used: nothing in a command file runs a program.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

MAX_FILE_BYTES = 64_000
MAX_COMMANDS = 200  # per folder
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
    return root / ".spec-agent" / "commands"


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


def _read_dir(folder: Path, where: str) -> dict[str, CustomCommand]:
    out: dict[str, CustomCommand] = {}
    try:
        files = sorted(p for p in folder.rglob("*.md") if p.is_file() and not p.is_symlink())
    except OSError:
        return out
    for path in files[:MAX_COMMANDS]:
        rel = path.relative_to(folder).with_suffix("")
        name = ":".join(rel.parts)
        if not _NAME.match(name):
            continue
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        meta, body = parse_file(text)
        first = next((ln.strip("# ").strip() for ln in body.splitlines() if ln.strip()), "")
        description = meta.get("description") or first[:60] or "(empty)"
        out[name] = CustomCommand(name, f"{description} ({where})", meta.get("argument-hint", ""),
                                  body, path)
    return out


_cache: dict[Path, tuple[float, dict[str, CustomCommand]]] = {}


def load(root: Path | None, builtin: set[str] | frozenset[str] = frozenset()) -> dict[str, CustomCommand]:
    """The custom commands for repository `root` (cached for CACHE_S), built-in names left out."""
    key = root.resolve() if root is not None else Path("/")
    hit = _cache.get(key)
    if hit is not None and time.monotonic() - hit[0] < CACHE_S:
        found = hit[1]
    else:
        found = _read_dir(user_commands_dir(), "user")
        if root is not None:
            found.update(_read_dir(repo_commands_dir(root), "project"))
        _cache[key] = (time.monotonic(), found)
    return {n: c for n, c in found.items() if n not in builtin}

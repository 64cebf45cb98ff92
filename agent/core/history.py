"""Saved conversations, so a later run can resume one: JSON lines per conversation, per repo.

Layout: `store.home()/conversations/<key>/<conv_id>.jsonl`, `<key>` = the repo folder's name
plus a short sha256 of its resolved path (two repos never share a folder). Line 1 is a header
`{"type": "header", "id", "repo", "created", "version": 1}`, each later line a message
`{"type": "message", "role", "content"}`. A cut last line (the process died mid-write) is
dropped with a warning; any other bad line makes the file corrupt: `load` refuses it, `latest`
and `list` skip it with a warning. Stdlib only; nothing here knows about models or rendering.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import store
from ..safe_input import loads
from .attach import typed_text

VERSION = 1
ROLES = frozenset({"system", "user", "assistant"})
_ID = re.compile(r"[A-Za-z0-9_-]+\Z")


class HistoryError(Exception):
    exit_code = 2


class _Corrupt(ValueError):
    """Why a conversation file cannot be read (internal; becomes a warning or HistoryError)."""


@dataclass(frozen=True)
class ConversationInfo:
    id: str
    created: float  # unix time, from the header
    modified: float  # unix time, the file's mtime
    messages: int  # all messages, the system prompt included
    first_user_message: str  # one line, at most 80 characters; "" if none


def repo_key(root: Path) -> str:
    """`<folder name>-<12 hex of sha256(resolved path)>`: readable and unique per repo."""
    resolved = root.resolve()
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", resolved.name)[:40] or "root"
    return f"{name}-{hashlib.sha256(str(resolved).encode()).hexdigest()[:12]}"


def _entry(obj: object, n: int) -> dict[str, str]:
    """The message on line `n` (2+), or _Corrupt."""
    if not isinstance(obj, dict) or obj.get("type") != "message":
        raise _Corrupt(f"line {n} is not a message")
    if obj.get("role") not in ROLES or not isinstance(obj.get("content"), str):
        raise _Corrupt(f"line {n} has a bad role or content")
    return {"role": obj["role"], "content": obj["content"]}


def _read(path: Path, conv_id: str) -> tuple[float, list[dict[str, str]], bool]:
    """(created, messages, whether a cut last line was dropped); _Corrupt or OSError."""
    lines = path.read_bytes().split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    cut = False
    if tail:
        try:
            loads(tail, clean=False)
            lines.append(tail)  # complete, only its newline is missing
        except ValueError:
            cut = True
    objs = []
    for n, line in enumerate(lines, 1):
        try:
            objs.append(loads(line, clean=False))
        except ValueError:  # UnicodeDecodeError is one too
            raise _Corrupt(f"line {n} is not JSON") from None
    header = objs[0] if objs else None
    if not isinstance(header, dict) or header.get("type") != "header":
        raise _Corrupt("line 1 is not a header")
    if header.get("version") != VERSION or header.get("id") != conv_id:
        raise _Corrupt(f"header has version {header.get('version')!r}, id {header.get('id')!r}")
    created = header.get("created")
    if not isinstance(created, (int, float)) or isinstance(created, bool):
        raise _Corrupt("header has no creation time")
    return float(created), [_entry(o, n) for n, o in enumerate(objs[1:], 2)], cut


def _one_line(text: str, width: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


class HistoryStore:
    """The saved conversations of one repository."""

    def __init__(self, root: Path, home: Path | None = None):
        self.root = Path(root).resolve()
        base = home if home is not None else store.home()
        self.dir = base / "conversations" / repo_key(self.root)
        self.warnings: list[str] = []

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def path(self, conv_id: str) -> Path:
        if not isinstance(conv_id, str) or not _ID.match(conv_id):
            raise HistoryError(
                f"bad conversation id {conv_id!r}: use letters, digits, '-' and '_' only")
        return self.dir / f"{conv_id}.jsonl"

    def _read(self, path: Path) -> tuple[float, list[dict[str, str]]]:
        """(created, messages), warning about a cut last line; _Corrupt or OSError."""
        created, messages, cut = _read(path, path.stem)
        if cut:
            self._warn(f"conversation file {path}: its last line was cut off; ignored it")
        return created, messages

    def _try_read(self, path: Path) -> tuple[float, list[dict[str, str]]] | None:
        """`_read`, but a failure adds a warning and returns None."""
        try:
            return self._read(path)
        except _Corrupt as e:
            self._warn(f"skipped corrupt conversation file {path}: {e}")
        except OSError as e:
            self._warn(f"skipped unreadable conversation file {path}: {e.strerror or e}")
        return None

    def load(self, conv_id: str) -> list[dict[str, str]]:
        path = self.path(conv_id)
        if not path.is_file():
            raise HistoryError(f"no saved conversation '{conv_id}' for {self.root}")
        try:
            return self._read(path)[1]
        except _Corrupt as e:
            raise HistoryError(f"conversation file {path} is corrupt: {e}") from None
        except OSError as e:
            raise HistoryError(f"cannot read conversation file {path}: {e.strerror or e}") from None

    def _files(self) -> list[tuple[float, Path]]:
        """(mtime, conversation file), newest modification first."""
        try:
            found = [(p.stat().st_mtime, p) for p in self.dir.glob("*.jsonl")
                     if _ID.match(p.stem) and p.is_file()]
        except OSError as e:  # e.g. a file removed between glob and stat
            self._warn(f"cannot list conversations in {self.dir}: {e.strerror or e}")
            return []
        return sorted(found, key=lambda t: (t[0], t[1].name), reverse=True)

    def latest(self) -> str | None:
        for _, path in self._files():
            if self._try_read(path) is not None:
                return path.stem
        return None

    def list(self) -> list[ConversationInfo]:
        infos = []
        for mtime, path in self._files():
            read = self._try_read(path)
            if read is None:
                continue
            created, messages = read
            first = typed_text(next((m["content"] for m in messages if m["role"] == "user"), ""))
            infos.append(ConversationInfo(path.stem, created, mtime, len(messages),
                                          _one_line(first)))
        return infos

    def recorder(self, conv_id: str) -> Callable[[dict[str, str]], None]:
        """A function appending one message per call (the header too, on a new file)."""
        path = self.path(conv_id)
        checked = False

        def record(message: dict[str, str]) -> None:
            nonlocal checked
            try:
                entry = _entry({**message, "type": "message"}, 0)  # refuse what `load` refuses
            except _Corrupt:
                raise HistoryError(f"refusing to save a message with role "
                                   f"{message.get('role')!r} or non-text content") from None
            line = json.dumps({"type": "message", **entry}) + "\n"  # ASCII: any str encodes
            try:
                if not checked:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    _drop_cut_tail(path)
                    checked = True
                size = path.stat().st_size if path.exists() else 0
                if size == 0:
                    line = json.dumps({"type": "header", "id": conv_id, "repo": str(self.root),
                                       "created": time.time(), "version": VERSION}) + "\n" + line
                _append_whole(path, line.encode("ascii"), size)
            except OSError as e:
                checked = False  # the next message checks the file's end again
                raise HistoryError(
                    f"cannot save conversation to {path}: {e.strerror or e}") from None

        return record


def _append_whole(path: Path, data: bytes, size: int) -> None:
    """Append `data` to `path` (now `size` bytes); when that fails part-way (a full disk),
    cut the file back to `size`, so no part of a line is left behind."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass  # what is left is a cut last line, which `load` ignores and the next write drops
        raise
    finally:
        os.close(fd)


def _drop_cut_tail(path: Path) -> None:
    """End the file on a newline so appended lines stay whole: a cut last line (which `load`
    ignores) is truncated, a complete one missing only its newline gets it."""
    try:
        with path.open("r+b") as f:
            data = f.read()
            if not data or data.endswith(b"\n"):
                return
            tail = data[data.rfind(b"\n") + 1:]
            try:
                loads(tail, clean=False)
                f.write(b"\n")
            except ValueError:
                f.truncate(len(data) - len(tail))
    except FileNotFoundError:
        pass

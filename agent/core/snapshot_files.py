"""What a snapshot keeps beyond what git's trees hold (agent/core/snapshots.py uses these).

- Ignored files inside ignored folders (`secrets/prod.env`, `.cache/tokens/a.json`): git's
  listing stops at an ignored folder, so `ignored_inside` walks those folders itself, except
  the ones that are rebuilt rather than written (REBUILT: virtual envs, package and build
  folders, caches of tools), within a budget of entries visited.
- Permission bits git does not record (a tree has only 644 and 755): `odd_modes` lists the
  files whose mode is neither, `restore_modes` puts them back after the files are restored.
- Files no snapshot holds (untracked files over the size cap): `unsaved` lists them, so the
  sandbox can keep them read-only and undo can say they are gone instead of "nothing to undo".
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

REBUILT = frozenset({".venv", "venv", "env", "node_modules", "build", "dist", "target", "out",
                     "__pycache__", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache",
                     ".gradle", ".next", ".nuxt", ".parcel-cache", ".turbo", "bower_components",
                     ".eggs", "site-packages", ".terraform", "_build", "cmake-build-debug"})
WALK_BUDGET = 5000  # entries looked at inside ignored folders, per snapshot
MAX_MODES = 2000  # files with odd modes recorded per snapshot
MAX_UNSAVED = 200  # unsaved files named per snapshot


def ignored_inside(top: Path, folders: list[str], max_file: int) -> list[str]:
    """Files (repo-relative, at most `max_file` bytes) inside the ignored `folders` (as git
    lists them, ending in '/'), skipping REBUILT folders and symlinks, within WALK_BUDGET."""
    out, seen = [], 0
    for folder in folders:
        if Path(folder.rstrip("/")).name in REBUILT:
            continue
        for dirpath, dirnames, filenames in os.walk(top / folder):
            dirnames[:] = [d for d in dirnames if d not in REBUILT and d != ".git"
                           and not os.path.islink(os.path.join(dirpath, d))]
            seen += len(dirnames) + len(filenames)
            if seen > WALK_BUDGET:
                return out
            for name in filenames:
                full = os.path.join(dirpath, name)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_size <= max_file:
                    out.append(os.path.relpath(full, top))
    return out


def _umask() -> int:
    """This process's umask, read without changing it (Linux); 022 where it cannot be."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return 0o022


def odd_modes(top: Path, paths: list[str]) -> dict[str, int]:
    """{path: permission bits} for the regular files of `paths` whose bits git would not
    restore (anything but 0644 and 0755, or what the umask makes of 0666 and 0777)."""
    mask = _umask()
    usual = {0o644, 0o755, 0o666 & ~mask, 0o777 & ~mask}
    out: dict[str, int] = {}
    for rel in paths:
        try:
            st = os.lstat(top / rel)
        except OSError:
            continue
        bits = stat.S_IMODE(st.st_mode)
        if stat.S_ISREG(st.st_mode) and bits not in usual:
            out[rel] = bits
            if len(out) >= MAX_MODES:
                break
    return out


def restore_modes(top: Path, target: dict[str, int], now: dict[str, int]) -> None:
    """Give files the bits `target` recorded; files odd `now` but not in `target` get git's
    default back (0755 when executable, else 0644)."""
    for rel in set(now) - set(target):
        try:
            st = os.lstat(top / rel)
            if stat.S_ISREG(st.st_mode):
                os.chmod(top / rel, 0o755 if st.st_mode & 0o100 else 0o644)
        except OSError:
            continue
    for rel, bits in target.items():
        try:
            if stat.S_ISREG(os.lstat(top / rel).st_mode):
                os.chmod(top / rel, bits)
        except OSError:
            continue


def encode(value: object) -> str:
    """One line of JSON, for a field of the snapshot's commit message."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def decode(text: str | None, default: object) -> object:
    if not text:
        return default
    try:
        value = json.loads(text)
    except ValueError:
        return default
    return value if isinstance(value, type(default)) else default

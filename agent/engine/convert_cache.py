"""Converted GGUF weights cached in the model store, so only the first load dequantizes.

One folder per (source file sha256, weight format) under a root the caller hands in:
`model.safetensors` (the model's parameters by mlx-lm name), `tokenizer.json`, and
`manifest.json` naming the source sha256, the model arguments, quantization per layer, stop
ids and the tokenizer's special tokens and chat template. Folders appear atomically (built
under a temporary name, then renamed). The source's sha256 is remembered by path, size and
mtime, so a warm load does not hash the GGUF file again. Nothing here knows GGUF itself.
Every file is read through agent/engine/bounded.py (regular files only, no symlinks, size and
nesting caps); an entry that fails a check is deleted with one warning and converted again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import mlx.core as mx

from .bounded import InputError, open_regular, read_bytes, read_json

log = logging.getLogger(__name__)

VERSION = 1
_SOURCES = "sources.json"
_MAX_MANIFEST = 16 << 20  # a chat template and a few hundred layers' quantization
_MAX_TOKENIZER = 64 << 20


def _memo(path: Path) -> dict[str, Any]:
    """The sha256 memo; an unreadable one is started again (it only saves time)."""
    try:
        memo = read_json(path, follow=False)
    except (FileNotFoundError, InputError):
        return {}
    return memo if isinstance(memo, dict) else {}


def source_sha256(path: Path, root: Path) -> str:
    """sha256 of a GGUF file, hashed once and memoised under `root` (by size and mtime)."""
    path = path.resolve()
    st = path.stat()
    memo_path = root / _SOURCES
    memo = _memo(memo_path)
    hit = memo.get(str(path))
    if (isinstance(hit, dict) and hit.get("size") == st.st_size and hit.get("mtime_ns") == st.st_mtime_ns
            and isinstance(hit.get("sha256"), str) and len(hit["sha256"]) == 64):
        return hit["sha256"]
    with open_regular(path) as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    memo[str(path)] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    try:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(memo, indent=1))
        os.replace(tmp, memo_path)
    except OSError:
        pass  # the memo only saves time
    return digest


def folder_for(root: Path, sha256: str, fmt: str) -> Path:
    return root / f"{sha256[:24]}-{fmt}-v{VERSION}"


def lookup(root: Path, sha256: str, fmt: str) -> tuple[Path, dict[str, Any]] | None:
    """(folder, manifest) of a complete cached conversion under `root`, or None; a damaged
    entry is deleted with a warning (the caller converts again)."""
    folder = folder_for(root, sha256, fmt)
    try:
        manifest = read_json(folder / "manifest.json", _MAX_MANIFEST, follow=False)
        why = _manifest_problem(manifest, sha256)
    except FileNotFoundError:
        return None
    except InputError as e:
        why = str(e)
    if not why:
        weights = folder / "model.safetensors"
        why = "" if weights.is_file() and not weights.is_symlink() else (
            "model.safetensors is not a regular file" if os.path.lexists(weights)
            else "model.safetensors is missing")
    if why:
        discard(folder, why)
        return None
    return folder, manifest


def _manifest_problem(m: Any, sha256: str) -> str:
    """'' when `m` has every field a cached load reads, of the right type."""
    if not isinstance(m, dict):
        return "manifest.json is not an object"
    quant = m.get("quantization", {})
    checks = {
        "source_sha256": m.get("source_sha256") == sha256,
        "args": isinstance(m.get("args"), dict),
        "quantization": isinstance(quant, dict) and all(
            isinstance(v, list) and len(v) == 2 and all(type(x) is int and 0 < x <= 1024 for x in v)
            for v in quant.values()),
        "stop_ids": isinstance(m.get("stop_ids"), list)
        and all(type(i) is int and i >= 0 for i in m["stop_ids"]),
        "special_tokens": isinstance(m.get("special_tokens", {}), dict)
        and all(isinstance(v, str) for v in m.get("special_tokens", {}).values()),
        "chat_template": isinstance(m.get("chat_template"), (str, type(None))),
    }
    bad = [k for k, ok in checks.items() if not ok]
    return f"manifest.json has a bad {', '.join(bad)}" if bad else ""


def discard(folder: Path, why: str) -> None:
    """Delete a damaged entry (one warning); the next load converts again."""
    log.warning("converted-weights cache: ignored and deleted %s (%s)", folder,
                why.replace(f"{folder}{os.sep}", ""))
    try:
        if folder.is_symlink() or not folder.is_dir():
            folder.unlink(missing_ok=True)
        else:
            shutil.rmtree(folder)
    except OSError:
        pass


def save(root: Path, sha256: str, fmt: str, weights: dict[str, mx.array], tokenizer: Any,
         manifest: dict[str, Any]) -> Path | None:
    """Write a conversion atomically; None (and nothing written) when the disk is too full."""
    final = folder_for(root, sha256, fmt)
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    need = sum(v.nbytes for v in weights.values()) + (64 << 20)
    if shutil.disk_usage(root).free < need:
        return None
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".convert-"))
    try:
        mx.save_safetensors(str(tmp / "model.safetensors"), weights)
        tokenizer.backend_tokenizer.save(str(tmp / "tokenizer.json"))
        full = dict(manifest, version=VERSION, source_sha256=sha256, format=fmt,
                    created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        (tmp / "manifest.json").write_text(json.dumps(full, indent=1))
        try:
            os.rename(tmp, final)  # atomic; fails if another process got there first
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def load_tokenizer(folder: Path, manifest: dict[str, Any]):
    """The `PreTrainedTokenizerFast` saved beside the weights."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    data = read_bytes(folder / "tokenizer.json", _MAX_TOKENIZER, follow=False)
    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception (bad UTF-8 too)
        raise InputError(f"{folder / 'tokenizer.json'}: unusable ({str(e).splitlines()[0][:160]})") from None
    special = manifest.get("special_tokens", {})
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, chat_template=manifest.get("chat_template"),
        clean_up_tokenization_spaces=False, **special,
    )

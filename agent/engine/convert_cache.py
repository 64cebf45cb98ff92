"""Converted GGUF weights cached in the model store, so only the first load dequantizes.

One folder per (source file sha256, weight format) under a root the caller hands in:
`model.safetensors` (the model's parameters by mlx-lm name), `tokenizer.json`, and
`manifest.json` naming the source sha256, the model arguments, quantization per layer, stop
ids and the tokenizer's special tokens and chat template. Folders appear atomically (built
under a temporary name, then renamed). The source's sha256 is remembered by path, size and
mtime, so a warm load does not hash the GGUF file again. Nothing here knows GGUF itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import mlx.core as mx


VERSION = 1
_SOURCES = "sources.json"


def source_sha256(path: Path, root: Path) -> str:
    """sha256 of a GGUF file, hashed once and memoised under `root` (by size and mtime)."""
    path = path.resolve()
    st = path.stat()
    memo_path = root / _SOURCES
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    hit = memo.get(str(path))
    if hit and hit.get("size") == st.st_size and hit.get("mtime_ns") == st.st_mtime_ns:
        return hit["sha256"]
    with open(path, "rb") as f:
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
    """(folder, manifest) of a complete cached conversion under `root`, or None."""
    folder = folder_for(root, sha256, fmt)
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("source_sha256") != sha256 or not (folder / "model.safetensors").is_file():
        return None
    return folder, manifest


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

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    special = manifest.get("special_tokens", {})
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, chat_template=manifest.get("chat_template"),
        clean_up_tokenization_spaces=False, **special,
    )

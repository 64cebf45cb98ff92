"""The one table of the values each setting may take: config keys' choices and ranges.

The config loader, the command line's `choices=` and the sampling parameters all read it.
It is data only and imports nothing of the project, so every layer may use it.
"""

from __future__ import annotations

from typing import Any, Callable

CHOICES: dict[str, tuple[str, ...]] = {
    "device": ("auto", "cpu", "gpu"),
    "blas": ("auto", "off"),
    "speculation": ("auto", "on", "off"),
    "drafter": ("auto", "model", "lookup", "combined"),
    "tree": ("off", "auto"),
    "approval_mode": ("suggest", "auto-edit", "full-auto"),
    "dirty_files": ("commit", "stash", "refuse"),
    "tool_choice": ("auto", "first", "required"),
    "sandbox": ("auto", "off"),
    "engine": ("local", "openai"),
    "tool_format": ("auto", "native", "text"),
    "edit_format": ("whole", "diff", "auto", "tool"),
    "fix_mode": ("auto", "repair", "resample", "restart"),
}

# Edit formats in which files change through code blocks in the reply, not edit tools.
BLOCK_EDIT_FORMATS = ("whole", "diff", "auto")

APPROVAL_MODES = CHOICES["approval_mode"]

RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_turns": (lambda v: v >= 1, ">= 1"),
    "max_tokens": (lambda v: v >= 1, ">= 1"),
    "shell_timeout_s": (lambda v: v > 0, "> 0"),
    "memory_headroom_gb": (lambda v: v >= 0, ">= 0"),
    "num_draft_tokens": (lambda v: 0 <= v <= 32, "between 0 (adaptive) and 32"),
    "draft_confidence": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "tree_nodes": (lambda v: 2 <= v <= 64, "between 2 and 64"),
    "draft_vocab": (lambda v: v >= 0, ">= 0 (0 = the full head)"),
    "temperature": (lambda v: v >= 0, ">= 0"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "top_k": (lambda v: v >= 0, ">= 0 (0 = off)"),
    "min_p": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "repetition_penalty": (lambda v: 0 < v <= 10, "in (0, 10] (1 = off)"),
    "prefix_cache_mb": (lambda v: v >= 0, ">= 0 (0 = off)"),
    "disk_cache_mb": (lambda v: v >= 0, ">= 0 (0 = off)"),
    "kv_bits": (lambda v: v in (0, 4, 8), "0 (full precision), 4 or 8"),
    "snapshot_max_count": (lambda v: v >= 1, ">= 1"),
    "snapshot_max_age_days": (lambda v: v > 0, "> 0"),
    "connect_timeout_s": (lambda v: v > 0, "> 0"),
    "read_timeout_s": (lambda v: v > 0, "> 0"),
    "max_retries": (lambda v: 0 <= v <= 20, "between 0 and 20"),
    "max_fix_rounds": (lambda v: 0 <= v <= 10, "between 0 (off) and 10"),
    "resample_temperature": (lambda v: 0 <= v <= 2, "between 0 (off) and 2"),
    "repo_map_tokens": (lambda v: 0 <= v <= 16384, "between 0 (off) and 16384"),
    "auto_attach_tokens": (lambda v: 0 <= v <= 131072, "between 0 (none) and 131072"),
    "base_url": (lambda v: v == "" or v.startswith(("http://", "https://")),
                 "an http:// or https:// URL"),
}

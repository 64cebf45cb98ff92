"""The TUI's status bar: live decoding figures, model, approval mode and git state.

`Figures` is built only from the engine's events (`DecodeProgress` while decoding, the
turn's `GenerationStats` when it ends); the bar computes nothing itself and calls nothing.
Its lines are escaped for the terminal (a model name or branch is not ours to trust).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..core.shown import shown
from ..events import DecodeProgress, GenerationStats

SEP = " │ "


@dataclass(frozen=True)
class Figures:
    """What the status bar shows about decoding; built from the engine's events only."""

    tps: float = 0.0
    acc: float | None = None  # None: nothing drafted yet
    mean: float = 0.0
    k: int = 0
    spec: str = ""  # "on" | "auto-off" | "off" (or the configured mode before any decoding)
    reason: str = ""
    ctx: int = 0
    limit: int = 0
    cache: tuple[int, int] | None = None  # (cached, prompt) tokens of the last prefill

    def with_progress(self, p: DecodeProgress) -> Figures:
        return replace(self, tps=p.tps, acc=p.acceptance_rate if p.drafted else self.acc,
                       mean=p.mean_accepted if p.rounds else self.mean, k=p.k,
                       spec=p.speculation, reason=p.reason, ctx=p.context_tokens,
                       limit=p.context_limit)

    def with_stats(self, s: GenerationStats) -> Figures:
        spec = "on" if s.speculative else self.spec if self.spec in ("auto-off", "off") else "off"
        if s.backend and not s.speculative:
            spec = "?"  # a server that does not report drafting may still draft
        return replace(self, tps=s.decode_tps, spec=spec,
                       acc=s.acceptance_rate if s.drafted else self.acc,
                       mean=s.mean_accepted if s.rounds else self.mean, k=s.k or self.k,
                       ctx=s.context_tokens or self.ctx, limit=s.context_limit or self.limit,
                       cache=(s.cached_tokens, s.prompt_tokens) if s.cache_reported else None)

    def line(self) -> str:
        spec = f"spec {self.spec}"
        if self.spec == "auto-off" and self.reason:
            spec += f" ({cut(self.reason, 34)})"
        if self.k:
            spec = f"K={self.k} {spec}"
        if self.acc is not None:
            spec = f"acc {self.acc:.0%} ({self.mean:.1f}/round) {spec}"
        parts = [f"{self.tps:.1f} tok/s" if self.tps else "– tok/s", spec,
                 f"ctx {self.ctx}/{self.limit or '?'}" if self.ctx else "ctx –"]
        if self.cache is not None:
            parts.append(f"cache {self.cache[0]}/{self.cache[1]}")
        return SEP.join(parts)


def short_name(name: str, width: int = 28) -> str:
    """A model reference as the status bar shows it: a path's last part, cut to `width`."""
    if name.startswith(("/", "~", ".")) or name.endswith(".gguf"):
        name = Path(name).name.removesuffix(".gguf")
    return cut(name, width)


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def progress_bar(done: int, total: int, width: int = 16) -> str:
    filled = round(width * done / total) if total else 0
    return f"prefill {'█' * filled}{'░' * (width - filled)} {done}/{total}"


class StatusBar(Widget):
    """Two lines: live decoding figures, then model, approval mode, git and key hints."""

    DEFAULT_CSS = """
    StatusBar { dock: bottom; height: 2; background: $panel; color: $text; padding: 0 1; }
    """
    phase: reactive[str] = reactive("")
    prefill: reactive[tuple[int, int] | None] = reactive(None)
    figures: reactive[Figures] = reactive(Figures)
    model: reactive[str] = reactive("")
    mode: reactive[str] = reactive("")
    git: reactive[tuple[str, int]] = reactive(("", 0))
    hint: reactive[str] = reactive("")

    def render(self) -> Text:
        first = [self.phase] if self.phase else []
        if self.prefill is not None:
            first.append(progress_bar(*self.prefill))
        first.append(self.figures.line())
        branch, dirty = self.git
        second = [self.model, self.mode]
        if branch:
            second.append(f"{branch} +{dirty}")
        second.append(self.hint or "^t tokens · esc cancel · ^c^c quit · ^p commands")
        lines = (shown(SEP.join(first), keep_newlines=False), shown(SEP.join(second), keep_newlines=False))
        return Text("\n".join(lines), no_wrap=True, overflow="ellipsis")

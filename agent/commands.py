"""What the CLI's commands do once arguments are parsed (kept apart from parsing)."""

from __future__ import annotations

import sys

from .config import Config
from .events import GenerationStats, TextDelta


def run_task(task: str, args, cfg: Config) -> int:
    """Answer `task` with the model, streaming text to stdout."""
    from .runtime import open_session, sampling_params

    params = sampling_params(cfg)
    session = open_session(cfg)
    messages = [{"role": "user", "content": task}]
    stats = None
    for ev in session.chat(messages, params=params, max_tokens=cfg.max_tokens):
        if isinstance(ev, TextDelta):
            sys.stdout.write(ev.text)
            sys.stdout.flush()
        elif isinstance(ev, GenerationStats):
            stats = ev
    sys.stdout.write("\n")
    if stats is not None and args.stats:
        print(format_stats(stats), file=sys.stderr)
    return 0


def format_stats(s: GenerationStats) -> str:
    line = (f"[{s.generated_tokens} tokens, decode {s.decode_tps:.1f} tok/s, prefill "
            f"{s.prefill_tps:.0f} tok/s, ttft {s.ttft_s:.2f}s, cache {s.cached_tokens}/"
            f"{s.prompt_tokens}, peak {s.peak_memory_gb:.2f} GB")
    if s.speculative:
        line += (f", {s.drafter} K={s.k} acceptance {s.acceptance_rate:.0%} "
                 f"mean accepted {s.mean_accepted:.2f}")
    return line + "]"


def undo(args, cfg: Config) -> int:
    print("spec-agent: error: undo needs the agent's git integration (not built yet)",
          file=sys.stderr)
    return 2

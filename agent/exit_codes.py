"""What `spec-agent`'s exit status means: one table for the code, `--help` and the docs
(docs/configuration.md).

A `-p` run's status comes from its `stop_reason` (the final JSON object carries it); the other
rows are set by the command line itself. Imports nothing: `--help` stays fast.
"""

from __future__ import annotations

from typing import NamedTuple


class ExitCode(NamedTuple):
    code: int
    name: str
    stop_reasons: tuple[str, ...]  # the run's stop_reason values that end with this code
    meaning: str


TABLE = (
    ExitCode(0, "finished", ("answered",), "the agent answered (-p), or the command succeeded"),
    ExitCode(1, "error", ("error", "blocked"), "the model, the server or git failed, or a hook "
             "blocked the message"),
    ExitCode(2, "usage", (), "bad flags, config or input; a missing model (nothing was run)"),
    ExitCode(3, "did not finish", ("max_turns", "max_tokens", "repetition"),
             "stopped before an answer: --max-turns reached, the reply cut at --max-tokens, or "
             "the model kept repeating itself"),
    ExitCode(4, "needs approval", ("approval_required",),
             "a tool call needed an approval no one could give (rerun with --yes or "
             "--approval-mode)"),
    ExitCode(5, "not done", ("checks_failed", "edit_failed", "no_change"),
             "the agent answered but the work is not done: the checks of its edits still fail, "
             "an edit was refused or failed, or no file changed though the message asks for a "
             "change"),
    ExitCode(130, "cancelled", ("cancelled",), "Ctrl-C (or a stream-json interrupt)"),
    ExitCode(141, "output closed", (), "the reader of stdout went away (e.g. piped into head)"),
)

STOP_REASONS = tuple(r for row in TABLE for r in row.stop_reasons)
BY_STOP_REASON = {r: row.code for row in TABLE for r in row.stop_reasons}


def for_stop_reason(reason: str) -> int:
    """The exit code of a run that stopped with `reason` (unknown: 1, an error)."""
    return BY_STOP_REASON.get(reason, 1)


def help_text() -> str:
    """The table as `--help` prints it (argparse keeps the lines with RawDescriptionHelpFormatter)."""
    import textwrap

    lines = ["exit codes:"]
    for row in TABLE:
        why = f" (stop_reason {', '.join(row.stop_reasons)})" if row.stop_reasons else ""
        lines += textwrap.wrap(f"{row.code:<4} {row.name}: {row.meaning}{why}", 88,
                               initial_indent="  ", subsequent_indent=" " * 7)
    return "\n".join(lines)


def markdown() -> str:
    """The table as docs/configuration.md shows it."""
    out = ["| Exit | Meaning | `stop_reason` |", "|---|---|---|"]
    for row in TABLE:
        reasons = ", ".join(f"`{r}`" for r in row.stop_reasons) or "—"
        out.append(f"| {row.code} | {row.name}: {row.meaning} | {reasons} |")
    return "\n".join(out)

"""The recovery policy: what a message's reply is sent back with instead of ending the
message, and what the next reply reads and how it is sampled. Each rule is one function; its
docstring names the measurement that keeps it (README's records, files under lab/results/).
Small models at greedy decoding get stuck in ways the conversation can see: a code block that
cannot be applied, a file written out unchanged, a loop, a failed test run answered with the
same code. The rules answer those while fix rounds (`max_fix_rounds`) are left.

`more_to_do` applies the rules that end a reply's turn, in order; the lint-and-test loop
(core/testloop.py) is handed `afresh` and `round_given_back` for a failed check; the turn loop
calls `after_loop` on a reply the repetition guard stopped and `fresh_view` before a fresh
reply. Redrawing a looping or repeating reply at once is core/resample.py's. Not here: the
checks themselves (core/checks.py), what a code block writes (core/edits.py).

Removed for no gain on check: asking once for the fix when a reply to "the tests fail, fix
it" changed no file (dbeb3cf). Without it the own suite's check answers are the same, tune
loses off_by_one_slice (the task it was written on), and on Exercism it acted 11 times, 5 on
check exercises, and none passed (lab/results/tasks-0.5b-{tune,check}-nofix56-5fe730c.json).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..events import Event, Warning
from .attach import typed_text
from .attempts import read_files, restart_files, restart_view, resamples as mode_resamples
from .callformat import ParsedCall
from .runstate import Run
from .searchreplace import FIX_HOW
from .testloop import checks, start_tested, tests_judge
from .wholefile import asks_change, lead, leads_to

if TYPE_CHECKING:
    from .conversation import Conversation

REFUSED = ("Your code block was not saved:\n{why}\n\nTo change a file, reply with its path on one "
           "line and then the complete new file in one code block: every line of it, the "
           "unchanged ones too.")
REFUSED_EDIT = "Your code was not applied:\n{why}\n\n{how}"  # the "diff" and "auto" formats
UNCHANGED = ("The code you wrote for {files} is the file exactly as it already is, so nothing "
             "changed. If the task needs a change, write the whole file again with the change "
             "made; if it needs none, say so in one line, without a code block.")
LOOPED = ("Your reply kept repeating the same text and was stopped. Answer the message again, "
          "with each part of it written once.")
REPEATED = ("Your code is the same as in your earlier reply, so it changes nothing and would "
            "fail the same way. Find what causes the error the message before it shows, then "
            "reply with the file's path on one line and the corrected code in one code block, "
            "in the same form as before.")


def more_to_do(conv: Conversation, run: Run) -> Iterator[Event]:
    """What the model is sent back with instead of ending the message ('' for nothing), by
    the first rule that acts: a repeat pointed out, a refused block, an unchanged file
    pointed out, a change request answered with the files as they stand, a failed
    check of the edits (an unchanged rewrite checked too); else the best attempt is kept
    and the Stop hooks have their say."""
    if run.cancel.cancelled:
        return ""
    note = yield from repeat_nudge(conv, run)
    if note:
        return note
    note = yield from refused_back(conv, run)
    if note:
        return note
    unchanged, run.reply.unchanged = run.reply.unchanged, []
    note = yield from unchanged_nudge(conv, run, unchanged)
    if note:
        return note
    same, run.reply.same = run.reply.same, []
    offered = same if run.reply.bare and not run.changed_any else []
    note = yield from bare_rewrite_afresh(conv, run, offered)
    if note:
        return note
    rewrote = yield from rewrite_tested(conv, run, unchanged, offered)
    if run.edited:
        note = yield from checks(conv, run, rewrote, afresh, round_given_back)
        if note:
            return note
    yield from keep_best(conv, run)
    return (yield from conv.stop_hooks(run))


def repeat_nudge(conv: Conversation, run: Run) -> Iterator[Event]:
    """A code reply that still repeats an earlier one after resampling (core/resample.py) is
    pointed out, once a message, with `resample_temperature` on (off by default).
    Gain: none recorded. Resampling with this nudge, on 30 tune Exercism exercises: the same 6
    pass as at greedy at 2.3x the output tokens; with the 1.5B + draft on the first 6 check20
    exercises: 0 pass, as at greedy (bc2a112, lab/results/exercism-1.5b-draft-check20-resample-
    bc2a112.jsonl; README, resample_temperature). Kept only as part of an option that is off."""
    if not (run.marks.repeated and not run.marks.nudged and conv.cfg.resample_temperature > 0):
        return ""
    run.marks.nudged = True  # once per message: say so, and let it try again
    run.reply.refused, run.reply.snippets = [], []  # (what the nudge answers instead)
    yield Warning("the reply's code repeats an earlier reply's; asking for another")
    return REPEATED


def refused_back(conv: Conversation, run: Run) -> Iterator[Event]:
    """Why the last reply's code blocks were not applied goes back to the model, as a failed
    check of the reply (one fix round); where fix_mode resamples, the next reply is a fresh
    sample (`afresh`), and with `lead_refused` a refused snippet leads it (`lead_refused`).
    Gain: none recorded apart. It came in at f9970b6 with the lint loop and the names check,
    whose row has the rates of the row before (own suite tune 5/10, check 2/10; lab/results/
    tasks-0.5b-{tune,check}-f9970b6.json); answered afresh since 8d97326, where at greedy the
    0.5B wrote the same refused block again (dot-dsl and grains five times each in the repair
    run; README "the test loop on Exercism"). Kept: without it a reply whose every block was
    refused ends the message with nothing said to the model; its removal is unmeasured."""
    refused, run.reply.refused = run.reply.refused, []
    snippets, run.reply.snippets = list(dict.fromkeys(run.reply.snippets)), []
    cfg = conv.cfg
    if not refused or run.fix_rounds >= cfg.max_fix_rounds:
        return ""
    run.fix_rounds += 1  # a refused block counts as a failed check of the reply
    # (at greedy the model writes the refused block again)
    yield from lead_refused(conv, run, refused, snippets)
    yield from afresh(conv, run, "the reply's code could not be used")
    if cfg.edit_format in FIX_HOW:
        return REFUSED_EDIT.format(why="\n".join(refused), how=FIX_HOW[cfg.edit_format])
    return REFUSED.format(why="\n".join(refused))


def lead_refused(conv: Conversation, run: Run, refused: list[str],
                 snippets: list[str]) -> Iterator[Event]:
    """The reply wrote a part of one file (small models copy the message's example statement
    as the file): the next reply begins with that file's path, an opening fence and the
    file's first line, and goes on from there (`lead_refused`, off by default; a backend that
    `leads`). Gain: none in passes. On the ten Exercism exercises where it acts: tune 0 -> 0,
    check 1 -> 0 (binary-search's unled fresh sample passed), at 40-65 % fewer tokens
    (704eee2, 902f2db; lab/results/exercism-0.5b-{lead,no-lead}-refused10-*.jsonl; README
    "a refused snippet answered by a led reply"). Kept as an option that is off: it is a
    user's choice of fewer tokens over a pass it may cost."""
    if not (len(snippets) == 1 and len(refused) == 1 and conv.cfg.lead_refused
            and conv.cfg.edit_format == "whole" and conv.model.capabilities.leads
            and leads_to(snippets[0])):
        return
    run.marks.lead = lead(snippets[0], Path(conv.root))
    yield Warning(f"the reply wrote only a part of {snippets[0]}; the next reply "
                  "begins with the file's path and writes it whole (lead_refused)")


def unchanged_nudge(conv: Conversation, run: Run, unchanged: list[str]) -> Iterator[Event]:
    """A reply that wrote out, unchanged, a file an earlier reply already wrote is told so,
    once a message, with `resample_temperature` on (off by default): at temperature 0 the
    0.5B wrote the same file again after being told (acronym, binary-search-tree, bowling,
    camicia), so the telling can pay only with a resampled reply.
    Gain: none recorded (README, the lint-and-test loop). Kept only as part of an option
    that is off (see `repeat_nudge`)."""
    cfg = conv.cfg
    if not (unchanged and not run.changed_any and not run.marks.nudged
            and cfg.resample_temperature > 0 and cfg.max_fix_rounds > 0):
        return ""
    run.marks.nudged = True  # once per message (as repeat_nudge)
    yield Warning(f"the reply wrote {', '.join(unchanged)} out unchanged; asking once more")
    return UNCHANGED.format(files=", ".join(unchanged))


def bare_rewrite_afresh(conv: Conversation, run: Run, offered: list[str]) -> Iterator[Event]:
    """Only the files as they stand, not a word besides, for a message that asks for a
    change and has no tests to judge it: no attempt at it (the 0.5B answers "add a
    docstring" so), answered by a fresh sample where fix_mode resamples. Nothing tests the
    sample; what it writes is a reply to the message like any other.
    Gain: check 2/10 -> 3/10 on the own suite at 8e4ff6c, where it never acted on tune (the
    same 10 tune answers; type hints pass on check by a fresh sample; lab/results/tasks-0.5b-
    check-8e4ff6c.json against -f9970b6.json). Under Aider's protocol on 27 tune Exercism
    exercises it acted in 25 try 2s and passed none (exercism-0.5b-protocol-bare-tune27-
    8e4ff6c.jsonl); those try 2s now have tests, so it no longer acts there."""
    if not (offered and not tests_judge(conv, run)
            and run.fix_rounds < conv.cfg.max_fix_rounds and resamples(conv)
            and asks_change(typed_text(run.task))):
        return ""
    run.fix_rounds += 1
    yield from afresh(conv, run, f"the reply only wrote {', '.join(offered)} out unchanged")
    return UNCHANGED.format(files=", ".join(offered))


def rewrite_tested(conv: Conversation, run: Run, unchanged: list[str],
                   offered: list[str]) -> Iterator[Event]:
    """A reply that offers files as they stand as its answer, where tests judge the message,
    has them checked as an edit would be (a model shown a failure often writes its failed
    code out again, which changes no file and so ran no check): the written-out-again files,
    and, for a message that shows its own failing tests, even a first such reply. True when
    the checks are to run on them.
    Gain: none in passes. On the 7 tune Exercism exercises where messages had ended so:
    0 of 7 pass with or without it, at 1.7x the output tokens (bd7c29d, 76f5a98;
    lab/results/exercism-0.5b-testcmd-auto-tune-rest-{bd7c29d,76f5a98}.jsonl). Kept: it is
    what lets the inferred tests of try 2 judge a copied file (infer_test_cmd, b34b903: tune
    7 -> 8, check 1 -> 2 of 50, lab/results/exercism-0.5b-infer-{tune,check}-b34b903.jsonl),
    and without it a message with rounds left ends on a reply that tried nothing."""
    retest = unchanged or (offered if run.test_cmd != conv.cfg.test_cmd else [])
    if not (retest and test_as_answer(conv, run)):
        return False
    yield Warning(f"the reply wrote {', '.join(retest)} out unchanged; running the checks on it")
    run.edited += retest
    run.touched += retest
    return True


def test_as_answer(conv: Conversation, run: Run) -> bool:
    """Whether files a reply wrote out unchanged are checked as an edit would be: with a
    test command, fix rounds left, and the files not known to pass as they are."""
    now = run.attempts.now
    return (tests_judge(conv, run) and run.fix_rounds < conv.cfg.max_fix_rounds
            and not (now is not None and now.ok))


def after_loop(conv: Conversation, run: Run) -> Iterator[Event]:
    """A reply the repetition guard stopped is no attempt at the message: while fix rounds
    are left and fix_mode resamples, the message is answered afresh (True) instead of
    ending there.
    Gain: none in passes: measured with `rewrite_tested` on 7 tune Exercism exercises, 0 of 7
    either way (bd7c29d). Kept for the same reason: a message with rounds left does not end
    on a reply that tried nothing."""
    if run.fix_rounds >= conv.cfg.max_fix_rounds or not resamples(conv):
        return False
    run.fix_rounds += 1
    yield from afresh(conv, run, "the model kept repeating itself")
    conv.append({"role": "user", "content": LOOPED})
    return True


def resamples(conv: Conversation) -> bool:
    """Whether a failure is answered by a fresh reply (fix_mode, and a backend whose
    sampling can be set per call)."""
    return mode_resamples(conv.cfg) and conv.model.capabilities.sampling


def afresh(conv: Conversation, run: Run, why: str) -> Iterator[Event]:
    """When fix_mode resamples (`auto` with whole files, the default), a failed test run or
    a refused block is answered by a fresh reply to the message itself, sampled at
    resample_temperature (0.7 when 0), the failed attempts out of view (`fresh_view`).
    Gain, on check: with a test command, check20 Exercism 0 -> 2 (8d97326,
    lab/results/exercism-0.5b-testcmd-resample-check20-8d97326.jsonl, against Aider's
    protocol at 08c4605); on tune20, repair passes 3 and resample 5 (4c6a4d6, 00aedbf).
    With the inferred tests of try 2 (b34b903), the fresh samples added flatten-array (tune)
    and octal (check)."""
    if resamples(conv):
        run.marks.fresh = True
        yield Warning(f"{why}; answering the message afresh (fix_mode {conv.cfg.fix_mode})")


def round_given_back(conv: Conversation, run: Run, rewrite_failed: bool) -> bool:
    """fix_mode "restart": the first reply that writes the files out unchanged and fails
    their tests made no attempt at a fix; its run sets the score to beat, and the round it
    used is given back (once a message). True when this failure is that one.
    Gain: none; part of `restart`, which is not the default: on tune Exercism, 5 pass
    against the default's 6 of the same 39, at 1.8x the tokens (3919f61, lab/results/
    exercism-0.5b-restart-tune-{a,b}-3919f61.jsonl)."""
    free = rewrite_failed and not run.marks.rewrote_free and conv.cfg.fix_mode == "restart"
    run.marks.rewrote_free = run.marks.rewrote_free or free
    return free


def fresh_view(conv: Conversation, run: Run, messages: list[dict[str, str]]) -> Iterator[Event]:
    """What a fresh reply reads: the message alone, without the failed attempts and their
    test runs; with fix_mode "restart", where the message reports failing tests of the
    answer before it, that request answered again without the failed code
    (core/attempts.py). Only with whole files (the other formats' edits apply to the files
    as they are), and only while the request is read whole (not compacted: core/budget.py).
    Gain of the restart view: none (see `round_given_back`)."""
    cfg = conv.cfg
    restart = None
    if (cfg.fix_mode == "restart" and run.test_cmd and run.marks.as_left
            and run.test_cmd != cfg.test_cmd and cfg.edit_format == "whole"
            and messages[run.request] is conv.messages[run.request]):
        shown = restart_files(messages, run.request, run.marks.as_left)
        restart = restart_view(messages, run.request, run.base, shown)
        if restart is not None:
            run.marks.shown = shown
            yield Warning("the reply answers the message before it again, as if it "
                          "had not been answered, with these failures in view")
    return restart or messages[:run.base]


def keep_best(conv: Conversation, run: Run) -> Iterator[Event]:
    """Write back the best tested attempt of the message when its files are now worse.
    Gain: graded files, not passes. With the 1.5B + draft on check20 it held the best attempt
    in each of six messages (allergies' last attempts scored 1 and 0 of 50, the kept one 25;
    289c5e3, lab/results/exercism-1.5b-draft-testcmd-check20-289c5e3.jsonl); no pass is
    recorded as won by it (README "the test loop on Exercism"). Kept: without it a message
    ends with its worst attempt where a later reply broke an earlier, better one."""
    if run.written_tests:  # the replies' own tests judge them: scores of different tests
        return
    yield from start_tested(conv, run)
    best = run.attempts.to_restore()
    if best is None or run.cancel.cancelled:
        return
    now = run.attempts.now
    calls = [ParsedCall("write_file", {"path": p, "content": c})
             for p, c in best.files.items() if c is not None]
    which = f"attempt {best.round} of this message" if best.round else \
        "attempt 0, the files as this message found them"
    yield Warning(f"kept {which} ({best.score.describe()}); the last attempt is worse "
                  f"({now.describe()})")
    if calls:
        yield from conv.run_calls(run, calls, record=False, vetting=False)
    wrote = {p: c for p, c in best.files.items() if c is not None}
    if read_files(conv.root, list(wrote)) != wrote:  # the write was declined, blocked or failed
        yield Warning(f"{which} could not all be written back (see the write above)")
        return
    run.edited = []  # the restored files were tested as they are
    run.attempts.now = best.score
    run.work.checked("test", best.score.ok)
    if best.round == 0 and len(wrote) == len(best.files):
        run.work.changed = False  # every file the message's edits changed is as it found it

"""`spec-agent bench agentic`: multi-turn agent sessions replayed turn by turn, per drafter.

The sessions are the repository's own eval tasks (agent/eval/tasks) and ten Exercism exercises
(`EXERCISM_SESSIONS`) as the agent really ran them: `--record` runs `spec-agent eval`'s path
(a `Runtime`, the `Conversation`, the default model and settings; Exercism's two tries) and
writes every model turn's exact prompt tokens, reply tokens and sampling settings to
agent/bench/agentic/replays.json (prompts kept as a delta on the previous turn's prompt, so
the file stays small). The replay feeds, at each assistant turn, the recorded history (the
prompt the agent built, with the recorded earlier replies and tool results) and decodes the
reply with each mode in turn, in one process (greedily, or where the agent sampled the call at
a temperature, e.g. a fresh reply after failed tests, with the call's settings and the same seed
for every mode):
- plain; lookup (prompt lookup over the context); suffix (the suffix index alone); lookup +
  suffix (the product's lookup drafter); lookup-again (a second lookup alone with its own
  policy: two runs of one drafter differ by the machine's timing noise, and by whatever the
  policy decides from timings; this spread is what lookup + suffix against lookup is read
  against); with a
  draft model also the draft alone and all combined (draft + lookup + suffix). `--modes`
  picks some (plain always).
Modes alternate their order turn by turn so machine noise hits them alike, and each keeps one
`Session` and one `Speculator` for the whole run, as the agent does. The prompt KV is shared
through an in-memory prefix store, so only decoding differs between modes. `--repeat N` has
each drafter mode decode every turn N times (plain once), in the same rotation. `--out FILE`
appends each session's row as it ends; a run naming the file again (with the same settings)
skips the sessions in it, so a long replay can span several sittings (each sitting's drafters
and policies start fresh).

The suffix index is what a user of this repository would have: when session i starts it
holds the recorded replies of the sessions recorded before it, except those of the same task
(in the other edit format: that would hand it the answer), and during the session each reply
decoded so far is added after its turn (as the agent adds each reply; never the reply being
decoded). The report says how many tokens it held per session.

Reported: decode tok/s per mode over each whole session (tokens / decode seconds, every turn
summed), ratios to plain, acceptance per drafter source (`GenerationStats.by_source`), and
whether every mode's output equals plain's token for token, every call (a sampled call's
keyed draws give lookup and the draft model the tokens plain draws, see `engine.sampling`). Each turn
decodes until the end-of-turn token, at most as many tokens as the recorded reply had plus one
(the agent stopped some replies at a stop string or a grammar's end) and at most `--tokens`
(default: the agent's `max_tokens`)."""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

DATA = Path(__file__).parent / "agentic" / "replays.json"
FORMAT, VERSION = "spec-agent-agentic-replays", 1


# ---- the recorded sessions ----------------------------------------------------------------

@dataclass
class Turn:
    prompt: list[int]
    reply: list[int]
    finish: str
    # The call's sampling settings that differ from greedy's defaults ({}: greedy), e.g. a
    # fresh sample at temperature after failed tests.
    params: dict = field(default_factory=dict)


def params_dict(params) -> dict:
    """The fields of a `SamplingParams` that differ from its defaults."""
    from dataclasses import fields

    return {f.name: getattr(params, f.name) for f in fields(params)
            if getattr(params, f.name) != f.default}


@dataclass
class Recorded:
    task: str
    subset: str
    category: str
    passed: bool
    turns: list[Turn] = field(default_factory=list)
    edit_format: str = "whole"
    suite: str = "tasks"  # "tasks" (agent/eval/tasks) or "exercism"


def encode(model: str, sessions: list[Recorded], settings: dict) -> dict:
    """The JSON object for `sessions` (each prompt as keep + add on the previous prompt)."""
    prev: list[int] = []
    out = []
    for s in sessions:
        turns = []
        for t in s.turns:
            keep = _common(prev, t.prompt)
            turns.append(dict(keep=keep, add=t.prompt[keep:], reply=t.reply, finish=t.finish,
                              **({"params": t.params} if t.params else {})))
            prev = t.prompt
        out.append(dict(task=s.task, subset=s.subset, category=s.category, passed=s.passed,
                        edit_format=s.edit_format, suite=s.suite, turns=turns))
    return dict(format=FORMAT, version=VERSION, model=model, settings=settings, sessions=out)


def decode(data: dict) -> tuple[str, list[Recorded]]:
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValueError("not a replay file of this version")
    prev: list[int] = []
    sessions = []
    for s in data["sessions"]:
        rec = Recorded(s["task"], s["subset"], s["category"], s["passed"],
                       edit_format=s["edit_format"], suite=s.get("suite", "tasks"))
        for t in s["turns"]:
            prompt = prev[: t["keep"]] + list(t["add"])
            rec.turns.append(Turn(prompt, list(t["reply"]), t["finish"], dict(t.get("params", {}))))
            prev = prompt
        sessions.append(rec)
    return data["model"], sessions


def load(path: Path = DATA) -> tuple[str, list[Recorded]]:
    return decode(json.loads(path.read_text()))


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# Tasks recorded with the tool edit format too (edit_file/write_file and the other tools:
# several turns each, so sessions take minutes here): tune and check tasks alike.
TOOL_TASKS = ("off_by_one_slice", "docstring_function", "new_test_shout",
              "rename_across_files", "new_param_times")

# Exercism exercises recorded as `spec-agent eval --suite exercism` runs them (the default
# settings, two tries, the checks and fix rounds inside each): the first ten of the tune
# half in the split's order, fixed before any was replayed. Sessions of whole solutions
# written, tested and rewritten.
EXERCISM_SESSIONS = ("accumulate", "acronym", "alphametics", "armstrong-numbers",
                     "binary-search-tree", "bowling", "camicia", "clock", "crypto-square",
                     "custom-set")
EXERCISM_TIME_LIMIT_S = 600.0


def _recording(model_for, turns: list[Turn]):
    """`model_for` whose models append every model call of their session to `turns`
    (the exact prompt tokens, the reply tokens, the finish reason, the sampling settings)."""
    from ..events import GenerationStats, TextDelta

    patched: set[int] = set()

    def model_for_task(ctx):
        model = model_for(ctx)
        if id(model.session) not in patched:
            patched.add(id(model.session))
            generate = model.session.generate

            def gen(prompt, *a, **kw):
                params = kw.get("params", a[0] if a else None)
                reply: list[int] = []
                for ev in generate(prompt, *a, **kw):
                    if isinstance(ev, TextDelta):
                        reply += ev.tokens
                    elif isinstance(ev, GenerationStats):
                        turns.append(Turn(list(prompt), reply, ev.finish_reason,
                                          params_dict(params) if params is not None else {}))
                    yield ev
            model.session.generate = gen
        return model

    return model_for_task


def record(cfg, names: list[str], subset: str, out: Path, time_limit_s: float, log,
           runner, tasks_mod, formats: Sequence[str] = ("whole", "tool"),
           exercism=None) -> int:
    """Run the eval tasks with the agent as `spec-agent eval` does, per edit format (whole:
    the model replies with the file, mostly one turn; tool: edit_file/write_file and the
    other tools, several turns; only `TOOL_TASKS` unless tasks are named), and, given
    `exercism` = (agent.eval.exercism, agent.eval.exercism_run) and the exercises' folder,
    the `EXERCISM_SESSIONS` as `eval --suite exercism` runs them; write every model call.
    `names` picks tasks and exercises (an exercise is recorded when named, whether or not
    it is one of `EXERCISM_SESSIONS`). Sessions in `out` that are not recorded again are
    kept (in their order). `runner` and `tasks_mod` are agent.eval.runner and
    agent.eval.tasks, handed in by the command line (bench/ sits beside eval/, not above
    it)."""
    from dataclasses import replace

    eval_config, local_model_factory = runner.eval_config, runner.local_model_factory
    run_task, load_tasks = runner.run_task, tasks_mod.load_tasks

    turns: list[Turn] = []
    sessions: list[Recorded] = []
    settings: dict = {}
    kept: list[Recorded] = []
    if out.is_file():
        data = json.loads(out.read_text())
        try:
            kept = decode(data)[1]
            settings = dict(data.get("settings", {}))
        except (KeyError, ValueError):
            kept = []
    task_names = {t.name for t in load_tasks("all")}
    named_tasks = [n for n in names if n in task_names]
    named_exercises = [n for n in names if n not in task_names]
    if named_exercises and exercism is None:  # no exercises to look in: unknown tasks
        load_tasks(subset, named_exercises)  # raises, naming them

    def save(c) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(encode(c.model, kept + sessions, settings),
                                  separators=(",", ":")))

    for fmt in formats if named_tasks or not names else ():
        tasks = load_tasks(subset, named_tasks or (list(TOOL_TASKS) if fmt == "tool" else None))
        redo = {t.name for t in tasks}
        kept = [s for s in kept if not (s.suite == "tasks" and s.edit_format == fmt
                                        and s.task in redo)]
        c = eval_config(replace(cfg, edit_format=fmt))
        model_for_task = _recording(local_model_factory(c), turns)
        settings[fmt] = dict(model=c.model, temperature=c.temperature, max_tokens=c.max_tokens,
                             max_turns=c.max_turns, edit_format=fmt,
                             constrained_calls=c.constrained_calls, time_limit_s=time_limit_s)
        for task in tasks:
            turns.clear()
            t0 = time.perf_counter()
            r = run_task(task, c, model_for_task, time_limit_s)
            sessions.append(Recorded(task.name, task.subset, task.category, r.passed,
                                     list(turns), fmt))
            log(f"  {fmt:5} {task.name:24} {'PASS' if r.passed else 'fail'} {len(turns)} turns, "
                f"{sum(len(t.reply) for t in turns)} reply tokens, {time.perf_counter() - t0:.0f} s")
            save(c)
    if exercism is not None and (named_exercises or not names):
        ex_mod, ex_run = exercism
        exercises = ex_mod.load_exercises(ex_mod.default_dir(),
                                          ",".join(named_exercises or EXERCISM_SESSIONS))
        redo = {e.name for e in exercises}
        kept = [s for s in kept if not (s.suite == "exercism" and s.task in redo)]
        c = eval_config(cfg)
        model_for_task = _recording(local_model_factory(c), turns)
        settings["exercism"] = dict(ex_run.settings_of(c), time_limit_s=EXERCISM_TIME_LIMIT_S)
        for ex in exercises:
            turns.clear()
            t0 = time.perf_counter()
            r = ex_run.run_exercise(ex, c, model_for_task, EXERCISM_TIME_LIMIT_S)
            sessions.append(Recorded(ex.name, ex.subset, "exercism", r.passed_2, list(turns),
                                     c.edit_format, "exercism"))
            log(f"  exercism {ex.name:24} {'PASS' if r.passed_2 else 'fail'} {len(turns)} turns, "
                f"{sum(len(t.reply) for t in turns)} reply tokens, {time.perf_counter() - t0:.0f} s")
            save(c)
    return len(sessions)


# ---- the replay ---------------------------------------------------------------------------

def suffix_only(suffix, max_k: int = 16):
    """The suffix index alone, as a drafter: a `PromptLookup` that never looks at the
    context, only at earlier replies. It keeps lookup's name, so the `Speculator` treats it
    as lookup (no model call per proposal, plain tokens on a miss)."""
    from ..engine import PromptLookup

    class SuffixOnly(PromptLookup):
        def match(self, history, k):
            self.source = "suffix"
            if self.suffix is None:
                return 0, []
            n, cont = self.suffix.continuation(history, k)
            return (n, cont) if cont else (0, [])

    return SuffixOnly(max_k=max_k, suffix=suffix)


@dataclass
class Mode:
    name: str
    session: object  # a Session (plain: without a speculator)
    lookups: list  # the PromptLookups whose suffix index is set per session
    tokens: int = 0
    decode_s: float = 0.0
    by_source: dict = field(default_factory=dict)  # source -> [drafted, accepted]
    replies: list = field(default_factory=list)  # this session's replies


MODES = ("plain", "lookup", "suffix", "lookup+suffix", "lookup-again", "draft", "all")


def _modes(target, draft, pstore, cfg, keep: Sequence[str] = ()) -> list[Mode]:
    """Plain and every drafter mode (those in `keep`, when given; plain always)."""
    from ..engine import Combined, DraftModel, PromptLookup, Session, SpecPolicy, Speculator

    policy = lambda: SpecPolicy(mode=cfg.speculation if cfg.speculation != "off" else "auto",  # noqa: E731
                                fixed_k=cfg.num_draft_tokens)
    k = cfg.num_draft_tokens or 16

    def lookup(suffix_too: bool):
        lk = PromptLookup(max_k=k)
        return lk, [lk] if suffix_too else []

    def only_suffix():
        sx = suffix_only(None, k)
        return sx, [sx]

    # Each drafter mode: (name, a function giving its drafter and the PromptLookups whose
    # suffix index is set per session); only the modes run are built. "lookup-again": a
    # second lookup alone, its own drafter and policy: how far two runs of one drafter differ
    # (the policy picks each round's K from measured timings), the yardstick for lookup +
    # suffix against lookup.
    makers = [("lookup", lambda: lookup(False)), ("suffix", only_suffix),
              ("lookup+suffix", lambda: lookup(True)), ("lookup-again", lambda: lookup(False))]
    if draft is not None:
        vocab = min(target.vocab_size, draft.vocab_size)
        model = lambda: DraftModel(draft, cfg.draft_confidence, vocab, cfg.draft_vocab,  # noqa: E731
                                   target.vocab_size)

        def everything():
            lk = PromptLookup(max_k=k)
            return Combined(model(), lk), [lk]

        makers += [("draft", lambda: (model(), [])), ("all", everything)]
    out = [Mode("plain", Session(target, store=pstore), [])]
    for name, make in makers:
        if keep and name not in keep:
            continue
        drafter, lookups = make()
        out.append(Mode(name, Session(target, speculator=Speculator(drafter, policy()),
                                      store=pstore), lookups))
    return out


def _key(row: dict) -> tuple:
    return row.get("suite", "tasks"), row["edit_format"], row["session"]


def _resume(out: Path, header: dict) -> list[dict]:
    """The rows already in `out` (JSON lines, a header first), or [] for a new file;
    ValueError when it was written with other settings or is not such a file."""
    if not out.exists() or out.stat().st_size == 0:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"header": header}) + "\n")
        return []
    rows = []
    try:
        text = [line for line in out.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{out}: not a bench agentic record ({e})") from None
    lines = []
    for i, line in enumerate(text):
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == 0 or i < len(text) - 1:
                raise ValueError(f"{out}: not a bench agentic record (line {i + 1}: {e})") from None
            # a row cut short by an interrupted write: dropped, that session replays again
            out.write_text("".join(line + "\n" for line in text[:-1]))
    if not lines or not isinstance(lines[0], dict) or not isinstance(lines[0].get("header"), dict):
        raise ValueError(f"{out}: not a bench agentic record (no header line)")
    if lines[0]["header"] != header:
        diff = sorted(k for k in set(header) | set(lines[0]["header"])
                      if header.get(k) != lines[0]["header"].get(k))
        raise ValueError(f"{out}: written with other settings ({', '.join(diff)}); "
                         "name another file to start anew")
    for row in lines[1:]:
        if isinstance(row, dict) and "session" in row and "edit_format" in row:
            rows.append(row)
    return rows


def run(cfg, names: list[str], tokens: int | None, quick: bool, log, path: Path = DATA,
        target=None, draft=None, modes: Sequence[str] = (), repeat: int = 1,
        out: Path | None = None) -> dict:
    """Replay the sessions in `path` (all, or those `names` picks: task or exercise names,
    "whole", "tool", "tasks", "exercism", "multi-turn"); `target` and `draft` are loaded from
    the config unless given. `modes`: the drafter modes to run (default all; plain always).
    `repeat`: each drafter mode decodes each turn this many times (plain once). `out`: a
    JSON-lines record, one row per session as it ends; sessions already in it are skipped,
    so an interrupted run resumes (the summary covers every row in it)."""

    from .. import models
    from ..engine import PrefixStore, SuffixIndex, loaded_blas

    if repeat < 1:
        raise ValueError("--repeat: at least 1")
    unknown_modes = [m for m in modes if m not in MODES]
    if unknown_modes:
        raise ValueError(f"no such mode: {', '.join(unknown_modes)} (modes: {', '.join(MODES)})")
    model_name, sessions = load(path)
    if names:
        unknown = [n for n in names if n not in {s.task for s in sessions}
                   | {s.edit_format for s in sessions} | {s.suite for s in sessions}
                   | {"multi-turn"}]
        if unknown:
            raise ValueError(f"no recorded session for: {', '.join(unknown)}")
    cap = tokens or (48 if quick else max(cfg.max_tokens, 1))
    # --quick without names: one session, the first of several model calls (one task's
    # name would pick its sessions in both edit formats)
    only = None if names or not quick else next((s for s in sessions if len(s.turns) > 1),
                                                sessions[0])
    if target is None:
        target = models.load(cfg.model or model_name, device="cpu")
        draft = models.load(cfg.draft_model, device="cpu") if cfg.draft_model else None
    if (cfg.model or model_name) != model_name:
        log(f"note: replaying {model_name}'s sessions with {target.name}")
    pstore = PrefixStore(None, memory_mb=4096, disk_mb=0)
    chosen = _modes(target, draft, pstore, cfg, modes)
    if len(chosen) < 2:
        raise ValueError(f"no drafter mode to run: {', '.join(modes)} needs a draft model")
    info = dict(model=model_name, target=target.name, draft=draft.name if draft else "",
                tokens_per_turn=cap, blas=loaded_blas(), speculation=cfg.speculation,
                repeat=repeat)
    header = dict(info, modes=[m.name for m in chosen], replays=str(path.name))
    rows = _resume(out, header) if out is not None else []
    done = {_key(r) for r in rows}
    eos = set(target.eos_ids)
    picked = lambda s: (s is only if only is not None else  # noqa: E731
                        not names or s.task in names or s.edit_format in names
                        or s.suite in names or ("multi-turn" in names and len(s.turns) > 1))
    chosen_n = sum(1 for s in sessions if picked(s))
    log(f"{chosen_n} recorded sessions of {model_name}, replayed with "
        f"{target.name}{' + draft ' + draft.name if draft else ''}; up to {cap} tokens per "
        f"turn; modes {', '.join(m.name for m in chosen)}"
        f"{f' (each drafter mode {repeat} times per turn)' if repeat > 1 else ''}; "
        f"BLAS: {loaded_blas()}" + (f"; {len(done)} already in {out}" if done else ""))
    earlier: list[tuple[str, list[int]]] = []  # (task, recorded reply) of the sessions before
    turn_no = 0
    for s in sessions:
        # turn_no counts every recorded turn, so the order of modes and a sampled turn's seed
        # do not depend on which sessions are picked or already done
        turn_no += len(s.turns)
        if not picked(s) or (s.suite, s.edit_format, s.task) in done:
            earlier += [(s.task, t.reply) for t in s.turns]
            continue
        row = _replay(s, chosen, earlier, SuffixIndex(target.name), repeat, cap, eos,
                      turn_no - len(s.turns))
        rows.append(row)
        if out is not None:
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
        log(f"  {s.task:22} {row['turns']} turns {row['tokens']:4} tok, index "
            f"{row['suffix_index_tokens']:5} tok | plain {row['plain_tps']:5.2f} tok/s | "
            + " | ".join(f"{m.name} {row[m.name + '_vs_plain']:.2f}x" for m in chosen[1:])
            + f" | identical {all(row[m.name + '_identical'] for m in chosen)}")
        earlier += [(s.task, t.reply) for t in s.turns]
    return summarize(rows, [m.name for m in chosen], info)


def _replay(s: Recorded, modes: list[Mode], earlier, index, repeat: int, cap: int, eos: set,
            turn_no: int) -> dict:
    """One session replayed with every mode: its report row. `index`: an empty suffix
    index, filled with the earlier sessions' replies; `turn_no`: the session's first call's
    place in the file."""
    import mlx.core as mx

    from ..engine import SamplingParams

    for task, reply in earlier:
        if task != s.task:  # not the same task in another edit format: no answer leaks in
            index.add(reply)
    held = len(index)
    for m in modes:
        for lk in m.lookups:
            lk.suffix = index
        m.tokens, m.decode_s, m.by_source, m.replies = 0, 0.0, {}, []
    plain, spec = modes[0], modes[1:]
    greedy: list[bool] = []  # per turn: whether its call was greedy
    runs = [plain] + spec * repeat
    for t in s.turns:
        # Alternate the order turn by turn (plain first, then last, ...).
        shift = turn_no % len(runs)
        turn_no += 1
        params = SamplingParams(**t.params)
        greedy.append(params.greedy)
        for m in runs[shift:] + runs[:shift]:
            if not params.greedy:  # every mode draws from the same seed
                mx.random.seed(turn_no)
            # as many tokens as the agent's reply had (and its stop token), at most `cap`
            done = m.session.complete(t.prompt, params=params,
                                      max_tokens=min(cap, len(t.reply) + 1), stop_tokens=eos)
            st = done.stats
            m.replies.append((len(greedy) - 1, done.tokens))
            gen = st.generated_tokens
            if gen > 1:
                m.tokens += gen - 1  # decode speed counts from the first token on
                m.decode_s += st.decode_s
            for src, d, a in st.by_source:
                tally = m.by_source.setdefault(src, [0, 0])
                tally[0] += d
                tally[1] += a
        index.add(plain.replies[-1][1])  # the agent adds each reply after its turn
    reference = [tokens for _, tokens in plain.replies]
    row = dict(session=s.task, suite=s.suite, subset=s.subset, edit_format=s.edit_format,
               turns=len(s.turns), sampled_turns=greedy.count(False),
               tokens=sum(len(o) for o in reference), suffix_index_tokens=held,
               suffix_index_tokens_end=len(index))
    for m in modes:
        row[f"{m.name}_tps"] = m.tokens / m.decode_s if m.decode_s > 0 else 0.0
        row[f"{m.name}_decoded"] = m.tokens  # timed tokens, every repeat summed
        # Every mode draws a sampled call's tokens as plain does (keyed draws, the same seed).
        row[f"{m.name}_identical"] = all(tokens == reference[i] for i, tokens in m.replies)
        row[f"{m.name}_by_source"] = {k: dict(drafted=d, accepted=a,
                                              acceptance=a / d if d else 0.0)
                                      for k, (d, a) in sorted(m.by_source.items())}
    for m in spec:
        row[f"{m.name}_vs_plain"] = row[f"{m.name}_tps"] / row["plain_tps"] if row["plain_tps"] else 0.0
    return row


def summarize(rows: list[dict], modes: list[str], info: dict) -> dict:
    """Per mode: the ratio to plain per session, its median, mean and minimum, over all
    sessions and per group of sessions (own tasks per edit format, Exercism); acceptance per
    drafter source; lookup+suffix against lookup alone."""
    out = dict(info, sessions=rows, modes=modes)
    spec = modes[1:]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(group_of(r), []).append(r)
    for r in rows:  # sessions of more than one model call, whatever their group
        if r["turns"] > 1:
            groups.setdefault("multi-turn", []).append(r)
    out["groups"] = {g: dict(sessions=len(rs), **{
        f"{name}_vs_plain_median": statistics.median(r[f"{name}_vs_plain"] for r in rs)
        for name in spec}) for g, rs in groups.items()}
    for name in spec:
        ratios = [r[f"{name}_vs_plain"] for r in rows]
        out[f"{name}_vs_plain_median"] = statistics.median(ratios) if ratios else 0.0
        out[f"{name}_vs_plain_mean"] = statistics.mean(ratios) if ratios else 0.0
        out[f"{name}_vs_plain_min"] = min(ratios) if ratios else 0.0
        src: dict[str, list[int]] = {}
        for r in rows:
            for k, v in r[f"{name}_by_source"].items():
                t = src.setdefault(k, [0, 0])
                t[0] += v["drafted"]
                t[1] += v["accepted"]
        out[f"{name}_acceptance"] = {k: dict(drafted=d, accepted=a, acceptance=a / d if d else 0.0)
                                     for k, (d, a) in sorted(src.items())}
    # Against lookup alone, per session: lookup + suffix, and lookup's second run (the spread
    # between two runs of one drafter, which the first must be read against).
    for name, tag in (("lookup+suffix", "lookup_suffix"), ("lookup-again", "lookup_again")):
        if name in modes and "lookup" in modes:
            vs = [r[f"{name}_tps"] / r["lookup_tps"] for r in rows if r["lookup_tps"]]
            out[f"{tag}_vs_lookup_min"] = min(vs, default=0.0)
            out[f"{tag}_vs_lookup_median"] = statistics.median(vs) if vs else 0.0
    if {"lookup+suffix", "lookup", "lookup-again"} <= set(modes):
        # lookup alone from both of its runs: every token over every second of the two
        vs = [r["lookup+suffix_tps"] / _pooled(r, ("lookup", "lookup-again")) for r in rows
              if r["lookup_tps"] and r["lookup-again_tps"]]
        out["lookup_suffix_vs_lookup_pooled_min"] = min(vs, default=0.0)
        out["lookup_suffix_vs_lookup_pooled_median"] = statistics.median(vs) if vs else 0.0
    out["identical_to_plain"] = all(r[f"{m}_identical"] for r in rows for m in modes)
    return out


def _pooled(row: dict, modes: Sequence[str]) -> float:
    """tok/s of several modes' decodes of a session taken together."""
    tokens = sum(row[f"{m}_decoded"] for m in modes)
    return tokens / sum(row[f"{m}_decoded"] / row[f"{m}_tps"] for m in modes)


def group_of(row: dict) -> str:
    """"tasks/whole", "tasks/tool" or "exercism" (the summary adds "multi-turn": the sessions
    of more than one model call)."""
    suite = row.get("suite", "tasks")
    return suite if suite == "exercism" else f"{suite}/{row['edit_format']}"


def print_report(r: dict) -> None:
    print(f"agentic replays: {len(r['sessions'])} sessions of {r['model']} (target {r['target']}"
          f"{', draft ' + r['draft'] if r['draft'] else ''}), up to {r['tokens_per_turn']} tokens "
          f"per turn, speculation {r['speculation']}")
    for name in r["modes"][1:]:
        acc = ", ".join(f"{k} {v['acceptance']:.2f} ({v['accepted']}/{v['drafted']})"
                        for k, v in r[f"{name}_acceptance"].items())
        print(f"  {name:14} vs plain: median {r[name + '_vs_plain_median']:.2f}x, mean "
              f"{r[name + '_vs_plain_mean']:.2f}x, min {r[name + '_vs_plain_min']:.2f}x"
              f"  acceptance: {acc or 'n/a'}")
    for g, v in r["groups"].items():
        print(f"  {g:14} {v['sessions']:2} sessions, median vs plain: "
              + ", ".join(f"{m} {v[m + '_vs_plain_median']:.2f}x" for m in r["modes"][1:]))
    for name, tag in (("lookup+suffix", "lookup_suffix"), ("lookup-again", "lookup_again")):
        if f"{tag}_vs_lookup_min" in r:
            print(f"  {name} vs lookup alone: median {r[tag + '_vs_lookup_median']:.2f}x, "
                  f"worst session {r[tag + '_vs_lookup_min']:.2f}x")
    if "lookup_suffix_vs_lookup_pooled_min" in r:
        print(f"  lookup+suffix vs lookup alone (its two runs pooled): median "
              f"{r['lookup_suffix_vs_lookup_pooled_median']:.2f}x, worst session "
              f"{r['lookup_suffix_vs_lookup_pooled_min']:.2f}x")
    print(f"  identical to plain (every mode, every turn): {r['identical_to_plain']}")
    for s in r["sessions"]:
        print(f"  {s['session']:22} {s['turns']} turns {s['tokens']:4} tok, index "
              f"{s['suffix_index_tokens']:5} tok | plain {s['plain_tps']:5.2f} tok/s | "
              + " | ".join(f"{m} {s[m + '_vs_plain']:.2f}x" for m in r["modes"][1:]))


def main(args, cfg, eval_modules=None) -> int:
    """`eval_modules`: (agent.eval.runner, agent.eval.tasks, agent.eval.exercism,
    agent.eval.exercism_run), for `--record`."""
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    names = [n for n in args.sessions.split(",") if n] if args.sessions else []
    if args.record:
        runner, tasks_mod, ex_mod, ex_run = eval_modules
        here = ex_mod.default_dir().is_dir()
        if not here:
            log(f"no Exercism exercises at {ex_mod.default_dir()}: recording the own tasks only")
        n = record(cfg, names, args.subset, DATA, 150.0, log, runner, tasks_mod,
                   exercism=(ex_mod, ex_run) if here else None)
        log(f"recorded {n} sessions into {DATA}")
        return 0
    modes = [m for m in args.modes.split(",") if m] if args.modes else []
    out = Path(args.out) if args.out else None
    try:
        result = run(cfg, names, args.tokens, args.quick, log, modes=modes, repeat=args.repeat,
                     out=out)
    except ValueError as e:  # a name, a mode or a record file that does not fit
        log(f"spec-agent bench agentic: {e}")
        return 2
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_report(result)
    return 0

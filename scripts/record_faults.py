"""Record real model replies on small task repos for the fault/tamper suite (tests/test_tamper.py).

Each task (tests/fixtures/tamper/tasks/*.toml: the message, the repo's files, the test command,
the file the task is about, whether it asks a change, names it may rename or remove, whether
the agent gets --test-cmd: where the message does not name the test) is set up
as a fresh git repo and run through the real CLI headless (`spec-agent -C REPO -p TASK --yes
--output-format events`). The model is wrapped so that every reply is kept exactly as decoded
(tool-call markup included), one per model call, in call order: replaying them with a scripted
model walks the same path. One JSON record per run is appended to recorded.jsonl; ids already
there are skipped, so `record` resumes. `classify` labels every record (what its replies do to
the task's files); `mutate` adds hand-made faulty replies built from recorded ones (a trailing
`</file>` line, the module's data dropped, a cut mid-function, a markdown line, the file
unchanged, a prose-only answer to an edit request) as records with model "mutated-from:<id>".

    python scripts/record_faults.py check          # each task's tests fail / pass as declared
    python scripts/record_faults.py record --minutes 75
    python scripts/record_faults.py classify       # rewrite the classes of every record
    python scripts/record_faults.py mutate

It does not judge the agent: tests/test_tamper.py replays the records and checks the outcome.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "tamper"
sys.path.insert(0, str(ROOT / "tests"))
from scripted import make_repo  # noqa: I001  (the suite's repo builder)
TASKS = FIXTURES / "tasks"
RECORDED = FIXTURES / "recorded.jsonl"
CLI = ROOT / ".venv" / "bin" / "spec-agent"
AGENT_ARGS = ["--yes", "--max-turns", "4"]
SRC = Path(tempfile.gettempdir()) / "record-faults-src"  # see snapshot()
SRC_COMMIT = ""

# Configurations: label -> (CLI model flags, temperature). The 1.5B decodes with the prompt
# lookup drafter only: a draft model doubles the prefill on two CPU cores.
SMALL, LARGE = "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"
CONFIGS = {
    "05b-t0": ([], 0.0),
    "15b-t0": (["-m", LARGE], 0.0),
    "05b-t07": ([], 0.7),
    "15b-t07": (["-m", LARGE], 0.7),
    "05b-t1": ([], 1.0),
}
# Tasks by the length of what they make the model write, shortest first.
SHORT_FIRST = ["morse", "slugify_special", "roman", "inventory_rename", "textstats_explain",
               "validators_hints", "dates_attach", "colors_attach", "report_remove",
               "settings_docstring", "units", "stats_long", "http_status_long"]
# The 1.5B is about three times slower (on two CPU cores with OpenBLAS, a 0.5B run took 10-170
# s): one of its runs after every two of the 0.5B, so a time limit leaves recordings of both.
SMALL_PER_LARGE = 2
# A run that starts with less than this many seconds left is not started.
MIN_RUN_S = {"05b": 180, "15b": 540}


def plan(tasks: dict[str, dict]) -> list[str]:
    """Record ids in the order they are run: the T=0 pass of both models interleaved, then
    the sampled ones."""
    names = [n for n in SHORT_FIRST if n in tasks] + sorted(set(tasks) - set(SHORT_FIRST))
    out = []
    for small, large in (("05b-t0", "15b-t0"), ("05b-t07", "15b-t07"), ("05b-t1", None)):
        smalls = [f"{n}-{small}" for n in names]
        larges = [f"{n}-{large}" for n in names] if large else []
        while smalls or larges:
            out += smalls[:SMALL_PER_LARGE] + larges[:1]
            smalls, larges = smalls[SMALL_PER_LARGE:], larges[1:]
    return out


# ---- tasks and repos ----------------------------------------------------------------------

def load_tasks() -> dict[str, dict]:
    tasks = {}
    for path in sorted(TASKS.glob("*.toml")):
        task = tomllib.loads(path.read_text())
        task["name"] = path.stem
        tasks[path.stem] = task
    return tasks


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True).stdout


def tests_pass(root: Path, cmd: str) -> bool:
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}"}
    r = subprocess.run(cmd, shell=True, cwd=root, capture_output=True, text=True, env=env,
                       timeout=120, check=False)
    return r.returncode == 0


def read_files(root: Path, names) -> dict[str, str | None]:
    return {n: (root / n).read_text() if (root / n).is_file() else None for n in names}


# ---- the child: the real CLI with every reply kept ------------------------------------------

def child(out: str, argv: list[str]) -> int:
    """Run `spec-agent argv` in this process; write each model call's text and finish reason
    to `out` as they happen. OpenBLAS is preloaded first, as the `spec-agent` command does (an
    in-process `main(argv)` does not re-exec; without it MLX's reference BLAS runs each prefill
    several times slower)."""
    from agent import store
    from agent.engine import ensure_openblas

    warning = ensure_openblas("auto", store.home() / "blas-coretype.json")  # may re-exec
    if warning:
        print(warning, file=sys.stderr)
    from agent import runtime
    from agent.events import GenerationStats, TextDelta

    replies: list[dict] = []

    def save() -> None:
        Path(out).write_text(json.dumps(replies, ensure_ascii=False))

    class Recording:
        def __init__(self, model):
            self._model = model

        def __getattr__(self, name):
            return getattr(self._model, name)

        def generate(self, messages, cancel=None, **kw):
            parts, finish = [], ""
            for ev in self._model.generate(messages, cancel, **kw):
                if isinstance(ev, TextDelta):
                    parts.append(ev.text)
                elif isinstance(ev, GenerationStats):
                    finish = ev.finish_reason
                yield ev
            replies.append({"text": "".join(parts), "finish": finish})
            save()

    use_model = runtime.Runtime.use_model

    def recording_use_model(self, model):
        use_model(self, model if isinstance(model, Recording) else Recording(model))

    runtime.Runtime.use_model = recording_use_model
    from agent.cli import main

    try:
        return main(argv)
    finally:
        save()


# ---- recording ---------------------------------------------------------------------------

def existing_ids() -> set[str]:
    if not RECORDED.exists():
        return set()
    return {json.loads(line)["id"] for line in RECORDED.read_text().splitlines() if line.strip()}


def head_commit() -> str:
    return git(ROOT, "rev-parse", "--short", "HEAD").strip()


def record_one(task: dict, label: str, flags: list[str], temperature: float,
               timeout: float = 1800) -> dict:
    """Run the agent once on `task`; the record (see the module's docstring)."""
    with tempfile.TemporaryDirectory(prefix="tamper-") as tmp:
        repo = make_repo(Path(tmp) / "repo", task["files"])
        raw = Path(tmp) / "replies.json"
        agent_args = agent_args_for(task)
        argv = ["-C", str(repo), "-p", task["task"], "--output-format", "events", *agent_args,
                *flags, "--temperature", str(temperature)]
        env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
               "PYTHONPATH": str(SRC)}
        started = time.monotonic()
        r = subprocess.run([sys.executable, __file__, "child", str(raw), "--", *argv],
                           capture_output=True, text=True, env=env, timeout=timeout, check=False)
        events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        result = next((e for e in reversed(events) if e.get("type") == "result"), {})
        replies = json.loads(raw.read_text()) if raw.exists() else []
        after = read_files(repo, task["files"])
        commits = git(repo, "rev-list", "--count", "HEAD").strip()
        return {
            "id": f"{task['name']}-{label}", "model": label_model(label), "task": task["task"],
            "task_name": task["name"], "target": task["target"],
            "asks_change": task["asks_change"], "renames": task.get("renames", []),
            "files_before": task["files"], "test_cmd": task["test_cmd"],
            "agent_args": agent_args, "model_flags": flags, "temperature": temperature,
            "replies": [x["text"] for x in replies], "finishes": [x["finish"] for x in replies],
            "assistant_messages": [e["text"] for e in events if e.get("type") == "assistant_message"],
            "turn_stats": [[e["generated_tokens"], round(e["decode_tps"], 1), round(e["prefill_s"], 1)]
                           for e in events if e.get("type") == "turn_stats"],
            "exit_code": r.returncode, "stop_reason": result.get("stop_reason", ""),
            "is_error": result.get("is_error"), "stderr_tail": r.stderr[-600:],
            "files_after": after, "commits_made": int(commits) - 1,
            "tests_pass_after": tests_pass(repo, task["test_cmd"]),
            "seconds": round(time.monotonic() - started, 1),
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": SRC_COMMIT,
        }


def agent_args_for(task: dict) -> list[str]:
    """The agent's flags for `task`: --test-cmd where the message does not name the test."""
    given = ["--test-cmd", task["test_cmd"]] if task.get("test_cmd_given") else []
    return [*AGENT_ARGS, *given]


def label_model(label: str) -> str:
    return SMALL if label.startswith("05b") else LARGE


def append(rec: dict) -> None:
    rec["classes"] = classify(rec)
    with RECORDED.open("a") as f:
        f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def snapshot() -> None:
    """The agent's code as committed at HEAD, in a folder of its own: the child imports it
    from there, so edits in progress in the working tree do not reach a recording."""
    global SRC_COMMIT
    shutil.rmtree(SRC, ignore_errors=True)
    SRC.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(SRC)], input=archive.stdout, check=True)
    SRC_COMMIT = head_commit()


def record(minutes: float, only: str | None) -> None:
    snapshot()
    tasks, done = load_tasks(), existing_ids()
    deadline = time.monotonic() + minutes * 60
    for rid in plan(tasks):
        name, label = rid.rsplit("-", 2)[0], "-".join(rid.rsplit("-", 2)[1:])
        if (only and not label.startswith(only)) or rid in done:
            continue
        left = deadline - time.monotonic()
        if left < MIN_RUN_S[label[:3]]:
            print(f"{rid}: skipped, {left:.0f}s left", flush=True)
            continue
        flags, temp = CONFIGS[label]
        try:
            rec = record_one(tasks[name], label, flags, temp, timeout=left + 300)
        except subprocess.TimeoutExpired:
            print(f"{rid}: stopped at the time limit, not recorded", flush=True)
            continue
        append(rec)
        print(f"{rid}: exit {rec['exit_code']} {rec['stop_reason']} "
              f"{len(rec['replies'])} replies {rec['seconds']}s {rec['classes']}", flush=True)


def check() -> int:
    """Each task's Python files parse and its tests fail or pass before as it declares
    (`tests_before`); the number of tasks that do not."""
    bad = 0
    for task in load_tasks().values():
        with tempfile.TemporaryDirectory() as tmp:
            ok = tests_pass(make_repo(Path(tmp) / "r", task["files"]), task["test_cmd"])
        broken = [path for path, text in task["files"].items()
                  if path.endswith(".py") and not parses(text)]
        got = "pass" if ok else "fail"
        wrong = got != task.get("tests_before") or task["target"] not in task["files"] or broken
        bad += bool(wrong)
        print(f"{task['name']}: tests {got} before (declared {task.get('tests_before')})"
              + (f"; does not parse: {broken}" if broken else "") + ("  <- WRONG" if wrong else ""))
    return min(bad, 1)


# ---- classes -----------------------------------------------------------------------------

FENCE = re.compile(r"^(`{3,})([^`\n]*)$")
FILE_TAG = re.compile(r'<file path="([^"\n]+)">\n(.*?)(?:\n?</file>|\Z)', re.DOTALL)
PATH_LINE = re.compile(r"^[#*`\s]*(?:File:\s*)?([\w\-./]+\.py)[*`:\s]*$")


def blocks(reply: str, default: str) -> list[dict]:
    """The code blocks of a reply: {path, body, start, end, closed} (start/end: the body's span
    in the reply). An unnamed block is taken for `default`."""
    out = []
    lines = reply.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip())
        if not m:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == m.group(1)), None)
        path = next((p for p in re.split(r"[\s:]+", m.group(2)) if p.endswith(".py")), "")
        for k in (i - 1, i - 2):
            if not path and k >= 0 and PATH_LINE.match(lines[k]):
                path = PATH_LINE.match(lines[k]).group(1)
        stop = end if end is not None else len(lines)
        out.append({"path": (path or default).removeprefix("./"), "body": "\n".join(lines[i + 1:stop]),
                    "start": offsets[i + 1], "end": offsets[stop] - 1 if stop > i + 1 else offsets[i + 1],
                    "closed": end is not None})
        i = stop + 1
    for m in FILE_TAG.finditer(reply):
        out.append({"path": m.group(1), "body": m.group(2), "start": m.start(2),
                    "end": m.end(2), "closed": "</file>" in m.group(0)})
    return out


def top_names(text: str) -> set[str]:
    """Names a module defines at its top level: imports, assignment targets, defs, classes."""
    names: set[str] = set()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def docstring(text: str) -> str | None:
    try:
        return ast.get_docstring(ast.parse(text), clean=False)
    except (SyntaxError, ValueError):
        return None


def classify(rec: dict) -> list[str]:
    return classify_replies(rec)[0]


def classify_replies(rec: dict) -> tuple[list[str], list[list[str]]]:
    """What the replies do to the task's Python files: drop_code (a block for a file lacks some
    of its top-level names the task does not name), junk (a block that does not parse), cut (a
    block left unclosed), unchanged (a block equal to the file as the replies before left it),
    no_block (a change was asked and no reply has a block), no_change (a change was asked and
    the files ended as before: recorded runs only); drop_doc (a block leaves out the module's
    docstring: not one of the suite's faults, which are about names); `clean` when none.
    Returns (the record's classes, each reply's: no_block for a reply without a block only
    where the record changed nothing)."""
    before = rec["files_before"]
    now = dict(before)  # the files as the blocks so far left them
    found: set[str] = set()
    per_reply: list[set[str]] = []
    any_block = False
    for reply in rec["replies"]:
        mine: set[str] = set()
        per_reply.append(mine)
        for b in blocks(reply, rec["target"]):
            if not b["path"].endswith(".py"):
                continue
            any_block = True
            mine.add("block")
            if not b["closed"]:
                mine.add("cut")
            if not parses(b["body"]):
                mine.add("junk")
                continue
            old, current = before.get(b["path"]), now.get(b["path"])
            now[b["path"]] = b["body"]
            if old is None:
                continue
            if b["body"].strip() == (current or "").strip():
                mine.add("unchanged")
            elif top_names(old) - top_names(b["body"]) - set(rec.get("renames", [])):
                mine.add("drop_code")
            if docstring(old) and not docstring(b["body"]):
                mine.add("drop_doc")
        found |= mine - {"block"}
    if rec["asks_change"] and not any_block:
        found.add("no_block")
    after = rec.get("files_after")
    if rec["asks_change"] and after is not None and all(after.get(k) == v for k, v in before.items()):
        found.add("no_change")
    for mine in per_reply:
        if "block" not in mine and ({"no_change", "no_block"} & found):
            mine.add("no_block")
        mine.discard("block")
    return sorted(found) or ["clean"], [sorted(m) or ["clean"] for m in per_reply]


# ---- mutations ---------------------------------------------------------------------------

def _data_lines(text: str) -> set[int]:
    """1-based lines of the module's top-level data: assignments of literals, comprehensions
    or calls (tables, constants, compiled patterns)."""
    out: set[int] = set()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            out.update(range(node.lineno, node.end_lineno + 1))
    return out


def mutate_body(kind: str, body: str, original: str) -> str | None:
    """The block's body after `kind`; None when it does not apply."""
    if kind == "close_tag":
        return body.rstrip("\n") + "\n</file>"
    if kind == "markdown":
        return body.rstrip("\n") + "\n\n**Explanation:** the fix above makes the tests pass."
    if kind == "unchanged":
        return original
    if kind == "prose":
        return None  # the whole reply is replaced (see mutate)
    tree = ast.parse(body)
    if kind == "drop_data":
        drop = _data_lines(body)
        if not drop:
            return None
        return "\n".join(line for n, line in enumerate(body.split("\n"), 1) if n not in drop)
    if kind == "truncate":
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        if not defs:
            return None
        if len(defs) == 1:  # half of its body
            cut = defs[0].lineno + (defs[0].end_lineno - defs[0].lineno) // 2
        else:  # through the def line of a middle one: its body is gone
            cut = defs[len(defs) // 2].lineno
        return "\n".join(body.split("\n")[:cut])
    raise ValueError(kind)


MUTATIONS = ("close_tag", "drop_data", "truncate", "markdown", "unchanged", "prose")


def prose_reply(rec: dict) -> str:
    """A reply to an edit request that only says the work is done (no block, no tool call)."""
    return (f"The bug is in `{rec['target']}`. I have fixed it: the function now handles this "
            "case correctly and the tests should pass.")


def target_blocks(rec: dict):
    """(reply, block) for each closed, parsing, non-empty block of the target in the replies."""
    for reply in rec["replies"]:
        for b in blocks(reply, rec["target"]):
            if b["path"] == rec["target"] and b["closed"] and parses(b["body"]) and b["body"].strip():
                yield reply, b


def base_reply(rec: dict) -> tuple[str, dict]:
    """(reply, block) of the first reply with a block for the target that changes it, else
    with one that parses; else a made-up reply that writes the target as it was."""
    old = rec["files_before"][rec["target"]].strip()
    found = sorted(target_blocks(rec), key=lambda rb: rb[1]["body"].strip() == old)
    if found:
        return found[0]
    reply = f"{rec['target']}\n```python\n{old}\n```\nUpdated {rec['target']}."
    return reply, blocks(reply, rec["target"])[0]


def base_rank(rec: dict) -> tuple[int, int]:
    """Lower is a better base for mutations: a recording whose reply changes the target (a fix
    to spoil), then one with a block at all; the 0.5B at T=0 first."""
    old = rec["files_before"][rec["target"]].strip()
    found = [b["body"].strip() != old for _, b in target_blocks(rec)]
    return (0 if any(found) else 1 if found else 2), (0 if rec["id"].endswith("-05b-t0") else 1)


def mutate() -> int:
    """One mutated record per task and mutation, from the task's recording that base_rank
    puts first."""
    recs = [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]
    done = {r["id"] for r in recs}
    bases: dict[str, dict] = {}
    for r in recs:
        if r["model"].startswith("mutated-from:"):
            continue
        if r["task_name"] not in bases or base_rank(r) < base_rank(bases[r["task_name"]]):
            bases[r["task_name"]] = r
    added = 0
    for name, base in bases.items():
        reply, b = base_reply(base)
        for kind in MUTATIONS:
            rid = f"{name}-mut-{kind}"
            if rid in done or (kind in ("unchanged", "prose") and not base["asks_change"]):
                continue
            if kind == "close_tag" and reply[b["end"]:].lstrip("\n").startswith("</file>"):
                continue  # the block is a <file> tag: its own end is `</file>`
            if kind == "prose":
                new = prose_reply(base)
            elif (body := mutate_body(kind, b["body"], base["files_before"][base["target"]])) is None:
                continue
            else:
                new = reply[: b["start"]] + body + reply[b["end"]:]
            rec = {k: v for k, v in base.items() if k not in ("files_after", "tests_pass_after",
                                                              "exit_code", "stop_reason", "is_error",
                                                              "stderr_tail", "commits_made", "seconds")}
            rec.update(id=rid, model=f"mutated-from:{base['id']}", mutation=kind,
                       replies=[new], finishes=["stop"], assistant_messages=[],
                       exit_code=None, stop_reason="", recorded_at=datetime.now(UTC)
                       .isoformat(timespec="seconds"), commit=head_commit())
            append(rec)
            added += 1
    print(f"added {added} mutated records")
    return 0


# the classes -> the three faults of the suite (a reply drops code, adds junk, changes nothing)
FAULT_OF = {"drop_code": "drop_code", "cut": "drop_code", "junk": "junk", "unchanged": "no_change",
            "no_block": "no_change", "no_change": "no_change"}


def reclassify() -> int:
    """Rewrite every record's classes; print the records per source and class, and per
    source and fault, and the replies per source that have a fault and that have none."""
    recs = [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]
    for r in recs:
        r["classes"] = classify(r)
    RECORDED.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))
    counts: dict[tuple[str, str], int] = {}
    for r in recs:
        source = r["model"].split(":")[0]
        faults = sorted({FAULT_OF[c] for c in r["classes"] if c in FAULT_OF}) or ["none"]
        for key in [*(("class", c) for c in r["classes"]), *(("fault", f) for f in faults),
                    ("records", "all"), ("records", "faulty" if faults != ["none"] else "clean")]:
            counts[(source, *key)] = counts.get((source, *key), 0) + 1
        for classes in classify_replies(r)[1]:
            bad = any(c in FAULT_OF for c in classes)
            key = (source, "replies", "faulty" if bad else "clean")
            counts[key] = counts.get(key, 0) + 1
    for key in sorted(counts):
        print(f"{' '.join(key)}: {counts[key]}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["child"]:
        return child(argv[1], argv[3:])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--minutes", type=float, default=75)
    r.add_argument("--only", help="only the plan rows whose label starts with this")
    for name in ("check", "classify", "mutate"):
        sub.add_parser(name)
    args = p.parse_args(argv)
    if args.cmd == "record":
        record(args.minutes, args.only)
        return 0
    return {"check": check, "classify": reclassify, "mutate": mutate}[args.cmd]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

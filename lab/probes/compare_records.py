"""Side by side: the own suite's JSON records and the Exercism JSONL records, before and after.
Timings (wall, tok/s, decode_s, a test run's "in 0.01s") and speculation figures are left
out; everything the model wrote and what came of it is compared."""
import json, re, sys

TASK_KEYS = ["passed", "detail", "stop_reason", "turns", "output_tokens", "tool_calls",
             "valid_calls", "timed_out", "answer"]
EX_KEYS = ["passed_1", "passed_2", "well_formed", "tries", "output_tokens", "input_tokens",
           "timed_out", "error"]
TRY_KEYS = ["passed", "edits", "rejected", "stop_reason", "output_tokens", "input_tokens",
            "turns", "test_output", "reply", "solution", "fed_back", "warnings"]


def clean(v):
    return re.sub(r"in \d+\.\d+s", "in Ts", v) if isinstance(v, str) else v


def tasks(path):
    return {t["name"]: t for t in json.load(open(path))["tasks"]}


def exercism(path):
    return {json.loads(l)["name"]: json.loads(l) for l in open(path) if l.strip()}


def diff(x, y, kind):
    if kind == "tasks":
        return [k for k in TASK_KEYS if x.get(k) != y.get(k)]
    out = [k for k in EX_KEYS if x.get(k) != y.get(k)]
    dx, dy = x.get("detail", []), y.get("detail", [])
    if len(dx) != len(dy):
        out.append("tries")
    for i, (a, b) in enumerate(zip(dx, dy), 1):
        out += [f"try{i}.{k}" for k in TRY_KEYS
                if json.dumps(clean(a.get(k)) if not isinstance(a.get(k), list) else [clean(v) for v in a.get(k)])
                != json.dumps(clean(b.get(k)) if not isinstance(b.get(k), list) else [clean(v) for v in b.get(k)])]
    return out


kind, before, after = sys.argv[1:4]
load = tasks if kind == "tasks" else exercism
b, a = load(before), load(after)
same = True
for name in sorted(set(b) | set(a)):
    x, y = b.get(name), a.get(name)
    if x is None or y is None:
        print(f"| {name} | missing {'before' if x is None else 'after'} |"); same = False; continue
    d = diff(x, y, kind)
    same &= not d
    if kind == "tasks":
        row = f"{x['passed']} | {y['passed']} | {x['stop_reason']} / {y['stop_reason']} | {x['turns']} / {y['turns']} | {x['output_tokens']} / {y['output_tokens']}"
    else:
        row = (f"{x['passed_1']},{x['passed_2']} | {y['passed_1']},{y['passed_2']} | "
               f"{x['output_tokens']} / {y['output_tokens']}")
    print(f"| {name} | {row} | {'identical' if not d else 'DIFFERS: ' + ', '.join(d)} |")
print("ALL IDENTICAL (timings aside)" if same else "NOT IDENTICAL")

"""The goals for `spec-agent serve`, measured over HTTP; one JSON line per run appended
to lab/results/serve-goals.jsonl.

    .venv/bin/python lab/probes/serve_goals.py                 # every part not yet recorded
    .venv/bin/python lab/probes/serve_goals.py --part 1 --rounds 2 --ks 3,4,6
    .venv/bin/python lab/probes/serve_goals.py --part 3 --force  # again, though recorded

1. Served decode, trained pair (qwen2.5-coder-1.5b target, 0.5b draft), T=0, non-streamed,
   max_tokens 128, the same requests (two sets, see `prompt_sets`): `serve` (default
   speculation) and `serve --speculation off` up together, taking turns per request, then
   `mlx_lm server` with the same weights (the store's converted f32 safetensors) at each K
   (per request, `num_draft_tokens`); three f32 pairs do not fit in memory at once. Each
   block's line is written as it ends, and a rerun skips blocks recorded for the commit.
   End-to-end tok/s = completion tokens / request wall time, summed over the requests.
2. Time to first token of a replayed multi-turn session (streamed) on the embedded model:
   turn >= 2 on the warm server vs the last turn's full history sent to a fresh server.
3. 1,000 malformed requests (each must get a 4xx and OpenAI's error object) and 500 valid
   ones (each a 200), the server's RSS sampled; the process must stay up.
4. Tool calls on the embedded model: every call's arguments checked with jsonschema.

A part is skipped when the results file already has its summary for this commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
import serve_cases
from serve_servers import ROOT, loadavg, mem_available_gb, mlx_folder, mlx_lm, ours

RESULTS = ROOT / "lab/results/serve-goals.jsonl"
TARGET, DRAFT, SMALL = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m-instruct"
NO_DISK_CACHE = {"SPEC_AGENT_DISK_CACHE_MB": "0"}  # each server starts cold

SYSTEM = "You are a careful senior Python engineer. Answer with code first, then one short note."
PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Write a function `is_palindrome(s)` that ignores case and non-alphanumeric characters.",
    "Implement binary search over a sorted list; return the index or -1.",
    "Write a Python class `LRUCache` with get and put, capacity given at construction.",
    "Write a function that merges two sorted lists into one sorted list.",
    "Write a function that parses 'key=value' lines into a dict, skipping comments (#).",
    "Write a function `chunks(xs, n)` that yields successive n-sized chunks of a list.",
    "Write a function that counts word frequencies in a text and returns the top 5 words.",
]


def commit() -> str:
    """The last commit that changed the code measured (others commit to the same tree)."""
    return subprocess.run(["git", "log", "-1", "--format=%h", "--", "agent", "pyproject.toml"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.strip()


def recorded(part: int, rev: str) -> list[dict[str, Any]]:
    if not RESULTS.exists():
        return []
    rows = [json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("part") == part and r.get("commit") == rev]


def append(row: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps({k: v for k, v in row.items() if k not in ("requests", "texts", "samples")}),
          flush=True)


def chat(url: str, messages: list[dict], max_tokens: int, **extra: Any) -> tuple[dict, float]:
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0, **extra}
    t0 = time.perf_counter()
    r = httpx.post(f"{url}/chat/completions", json=body, timeout=1800)
    took = time.perf_counter() - t0
    r.raise_for_status()
    return r.json(), took


# ---- part 1: served decode, trained pair ---------------------------------------------------

def prompt_sets() -> dict[str, list[dict[str, Any]]]:
    """Two sets of requests: "fresh", code written from a one-line ask (PROMPTS), and "agent",
    the four workloads of `bench spec --pair` (write a function, explain real code, a tool
    call, a rewrite of a real file), the requests a coding agent sends."""
    from agent.bench.pair import workloads

    fresh = [{"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p}]}
             for p in PROMPTS]
    agent = [{"messages": msgs, **({"tools": tools} if tools else {}), "name": name}
             for name, (msgs, tools) in workloads().items()]
    return {"fresh": fresh, "agent": agent}


def _ask(url: str, req: dict[str, Any], max_tokens: int, **extra: Any) -> dict[str, Any]:
    body, took = chat(url, req["messages"], max_tokens, **({"tools": req["tools"]} if "tools" in req else {}),
                      **extra)
    msg = body["choices"][0]["message"]
    calls = json.dumps([c["function"] for c in msg.get("tool_calls") or []])
    return {"seconds": round(took, 3), "tokens": body["usage"]["completion_tokens"],
            "text": (msg.get("content") or "") + (calls if msg.get("tool_calls") else ""),
            "spec_agent": body["usage"].get("spec_agent")}


def _block(label: str, rnd: int, ks: list[int], max_tokens: int) -> dict[str, Any]:
    """label "pair": `serve` with the draft (default speculation) and `serve --speculation off`
    up together (one request at a time, so the idle one costs nothing), taking turns per
    request; label "mlx": `mlx_lm server --draft-model` at every K per request."""
    mem0, load0 = mem_available_gb(), loadavg()
    t_load = time.perf_counter()
    if label == "mlx":
        servers = {"mlx": mlx_lm("mlx", mlx_folder(TARGET), "--draft-model", str(mlx_folder(DRAFT)),
                                 "--num-draft-tokens", str(ks[0])).wait()}
    else:
        servers = {"ours": ours("ours", "-m", TARGET, "--draft-model", DRAFT, env=NO_DISK_CACHE).wait()}
        servers["off"] = ours("off", "-m", TARGET, "--speculation", "off", env=NO_DISK_CACHE).wait()
    loaded_s = time.perf_counter() - t_load
    try:
        for server in servers.values():
            chat(server.url, [{"role": "user", "content": "Say hi."}], 4)  # warm-up, not counted
        requests = []
        for set_name, reqs in prompt_sets().items():
            for i, req in enumerate(reqs):
                if label == "mlx":
                    runs = [("mlx", k, {"num_draft_tokens": k}) for k in ks]
                else:  # who goes first alternates per request and round
                    runs = [("ours", None, {}), ("off", None, {})][:: 1 if (i + rnd) % 2 == 0 else -1]
                for who, k, extra in runs:
                    row = _ask(servers[who].url, req, max_tokens, **extra)
                    requests.append({"label": who, "set": set_name, "prompt": i, "k": k, **row})
                    print(json.dumps({kk: v for kk, v in requests[-1].items() if kk not in ("text",)})[:300],
                          flush=True)
        rss = {who: round(s.rss_mb()) for who, s in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    return {"part": 1, "kind": "block", "label": label, "round": rnd, "load_s": round(loaded_s, 1),
            "mem_available_gb_before": round(mem0, 1), "server_rss_mb": rss,
            "loadavg_before": load0, "loadavg_after": loadavg(), "requests": requests}


def _tps(reqs: list[dict]) -> float:
    return sum(r["tokens"] for r in reqs) / sum(r["seconds"] for r in reqs)


def _set_summary(reqs: list[dict], ks: list[int]) -> dict[str, Any]:
    """tok/s end to end (tokens / request seconds, summed over the set) per configuration,
    mlx-lm at its best fixed K for the set, the mean of per-request ratios, identity."""
    by = {lab: [r for r in reqs if r["label"] == lab] for lab in ("ours", "off")}
    tps = {"ours": _tps(by["ours"]), "off": _tps(by["off"])}
    mlx = {k: _tps([r for r in reqs if r["label"] == "mlx" and r["k"] == k]) for k in ks}
    best_k = max(mlx, key=mlx.get)
    key = lambda r: (r["prompt"], r.get("round"))  # noqa: E731
    secs = {lab: {key(r): r["seconds"] / r["tokens"] for r in reqs if r["label"] == lab
                  and (lab != "mlx" or r["k"] == best_k)} for lab in ("ours", "off", "mlx")}
    per_mlx = [secs["mlx"][p] / secs["ours"][p] for p in secs["ours"] if p in secs["mlx"]]
    per_off = [secs["off"][p] / secs["ours"][p] for p in secs["ours"] if p in secs["off"]]
    plain = {key(r): r["text"] for r in by["off"]}
    spec = [r["spec_agent"] for r in by["ours"] if (r.get("spec_agent") or {}).get("rounds")]
    return {"requests": len(by["ours"]),
            "tok_per_s": {"ours": round(tps["ours"], 3), "off": round(tps["off"], 3),
                          **{f"mlx_k{k}": round(v, 3) for k, v in mlx.items()}},
            "mlx_best_k": best_k, "ours_vs_mlx_best": round(tps["ours"] / mlx[best_k], 3),
            "ours_vs_off": round(tps["ours"] / tps["off"], 3), "mlx_best_vs_off": round(mlx[best_k] / tps["off"], 3),
            "mean_request_ratio_vs_mlx_best": round(statistics.mean(per_mlx), 3),
            "mean_request_ratio_vs_off": round(statistics.mean(per_off), 3),
            "ours_identical_to_off": sum(r["text"] == plain.get(key(r)) for r in by["ours"]),
            "mlx_identical_to_off": {k: sum(r["text"] == plain.get(key(r)) for r in reqs
                                            if r["label"] == "mlx" and r["k"] == k) for k in ks},
            "ours_accepted_per_round": round(statistics.mean(s["accepted_per_round"] for s in spec), 2)
            if spec else None}


def _summary1(blocks: list[dict], ks: list[int], rev: str) -> dict[str, Any]:
    reqs = [{**r, "round": b["round"]} for b in blocks for r in b["requests"]]
    sets = {name: _set_summary([r for r in reqs if r["set"] == name], ks) for name in ("fresh", "agent")}
    both = _set_summary([{**r, "prompt": (r["set"], r["prompt"])} for r in reqs], ks)
    return {"part": 1, "kind": "summary", "commit": rev, "date": time.strftime("%Y-%m-%d"),
            "rounds": len({b["round"] for b in blocks}), "all": both, **sets,
            "goal_vs_mlx_2x": both["ours_vs_mlx_best"] >= 2.0, "goal_vs_off_3x": both["ours_vs_off"] >= 3.0,
            "loadavg": [b["loadavg_before"][0] for b in blocks]}


def part1(rev: str, rounds: int, ks: list[int], max_tokens: int) -> None:
    done = recorded(1, rev)
    if any(r["kind"] == "summary" for r in done):
        print("part 1: recorded for", rev)
        return
    orders = [("pair", "mlx"), ("mlx", "pair")]
    for rnd in range(rounds):
        for label in orders[rnd % 2]:
            if any(b["kind"] == "block" and b["label"] == label and b["round"] == rnd for b in done):
                continue
            append({**_block(label, rnd, ks, max_tokens), "commit": rev, "ks": ks, "max_tokens": max_tokens})
    blocks = [b for b in recorded(1, rev) if b["kind"] == "block" and b["round"] < rounds]
    row = _summary1(blocks, ks, rev)
    row["max_tokens"] = max_tokens
    append(row)


# ---- part 2: time to first token, multi-turn ------------------------------------------------

def stream_ttft(url: str, messages: list[dict], max_tokens: int) -> dict[str, Any]:
    """A streamed request: seconds to the first content, the text, the usage."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0, first, text, usage = time.perf_counter(), None, "", None
    with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for ch in chunk.get("choices", []):
                piece = ch["delta"].get("content") or ""
                if piece and first is None:
                    first = time.perf_counter() - t0
                text += piece
    return {"ttft_s": first, "text": text, "usage": usage, "total_s": time.perf_counter() - t0}


def session_turns(target_tokens: int) -> list[list[dict]]:
    """The user messages of an agent session: a task with repository files (about 3/4 of
    `target_tokens`, 4 characters a token), then short tool results (test output, a grep,
    a diff: 100-200 tokens each) until about `target_tokens` of history."""
    files = sorted((ROOT / "agent/serve").glob("*.py"))
    first, chars = "Review the HTTP server in agent/serve/ for bugs. The files:\n", 0
    for f in files:
        if chars / 4 >= 0.75 * target_tokens:
            break
        text = f.read_text()[:4000]
        first += f"\nFile {f.relative_to(ROOT)}:\n```python\n{text}\n```\n"
        chars += len(text)
    turns = [[{"role": "user", "content": first}]]
    lines = (ROOT / "agent/serve/protocol.py").read_text().splitlines()
    at = 0
    while chars / 4 < target_tokens:
        snippet = "\n".join(lines[at:at + 12])
        at += 12
        turns.append([{"role": "user", "content": f"Tool result (read_file, lines {at - 11}-{at}):\n{snippet}\n"
                       "Anything wrong there? One sentence."}])
        chars += len(snippet) + 200
    return turns


def part2(rev: str, reply_tokens: int = 32, context: int = 4000, repeats: int = 3) -> None:
    if recorded(2, rev):
        print("part 2: recorded for", rev)
        return
    turns = session_turns(context)
    history: list[dict] = [{"role": "system", "content": "You are a code reviewer. Be brief."}]
    warm = []
    with ours("ttft-warm", "-m", SMALL, env=NO_DISK_CACHE).wait() as server:
        for i, msgs in enumerate(turns):
            history += msgs
            res = stream_ttft(server.url, history, reply_tokens)
            sa = (res["usage"] or {}).get("spec_agent", {})
            warm.append({"turn": i + 1, "ttft_s": round(res["ttft_s"], 4), "total_s": round(res["total_s"], 3),
                         "prompt_tokens": res["usage"]["prompt_tokens"],
                         "cached_tokens": res["usage"]["prompt_tokens_details"]["cached_tokens"],
                         "server_ttft_s": sa.get("ttft_s")})
            history.append({"role": "assistant", "content": res["text"]})
    last = history[:-1]  # the last request's messages
    cold = []
    for _ in range(repeats):
        with ours("ttft-cold", "-m", SMALL, env=NO_DISK_CACHE).wait() as server:
            res = stream_ttft(server.url, last, reply_tokens)
            cold.append({"ttft_s": round(res["ttft_s"], 4), "prompt_tokens": res["usage"]["prompt_tokens"],
                         "cached_tokens": res["usage"]["prompt_tokens_details"]["cached_tokens"],
                         "same_text": res["text"] == history[-1]["content"]})
    later = [w["ttft_s"] for w in warm[1:]]
    cold_s = statistics.median(c["ttft_s"] for c in cold)
    append({"part": 2, "kind": "summary", "commit": rev, "date": time.strftime("%Y-%m-%d"), "model": SMALL,
            "turns": len(turns), "last_prompt_tokens": warm[-1]["prompt_tokens"],
            "warm_last_ttft_s": warm[-1]["ttft_s"], "cold_last_ttft_s_median": cold_s,
            "ratio_last": round(cold_s / warm[-1]["ttft_s"], 2),
            "warm_turn2plus_ttft_median_s": statistics.median(later),
            "warm_turn2plus_ttft_max_s": max(later),
            "ratio_cold_vs_worst_warm": round(cold_s / max(later), 2),
            "goal_10x": cold_s / max(later) >= 10, "loadavg": loadavg(), "warm": warm, "cold": cold})


# ---- part 3: malformed and valid requests ---------------------------------------------------

def _is_error_object(r: httpx.Response) -> bool:
    try:
        err = r.json().get("error")
    except ValueError:
        return False
    return isinstance(err, dict) and isinstance(err.get("message"), str) and isinstance(err.get("type"), str)


def part3(rev: str, malformed: int = 1000, valid: int = 500, prefix_mb: int | None = None) -> None:
    """`prefix_mb`: the server's prefix store budget (`prefix_cache_mb`; its default when
    None), small enough to fill within the valid requests, so the run shows past it."""
    if recorded(3, rev):
        print("part 3: recorded for", rev)
        return
    bad, samples, kinds = [], [], {}
    env = {**NO_DISK_CACHE, **({"SPEC_AGENT_PREFIX_CACHE_MB": str(prefix_mb)} if prefix_mb is not None else {})}
    with ours("robust", "-m", SMALL, "--max-tokens", "16", env=env).wait() as server:
        root = server.url.removesuffix("/v1")
        with httpx.Client(timeout=300) as client:
            for _ in range(10):  # warm-up
                client.post(f"{root}/v1/chat/completions", json=serve_cases.valid(0))
            samples.append({"at": 0, "rss_mb": round(server.rss_mb(), 1)})
            for i, case in enumerate(serve_cases.malformed(malformed)):
                r = client.request(case.method, root + case.path, content=case.body,
                                   headers={"content-type": "application/json"})
                ok = 400 <= r.status_code < 500 and _is_error_object(r)
                kinds.setdefault(case.name, set()).add(r.status_code)
                if not ok:
                    bad.append({"case": case.name, "status": r.status_code, "body": r.text[:300]})
                if (i + 1) % 50 == 0:
                    samples.append({"at": i + 1, "rss_mb": round(server.rss_mb(), 1)})
            not_200 = []
            for i in range(valid):
                body = serve_cases.valid(i)
                r = client.post(f"{root}/v1/chat/completions", json=body)
                if r.status_code != 200:
                    not_200.append({"i": i, "status": r.status_code, "body": r.text[:300]})
                if (i + 1) % 25 == 0:
                    samples.append({"at": malformed + i + 1, "rss_mb": round(server.rss_mb(), 1)})
            health = client.get(f"{root}/health").status_code
        alive = server.alive()
    rss = [s["rss_mb"] for s in samples]
    half = rss[len(rss) // 2:]
    append({"part": 3, "kind": "summary", "commit": rev, "date": time.strftime("%Y-%m-%d"), "model": SMALL,
            "malformed": malformed, "malformed_not_4xx_json": len(bad), "valid": valid,
            "valid_not_200": len(not_200), "alive": alive, "health": health,
            "rss_mb_first": rss[0], "rss_mb_after_malformed": samples[malformed // 50]["rss_mb"],
            "rss_mb_last": rss[-1], "rss_mb_max": max(rss),
            "rss_mb_second_half_spread": round(max(half) - min(half), 1),
            "prefix_cache_mb": prefix_mb, "statuses_by_case": {k: sorted(v) for k, v in kinds.items()},
            "failures": bad[:20] + not_200[:20], "loadavg": loadavg(), "samples": samples})


# ---- part 4: tool calls valid under their schemas -------------------------------------------

def part4(rev: str, n: int = 50) -> None:
    import jsonschema

    if recorded(4, rev):
        print("part 4: recorded for", rev)
        return
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in serve_cases.TOOLS}
    rows, invalid = [], []
    with ours("tools", "-m", SMALL, env=NO_DISK_CACHE).wait() as server:
        for i in range(n):
            body = serve_cases.tool_request(i)
            r = httpx.post(f"{server.url}/chat/completions", json=body, timeout=600)
            calls = (r.json()["choices"][0]["message"].get("tool_calls") or []) if r.status_code == 200 else []
            for c in calls:
                name, args = c["function"]["name"], c["function"]["arguments"]
                problem = None
                if name not in schemas or name not in {t["function"]["name"] for t in body["tools"]}:
                    problem = f"unknown tool {name}"
                else:
                    try:
                        jsonschema.validate(json.loads(args), schemas[name])
                    except (ValueError, jsonschema.ValidationError) as e:
                        problem = str(e)[:200]
                if problem:
                    invalid.append({"i": i, "name": name, "arguments": args, "problem": problem})
            rows.append({"i": i, "status": r.status_code, "choice": str(body.get("tool_choice")),
                         "tools": len(body["tools"]), "calls": len(calls),
                         "finish": r.json()["choices"][0]["finish_reason"] if r.status_code == 200 else None})
    total = sum(r["calls"] for r in rows)
    append({"part": 4, "kind": "summary", "commit": rev, "date": time.strftime("%Y-%m-%d"), "model": SMALL,
            "requests": n, "status_200": sum(r["status"] == 200 for r in rows), "calls": total,
            "calls_valid": total - len(invalid),
            "requests_with_calls": sum(r["calls"] > 0 for r in rows),
            "auto_requests": sum(r["choice"] == "auto" for r in rows),
            "auto_with_calls": sum(r["calls"] > 0 for r in rows if r["choice"] == "auto"),
            "goal_100pct": not invalid and total > 0, "invalid": invalid[:20], "loadavg": loadavg(),
            "rows": rows})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", type=int, action="append", choices=[1, 2, 3, 4])
    ap.add_argument("--force", action="store_true", help="run the parts even if recorded for this commit")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ks", default="3,4,6", help="mlx-lm's K values (default 3,4,6)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--tool-requests", type=int, default=50, help="part 4's requests (default 50)")
    ap.add_argument("--valid", type=int, default=500, help="part 3's valid requests (default 500)")
    ap.add_argument("--prefix-cache-mb", type=int, help="part 3's server prefix store budget")
    args = ap.parse_args()
    rev = commit() + ("-force" + time.strftime("%H%M%S") if args.force else "")
    for part in args.part or [1, 2, 3, 4]:
        if part == 1:
            part1(rev, args.rounds, [int(k) for k in args.ks.split(",")], args.max_tokens)
        else:
            if part == 3:
                part3(rev, valid=args.valid, prefix_mb=args.prefix_cache_mb)
            else:
                part4(rev, args.tool_requests) if part == 4 else part2(rev)
    return 0


if __name__ == "__main__":
    sys.exit(main())

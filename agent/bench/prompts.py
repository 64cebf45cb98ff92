"""`spec-agent bench spec --prompts FILE`: speculation measured on your own prompts.

Every configuration — plain decoding, prompt lookup, the draft model at each fixed K in
2..8, draft and lookup combined, and the product's `auto` — generates a reply to every prompt,
interleaved (each prompt runs the configurations in a rotated order, so machine noise hits all
alike), each in a fresh session so no configuration reads another's cache. Reported per
configuration: tokens per second end to end (prefill and first token included), mean accepted
tokens per round, acceptance rate, and how many replies equal plain decoding's. The
recommendation follows measured speed, with the rule that a draft model accepting fewer than
2.5 tokens a round is worth replacing or turning off; `--write-config` writes it to `.specrc`.

FILE: JSON lines, each `{"messages": [...]}` (what `spec-agent serve --record` writes) or a
bare list of chat messages, or plain text lines (each one user message).
"""

from __future__ import annotations

import json
import os
import sys
import time
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import ConfigError
from ..engine import LoadedModel, SamplingParams, Session, SpecSettings, make_speculator, render_chat

MAX_FILE_BYTES = 64 << 20
MAX_PROMPTS = 1000
DRAFT_KS = tuple(range(2, 9))
MIN_ACCEPTED = 2.5  # mean accepted tokens per round below which a draft model is not worth it
MIN_GAIN = 1.05  # speculation must beat plain by this much to be recommended
ROLES = ("system", "user", "assistant")


class PromptsError(ConfigError):
    """A prompts file that cannot be used (one line naming the file and line)."""


def read_prompts(path: Path) -> list[list[dict[str, str]]]:
    """The chat conversations in `path` (see the module's docstring)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise PromptsError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PromptsError(f"cannot read {path}: {e}") from None
    out: list[list[dict[str, str]]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        out.append(_conversation(line, f"{path}:{n}"))
        if len(out) > MAX_PROMPTS:
            raise PromptsError(f"{path}: more than {MAX_PROMPTS} prompts")
    if not out:
        raise PromptsError(f"{path}: no prompts")
    return out


def _conversation(line: str, where: str) -> list[dict[str, str]]:
    if not line.lstrip().startswith(("{", "[")):
        return [{"role": "user", "content": line}]
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise PromptsError(f"{where}: not JSON ({str(e)[:80]})") from None
    messages = doc.get("messages") if isinstance(doc, dict) else doc
    if not isinstance(messages, list) or not messages:
        raise PromptsError(f"{where}: expected {{\"messages\": [...]}} or a list of messages")
    for m in messages:
        if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
            raise PromptsError(f"{where}: each message needs a role ({', '.join(ROLES)}) and "
                               "text content")
    if messages[-1]["role"] == "assistant":
        raise PromptsError(f"{where}: the last message is the assistant's: nothing to answer")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


@dataclass
class Arm:
    """One configuration and what it measured."""

    name: str
    settings: SpecSettings | None  # None: plain decoding
    speculator: Any = None
    tokens: int = 0
    seconds: float = 0.0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    identical: int = 0
    replies: int = 0
    outputs: list[list[int]] = field(default_factory=list)

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def mean_accepted(self) -> float:
        return self.accepted / self.rounds if self.rounds else 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def uses_draft(self) -> bool:
        return self.settings is not None and self.settings.drafter in ("model", "combined")


def arms(cfg: Any, has_draft: bool) -> list[Arm]:
    """plain, lookup, draft@K for K in DRAFT_KS, combined and auto (those with a draft model
    only when there is one)."""
    base = SpecSettings.from_config(cfg)
    on = replace(base, speculation="on", tree="off")
    out = [Arm("plain", None), Arm("lookup", replace(on, drafter="lookup", num_draft_tokens=0))]
    if has_draft:  # fixed K: exactly K drafts a round, as mlx_lm.server's --num-draft-tokens
        out += [Arm(f"draft K={k}", replace(on, drafter="model", num_draft_tokens=k,
                                            draft_confidence=0.0)) for k in DRAFT_KS]
        out.append(Arm("combined", replace(on, drafter="combined", num_draft_tokens=0)))
    out.append(Arm("auto", replace(base, speculation="auto")))
    return out


def run(target: LoadedModel, draft: LoadedModel | None, prompts: list[list[dict[str, str]]],
        cfg: Any, max_tokens: int, progress=None) -> list[Arm]:
    """Every arm on every prompt, interleaved; the arms with their totals."""
    params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                            min_p=cfg.min_p, noise_seed=0 if cfg.temperature > 0 else -1)
    todo = arms(cfg, draft is not None)
    for arm in todo:
        if arm.settings is not None:
            arm.speculator = make_speculator(arm.settings, target, draft, warn=lambda m: None)
    rendered = [render_chat(target.tokenizer, p) for p in prompts]
    for arm in todo:  # warm-up: the first pass of each arm pays one-time costs
        Session(target, speculator=arm.speculator).complete(rendered[0][-64:], params=params,
                                                            max_tokens=4)
    for i, prompt in enumerate(rendered):
        order = todo[i % len(todo):] + todo[:i % len(todo)]
        for arm in order:
            session = Session(target, speculator=arm.speculator)
            start = time.perf_counter()
            done = session.complete(prompt, params=params, max_tokens=max_tokens)
            arm.seconds += time.perf_counter() - start
            s = done.stats
            arm.tokens += s.generated_tokens
            arm.rounds, arm.drafted, arm.accepted = (arm.rounds + s.rounds, arm.drafted + s.drafted,
                                                     arm.accepted + s.accepted)
            arm.outputs.append(done.tokens)
            if progress is not None:
                progress()
        plain = todo[0].outputs[-1]
        for arm in todo:
            arm.replies += 1
            arm.identical += arm.outputs[-1] == plain
    return todo


@dataclass(frozen=True)
class Advice:
    arm: str
    settings: dict[str, Any]  # config keys to set
    why: str


def recommend(results: list[Arm], greedy: bool = True, draft_model: str = "") -> Advice:
    """The fastest configuration, by the rules: at T=0 only those whose every reply equals
    plain decoding's; a draft model below MIN_ACCEPTED accepted tokens a round is not
    recommended (try another draft, or speculate without it); speculation that is not
    MIN_GAIN times plain's speed is turned off."""
    plain = results[0]
    notes = []
    ok = [a for a in results if not greedy or a.identical == a.replies]
    weak = [a for a in ok if a.uses_draft and a.mean_accepted < MIN_ACCEPTED]
    if weak:
        notes.append(f"the draft model accepts {max(a.mean_accepted for a in weak):.2f} tokens a "
                     f"round at best, below {MIN_ACCEPTED}: try another draft model")
    ok = [a for a in ok if a not in weak]
    best = max(ok, key=lambda a: a.tps)
    if best is plain or best.tps < MIN_GAIN * plain.tps:
        gain = best.tps / plain.tps if plain.tps else 0.0
        return Advice("plain", {"speculation": "off"}, "; ".join(
            [*notes, f"no configuration beats plain decoding by {MIN_GAIN:.2f}x "
                     f"(best {best.name}: {gain:.2f}x)"]))
    s = best.settings
    assert s is not None
    keys: dict[str, Any] = {"speculation": s.speculation, "drafter": s.drafter,
                            "num_draft_tokens": s.num_draft_tokens}
    if best.uses_draft and draft_model:
        keys["draft_model"] = draft_model
    if best.name.startswith("draft K="):
        keys["draft_confidence"] = 0.0
    return Advice(best.name, keys, "; ".join(
        [*notes, f"{best.name} is the fastest: {best.tps / plain.tps:.2f}x plain"]))


def report(results: list[Arm]) -> str:
    plain = results[0].tps
    lines = [f"{'configuration':14} {'tok/s':>7} {'x plain':>8} {'acc/round':>9} {'acceptance':>10} "
             f"{'= plain':>8}"]
    for a in results:
        spec = a.settings is not None
        lines.append(f"{a.name:14} {a.tps:7.2f} {a.tps / plain if plain else 0:7.2f}x "
                     f"{a.mean_accepted if spec else 0:9.2f} {a.acceptance if spec else 0:10.2f} "
                     f"{a.identical:>4}/{a.replies}")
    return "\n".join(lines)


def write_config(path: Path, keys: dict[str, Any]) -> None:
    """Set `keys` at the top level of the TOML file `path` (made if missing), replacing their
    lines where present and keeping every other line; ValueError when the file is not TOML."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path} is not valid TOML ({e}): not changed") from None
    lines = text.splitlines()
    top = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("[")), len(lines))
    for key, value in keys.items():
        new = f"{key} = {json.dumps(value) if isinstance(value, str) else value}"
        at = next((i for i in range(top) if lines[i].split("=", 1)[0].strip() == key), None)
        if at is None:
            lines.insert(top, new)
            top += 1
        else:
            lines[at] = new
    out = "\n".join(lines) + "\n"
    tomllib.loads(out)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(out, encoding="utf-8")
    os.replace(tmp, path)


def main(args, cfg) -> int:
    from tqdm import tqdm

    from .. import models

    prompts = read_prompts(Path(args.prompts))
    max_tokens = args.tokens or 128
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    target = models.load(cfg.model, device=cfg.device)
    draft = models.load(cfg.draft_model, device=cfg.device) if cfg.draft_model else None
    n_arms = len(arms(cfg, draft is not None))
    log(f"{len(prompts)} prompts x {n_arms} configurations, up to {max_tokens} tokens each "
        f"({target.name}{f' + draft {draft.name}' if draft else ', no draft model'})")
    with tqdm(total=len(prompts) * n_arms, file=sys.stderr, unit="reply",
              disable=not sys.stderr.isatty()) as bar:
        results = run(target, draft, prompts, cfg, max_tokens, progress=bar.update)
    advice = recommend(results, greedy=cfg.temperature <= 0, draft_model=cfg.draft_model)
    if args.json:
        print(json.dumps({
            "prompts": len(prompts), "max_tokens": max_tokens, "model": target.name,
            "draft_model": draft.name if draft else None,
            "configurations": [{"name": a.name, "tps": a.tps, "speedup_vs_plain": a.tps / results[0].tps,
                                "mean_accepted": a.mean_accepted, "acceptance_rate": a.acceptance,
                                "identical_to_plain": a.identical, "replies": a.replies,
                                "tokens": a.tokens, "seconds": a.seconds} for a in results],
            "recommendation": {"configuration": advice.arm, "settings": advice.settings,
                               "why": advice.why}}, indent=1))
    else:
        print(report(results))
        print(f"recommended: {advice.arm} ({advice.why}); in .specrc: "
              + ", ".join(f"{k} = {json.dumps(v)}" for k, v in advice.settings.items()))
    if getattr(args, "write_config", False):
        target_file = Path(getattr(args, "repo", None) or ".") / ".specrc"
        try:
            write_config(target_file, advice.settings)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--write-config: {e}") from None
        log(f"wrote {', '.join(advice.settings)} to {target_file}")
    return 0

"""`spec-agent bench grammar`: what grammar-constrained tool calls cost, and whether they hold.

For every built-in tool schema and a set of tricky schemas (nested objects, `$ref`, `anyOf`,
enums, patterns, nullable fields, bounded arrays), the model is asked for one call and
decodes it after `<tool_call>` under the tool-call grammar (agent/backends/grammar.py):
- `valid_rate`: calls that end with `</tool_call>` within the token budget, parse, and fit
  the schema (jsonschema), over all calls;
- `speculative_identical`: the same call decoded speculatively (prompt lookup plus the
  grammar's forced tokens) equals plain constrained decoding token for token;
- `forced_token_share`: tokens the grammar determined (free drafts) / tokens generated, in
  the speculative runs;
- `overhead_ratio`: the generated calls are fed again token by token (teacher forcing): each
  position runs one forward pass, then the unconstrained pick (argmax) and the constrained
  pick (mask, apply, argmax), each timed; ratio = (forward + constrained pick) / (forward +
  unconstrained pick) summed over all positions: the cost per token of constraining the
  same text. `mask_ms_per_token` is the constrained pick's extra time.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

MAX_CALL_TOKENS = 400

TRICKY: dict[str, dict[str, Any]] = {
    "nested_object": {
        "type": "object", "additionalProperties": False, "required": ["user"],
        "properties": {"user": {
            "type": "object", "additionalProperties": False, "required": ["name", "address"],
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 24},
                "address": {"type": "object", "additionalProperties": False,
                            "required": ["city", "zip"],
                            "properties": {"city": {"type": "string", "maxLength": 24},
                                           "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}}}}},
    "ref_defs": {
        "$defs": {"point": {"type": "object", "additionalProperties": False, "required": ["x", "y"],
                            "properties": {"x": {"type": "integer", "minimum": -999, "maximum": 999},
                                           "y": {"type": "integer", "minimum": -999, "maximum": 999}}}},
        "type": "object", "additionalProperties": False, "required": ["start", "end"],
        "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}}},
    "any_of": {
        "type": "object", "additionalProperties": False, "required": ["target"],
        "properties": {"target": {"anyOf": [{"type": "string", "maxLength": 30},
                                            {"type": "integer", "minimum": 0, "maximum": 1000}]}}},
    "enums": {
        "type": "object", "additionalProperties": False, "required": ["level", "color"],
        "properties": {"level": {"enum": ["debug", "info", "warning", "error"]},
                       "color": {"type": "string", "enum": ["red", "green", "blue"]}}},
    "patterns": {
        "type": "object", "additionalProperties": False, "required": ["version", "branch"],
        "properties": {"version": {"type": "string", "pattern": "^[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}$"},
                       "branch": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,20}$"}}},
    "nullable": {
        "type": "object", "additionalProperties": False, "required": ["limit", "note"],
        "properties": {"limit": {"type": ["integer", "null"], "minimum": 0, "maximum": 100},
                       "note": {"anyOf": [{"type": "string", "maxLength": 40}, {"type": "null"}]}}},
    "bounded_array": {
        "type": "object", "additionalProperties": False, "required": ["tags"],
        "properties": {"tags": {"type": "array", "minItems": 1, "maxItems": 4,
                                "items": {"type": "string", "minLength": 1, "maxLength": 12}}}},
}


@dataclass(frozen=True)
class Schema:
    name: str
    schema: dict[str, Any]
    description: str = ""


def schemas() -> dict[str, Schema]:
    from tools import TOOLS

    out = {name: Schema(name, t.schema, t.description) for name, t in TOOLS.items()}
    out.update({name: Schema(name, s, f"a test tool taking {name.replace('_', ' ')} arguments")
                for name, s in TRICKY.items()})
    return out


def call_prompt(lm: Any, tool: Schema) -> list[int]:
    """Chat prompt asking for one call of `tool`, ending with the opening `<tool_call>`."""
    from ..core.callformat import OPEN
    from ..engine import render_chat

    system = ("You call tools by writing <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.\n"
              f"Tool {tool.name}: {tool.description} Arguments schema: "
              f"{json.dumps(tool.schema, separators=(',', ':'))}")
    user = f"Call {tool.name} once with sensible example arguments."
    prompt = render_chat(lm.tokenizer, [{"role": "system", "content": system},
                                        {"role": "user", "content": user}])
    return prompt + list(lm.tokenizer.encode(OPEN, add_special_tokens=False))


def _constraint(lm: Any, ll_tok: Any, tool: Schema) -> Any:
    from ..backends.grammar import GrammarConstraint, tool_call_grammar

    return GrammarConstraint(ll_tok, tool_call_grammar({tool.name: tool}), lm.vocab_size)


def _decode(lm: Any, ll_tok: Any, tool: Schema, prompt: list[int], speculator: Any) -> tuple[list[int], str, Any]:
    from ..core.callformat import CLOSE
    from ..engine import Session

    done = Session(lm, speculator=speculator).complete(prompt, max_tokens=MAX_CALL_TOKENS, stop_strings=[CLOSE],
                                                        constraint=_constraint(lm, ll_tok, tool))
    return done.tokens, done.text, done.stats


def check_call(tool: Schema, text: str) -> str:
    """'' when `text` is a finished call of `tool` whose arguments fit its schema."""
    import jsonschema

    from ..core.callformat import CLOSE

    if not text.rstrip().endswith(CLOSE):
        return "unfinished (token budget)"
    try:
        obj = json.loads(text.rstrip()[: -len(CLOSE)])
        jsonschema.validate(obj["arguments"], tool.schema)
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        return f"not a call: {e}"
    except jsonschema.ValidationError as e:
        return f"schema: {e.message}"
    return "" if obj.get("name") == tool.name else "wrong tool name"


def teacher_forced(lm: Any, ll_tok: Any, tool: Schema, prompt: list[int], call: list[int]) -> tuple[float, float, float]:
    """(forward s, unconstrained pick s, constrained pick s) summed over `call`'s positions."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from ..engine import apply_mask, forward, prefill

    cache = make_prompt_cache(lm.model)
    prefill(lm.model, prompt[:-1], cache)
    constraint = _constraint(lm, ll_tok, tool)
    fwd = free = masked = 0.0
    prev = prompt[-1]
    for tok in call:
        t0 = time.perf_counter()
        logits = forward(lm.model, [prev], cache)
        mx.eval(logits)
        t1 = time.perf_counter()
        mx.argmax(logits, axis=-1).item()
        t2 = time.perf_counter()
        mx.argmax(apply_mask(logits, constraint.masks([])), axis=-1).item()
        constraint.consume([tok])
        t3 = time.perf_counter()
        fwd, free, masked = fwd + t1 - t0, free + t2 - t1, masked + t3 - t2
        prev = tok
    return fwd, free, masked


def run(lm: Any, log: Callable[[str], None]) -> dict[str, Any]:
    from ..backends.grammar import ll_tokenizer
    from ..engine import PromptLookup, SpecPolicy, Speculator

    ll_tok = ll_tokenizer(lm.tokenizer)
    rows, fwd, free, masked, n_tok = [], 0.0, 0.0, 0.0, 0
    for name, tool in schemas().items():
        prompt = call_prompt(lm, tool)
        plain, text, pstats = _decode(lm, ll_tok, tool, prompt, None)
        spec = Speculator(PromptLookup(), SpecPolicy(mode="on"))
        spec_toks, _, sstats = _decode(lm, ll_tok, tool, prompt, spec)
        problem = check_call(tool, text)
        f, u, c = teacher_forced(lm, ll_tok, tool, prompt, plain)
        fwd, free, masked, n_tok = fwd + f, free + u, masked + c, n_tok + len(plain)
        rows.append(dict(schema=name, builtin=name not in TRICKY, valid=not problem,
                         problem=problem, tokens=len(plain), identical=spec_toks == plain,
                         forced_tokens=sstats.forced_tokens, plain_tps=pstats.decode_tps,
                         speculative_tps=sstats.decode_tps, text=text[:300]))
        log(f"  {name:14} {'valid' if not problem else problem:28} {len(plain):4d} tokens, "
            f"forced {sstats.forced_tokens:3d}, identical {spec_toks == plain}")
    gen = sum(r["tokens"] for r in rows)
    return dict(
        model=lm.name, calls=len(rows), valid_rate=sum(r["valid"] for r in rows) / len(rows),
        overhead_ratio=(fwd + masked) / (fwd + free),
        mask_ms_per_token=(masked - free) / n_tok * 1000, forward_ms_per_token=fwd / n_tok * 1000,
        forced_token_share=sum(r["forced_tokens"] for r in rows) / gen if gen else 0.0,
        speculative_identical=all(r["identical"] for r in rows), schemas=rows)


def main(args, cfg) -> int:
    from .. import models

    lm = models.load(cfg.model, device=cfg.device)  # a model not pulled: one line, exit 2
    result = run(lm, lambda m: print(m, file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{result['calls']} calls: valid_rate {result['valid_rate']:.2f}, overhead_ratio "
          f"{result['overhead_ratio']:.3f} (mask {result['mask_ms_per_token']:.2f} ms/token, "
          f"forward {result['forward_ms_per_token']:.1f} ms/token), forced_token_share "
          f"{result['forced_token_share']:.2f}, speculative_identical "
          f"{result['speculative_identical']}")
    return 0

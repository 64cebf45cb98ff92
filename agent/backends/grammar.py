"""Grammar-constrained tool calls with llguidance: a `TokenConstraint` for the engine.

After the model writes `<tool_call>`, the agent continues under `tool_call_grammar(...)`: a
Lark grammar that only admits `{"name":...,"arguments":...}</tool_call>` whose arguments fit
the tool's JSON Schema (compact JSON, bounded strings). For `edit_file` the grammar also pins
each edit's `old` text to an exact, non-empty substring of the named file's current content
(llguidance's `substring_chunks`), so "old text not found" cannot happen for those files.
Two things remain for post-hoc validation: uniqueness of `old`, and later edits of one call
(the grammar sees the file before the call's first edit).

`GrammarConstraint` implements agent/engine/step.py's `TokenConstraint` protocol: K+1 masks
for a draft (rolled back afterwards), `consume`, `forced`, `done`. It never raises on a bad
token: it records the error and from then on allows only EOS, ending the generation.
This module does not run the model; agent/backends/local.py wires it into `Session.generate`.
The grammar text is engine-neutral (importing this module loads no mlx); only the masks
`GrammarConstraint` returns are MLX arrays, for the local backend.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.callformat import CLOSE
MAX_FILE_CHARS = 64_000  # files larger than this get no substring constraint
MAX_TOTAL_CHARS = 256_000  # and at most this much file text goes into one grammar
_WORD = re.compile(r"[A-Za-z0-9_]+|.", re.DOTALL)


def ll_tokenizer(tokenizer: Any):
    """An `LLTokenizer` for an mlx-lm `TokenizerWrapper` or a fast HF tokenizer (~0.5 s: cache it)."""
    import llguidance.hf

    hf = getattr(tokenizer, "_tokenizer", tokenizer)
    return llguidance.hf.from_tokenizer(hf)


def _lit(text: str) -> str:
    """A Lark string literal matching `text` exactly."""
    return json.dumps(text, ensure_ascii=False)


def _json_rule(schema: dict) -> str:
    """A `%json` rule body for `schema`, compact: llguidance's JSON admits whitespace between
    tokens by default, and a small model can then spend its whole budget on blank lines."""
    return "%json " + json.dumps({**schema, "x-guidance": {"whitespace_flexible": False}})


def _json_escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


def substring_chunks(content: str) -> list[str]:
    """`content` cut into words and single characters, each JSON-escaped, so any run of
    chunks is the escaped form of a substring that starts and ends on a word boundary."""
    return [_json_escaped(m.group(0)) for m in _WORD.finditer(content)]


_OLD_OPEN, _OLD_CLOSE = _lit('{"old":"'), _lit('","new":')
_PATH_OPEN, _EDITS_KEY = _lit('{"path":'), _lit(',"edits":')


def _edit_rules(files: Mapping[str, str], generic: bool, edits_schema: dict, new_schema: dict) -> list[str]:
    """Rules for `edit_file`'s arguments: one alternative per file, `old` ⊂ that file."""
    max_edits = int(edits_schema.get("maxItems", 8))
    alts, rules = [], []
    for i, (path, content) in enumerate(files.items()):
        alts.append(f"edit_f{i}")
        head = _lit(json.dumps(path, ensure_ascii=False) + ',"edits":[')
        rules.append(f'edit_f{i}: {head} edit_e{i} ("," edit_e{i}){{0,{max_edits - 1}}} "]"')
        rules.append(f'edit_e{i}: {_OLD_OPEN} OLD{i} {_OLD_CLOSE} edit_new "}}"')
        chunks = json.dumps({"substring_chunks": substring_chunks(content)}, ensure_ascii=False)
        rules.append(f"OLD{i}: %regex {chunks} & /.+/")
    if generic or not files:
        alts.append("edit_any")
        rules.append(f"edit_any: edit_path {_EDITS_KEY} edit_list")
        rules.append(f"edit_path: {_json_rule({'type': 'string', 'minLength': 1, 'maxLength': 200})}")
        rules.append(f"edit_list: {_json_rule(edits_schema)}")
    rules.append(f"edit_new: {_json_rule(new_schema)}")
    return [f"edit_args: {_PATH_OPEN} ({' | '.join(alts)}) \"}}\""] + rules


def _rule_name(name: str) -> str:
    """`name` as a Lark rule name (lower case, digits, `_`): other characters, upper case
    letters included (MCP tools are named by their servers), become `_xHEX_`."""
    return re.sub(r"[^a-z0-9_]", lambda m: f"_x{ord(m.group()):x}_", name)


def tool_call_grammar(
    tools: Mapping[str, Any], files: Mapping[str, str] | None = None, generic_edit: bool = True
) -> str:
    """Lark grammar for one call's text after `<tool_call>`: JSON then `</tool_call>`.

    `tools` maps names to objects with a `.schema` (tools.Tool). With `files` (repo path →
    content), `edit_file`'s `old` strings are substrings of the named file; `generic_edit`
    keeps an unconstrained alternative for files not listed; without it (the listing is
    complete) `read_file` paths are limited to the listed files too."""
    alts, rules = [], []
    for name, tool in tools.items():
        head = _lit('{"name":' + json.dumps(name, ensure_ascii=False) + ',"arguments":')
        rule = _rule_name(name)
        alts.append(f"call_{rule}")
        if name == "edit_file" and files is not None:
            props = tool.schema["properties"]["edits"]
            item = props["items"]["properties"]
            rules.append(f'call_{rule}: {head} edit_args "}}"')
            rules += _edit_rules(files, generic_edit, props, item["new"])
        else:
            schema = tool.schema
            if name == "read_file" and files and not generic_edit:
                # The listing is complete: a path to read must be one of the repo's files.
                schema = json.loads(json.dumps(schema))
                schema["properties"]["path"] = {"enum": sorted(files)}
            rules.append(f'call_{rule}: {head} args_{rule} "}}"')
            rules.append(f"args_{rule}: {_json_rule(schema)}")
    top = [f'start: "\\n"? call "\\n"? {_lit(CLOSE)}', f"call: {' | '.join(alts)}"]
    return "\n".join(top + rules) + "\n"


def candidate_files(ctx: Any, prefer: Sequence[str] = ()) -> tuple[dict[str, str], bool]:
    """Repo text files for the substring constraint, `prefer`red ones first, within the size
    budget. Returns (files, complete): complete is False when some files were left out."""
    from tools.list_files import repo_files
    from tools.read_file import read_text
    from tools._paths import PathError, confine

    from ..engine.bounded import InputError, read_bytes

    names = repo_files(ctx)
    order = [p for p in prefer if p in set(names)] + [n for n in names if n not in set(prefer)]
    files: dict[str, str] = {}
    total, complete = 0, True
    for name in dict.fromkeys(order):
        try:
            data = read_bytes(confine(ctx.root, name), MAX_FILE_CHARS, follow=False)
        except InputError:  # too large, or a FIFO, device or link: never read here
            complete = False
            continue
        except (PathError, OSError):
            continue
        text = read_text(data)
        if text is None or not text:
            continue
        if total + len(text) > MAX_TOTAL_CHARS:
            complete = False
            continue
        files[name] = text
        total += len(text)
    return files, complete


class GrammarConstraint:
    """A `TokenConstraint` backed by an llguidance `LLMatcher`."""

    def __init__(self, ll_tok: Any, grammar: str, vocab_size: int):
        from llguidance import LLMatcher

        self.matcher = LLMatcher(ll_tok, grammar, log_level=0)
        self.n_ll = ll_tok.vocab_size
        self.vocab_size = max(vocab_size, self.n_ll)
        self.eos = ll_tok.eos_token
        self.error = self.matcher.get_error() if self.matcher.is_error() else ""

    def _rows(self, n: int) -> np.ndarray:
        import llguidance.numpy as lln

        return lln.allocate_token_bitmask(n, self.n_ll)

    def _fill(self, bitmask: np.ndarray, row: int) -> None:
        import llguidance.numpy as lln

        lln.fill_next_token_bitmask(self.matcher, bitmask, row)

    def _to_bool(self, bitmask: np.ndarray) -> Any:
        import mlx.core as mx

        bits = np.unpackbits(bitmask.view(np.uint8), axis=1, bitorder="little")[:, : self.n_ll]
        out = np.zeros((bitmask.shape[0], self.vocab_size), dtype=bool)  # model rows past the tokenizer: never
        out[:, : self.n_ll] = bits.astype(bool)
        return mx.array(out)

    def masks(self, draft: Sequence[int]) -> Any:
        """(len(draft)+1, V) allowed tokens: row i after `draft[:i]`; state unchanged after."""
        n = len(draft) + 1
        if self.error:
            only_eos = np.zeros((n, self.vocab_size), dtype=bool)
            only_eos[:, self.eos] = True
            import mlx.core as mx

            return mx.array(only_eos)
        bitmask = self._rows(n)  # starts all-allowed: rows after an invalid draft token stay so
        advanced = 0
        for i in range(n):
            self._fill(bitmask, i)
            if i == len(draft) or self.matcher.is_stopped():
                break
            if self.matcher.validate_tokens([int(draft[i])]) != 1:
                break
            self.matcher.consume_token(int(draft[i]))
            advanced += 1
        if advanced:
            self.matcher.rollback(advanced)
        return self._to_bool(bitmask)

    def consume(self, tokens: Sequence[int]) -> None:
        if self.error or not tokens:
            return
        toks = [int(t) for t in tokens]
        ok = self.matcher.validate_tokens(toks)
        if ok:
            self.matcher.consume_tokens(toks[:ok])
        if ok < len(toks) and not (self.matcher.is_stopped() and toks[ok] == self.eos):
            self.error = f"token {toks[ok]} is not allowed by the grammar"

    def forced(self) -> list[int]:
        if self.error or self.matcher.is_stopped():
            return []
        return list(self.matcher.compute_ff_tokens())

    def done(self) -> bool:
        return bool(self.error) or self.matcher.is_stopped()

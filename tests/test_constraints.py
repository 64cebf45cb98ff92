"""Grammar-constrained tool calls (llguidance): schema-valid calls, `old` ⊂ the file, masks."""

from __future__ import annotations

import dataclasses
import json

import mlx.core as mx
import pytest
from scripted import SAMPLE, git_repo  # noqa: F401

from agent.backends.grammar import GrammarConstraint, ll_tokenizer, tool_call_grammar
from agent.core.callformat import CLOSE, OPEN
from agent.core.callformat import parse_calls
from tools import TOOLS, ToolContext, validate

FILES = {"calc.py": SAMPLE["calc.py"]}


def small_edit_tool():
    """edit_file with short `new` strings, so a random model finishes quickly."""
    tool = TOOLS["edit_file"]
    schema = json.loads(json.dumps(tool.schema))
    schema["properties"]["edits"]["items"]["properties"]["new"]["maxLength"] = 12
    schema["properties"]["edits"]["maxItems"] = 2
    return {"edit_file": dataclasses.replace(tool, schema=schema)}


@pytest.fixture(scope="module")
def ll_tok(llama):
    return ll_tokenizer(llama.tokenizer)


def accepts(ll_tok, grammar: str, text: str, tokenizer) -> bool:
    c = GrammarConstraint(ll_tok, grammar, ll_tok.vocab_size)
    ids = tokenizer.encode(text, add_special_tokens=False)
    return c.matcher.validate_tokens(ids) == len(ids)


def test_grammar_admits_valid_calls_only(llama, ll_tok):
    g = tool_call_grammar(TOOLS, FILES, generic_edit=False)
    tok = llama.tokenizer
    edit = '{"name":"edit_file","arguments":{"path":"calc.py","edits":[{"old":"return a + b","new":"x"}]}}'
    assert accepts(ll_tok, g, edit + CLOSE, tok)
    assert accepts(ll_tok, g, '\n{"name":"read_file","arguments":{"path":"calc.py","start_line":2}}' + CLOSE, tok)
    assert accepts(ll_tok, g, '{"name":"git_status","arguments":{}}' + CLOSE, tok)
    assert not accepts(ll_tok, g, edit.replace("return a + b", "return a+b") + CLOSE, tok)  # not in file
    assert not accepts(ll_tok, g, edit.replace("return a + b", "") + CLOSE, tok)  # empty old
    assert not accepts(ll_tok, g, edit.replace("calc.py", "other.py") + CLOSE, tok)  # unknown file
    assert not accepts(ll_tok, g, '{"name":"read_file","arguments":{"path":"a","x":1}}', tok)
    assert not accepts(ll_tok, g, '{"name":"rm","arguments":{}}', tok)
    assert not accepts(ll_tok, g, '{"name":"read_file","arguments":{"path":"nope.py"}}' + CLOSE, tok)
    generic = tool_call_grammar(TOOLS, FILES, generic_edit=True)
    assert accepts(ll_tok, generic, edit.replace("calc.py", "other.py") + CLOSE, tok)
    assert accepts(ll_tok, generic, '{"name":"read_file","arguments":{"path":"nope.py"}}' + CLOSE, tok)


def test_old_text_with_escapes_is_matched_in_json_form(llama, ll_tok):
    files = {"q.py": 'print("hi")\n\tx = 1\n'}
    g = tool_call_grammar(small_edit_tool(), files, generic_edit=False)
    good = '{"name":"edit_file","arguments":{"path":"q.py","edits":[{"old":"print(\\"hi\\")\\n\\tx","new":""}]}}'
    assert accepts(ll_tok, g, good + CLOSE, llama.tokenizer)
    assert not accepts(ll_tok, g, good.replace('\\"hi', '"hi') + CLOSE, llama.tokenizer)


def test_masks_for_a_draft_match_step_by_step_and_roll_back(llama, ll_tok):
    g = tool_call_grammar(TOOLS, FILES, generic_edit=False)
    vocab = ll_tok.vocab_size + 40  # the model's embedding may be larger than the tokenizer
    c = GrammarConstraint(ll_tok, g, vocab)
    ids = llama.tokenizer.encode('{"name":"read_file","arguments":{"path":"calc.py"}}', add_special_tokens=False)
    draft = ids[:4]
    m = c.masks(draft)
    assert m.shape == (5, vocab) and m.dtype == mx.bool_
    assert not m[:, ll_tok.vocab_size:].any().item()
    assert all(m[i, draft[i]].item() for i in range(4))
    step = GrammarConstraint(ll_tok, g, vocab)
    for i in range(5):
        assert mx.array_equal(step.masks([])[0], m[i]).item()
        if i < 4:
            step.consume([draft[i]])
    assert mx.array_equal(c.masks([])[0], m[0]).item()  # masks() left the state where it was
    bad = [draft[0], llama.tokenizer.encode("zzz", add_special_tokens=False)[0]]
    assert not c.masks(bad)[1, bad[1]].item()
    c.consume(bad)
    assert c.error and c.done() and c.masks([]).sum().item() == 1  # only EOS from now on


def _constrained_text(session, constraint, params, max_tokens=600) -> tuple[str, str]:
    prompt = session.render([{"role": "user", "content": "Change add in calc.py to return a - b."}])
    prompt += session.tokenizer.encode(OPEN, add_special_tokens=False)
    done = session.complete(prompt, params=params, max_tokens=max_tokens, constraint=constraint,
                            stop_strings=[CLOSE])
    return done.text, done.stats.finish_reason


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_model_under_grammar_writes_a_valid_edit(llama, ll_tok, seed):
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session

    mx.random.seed(seed)
    tools = small_edit_tool()
    c = GrammarConstraint(ll_tok, tool_call_grammar(tools, FILES, generic_edit=False), llama.vocab_size)
    text, finish = _constrained_text(Session(llama), c, SamplingParams(temperature=1.0))
    assert finish == "stop_string" and text.endswith(CLOSE), text
    (parsed,) = parse_calls(OPEN + text)
    assert parsed.error == "" and parsed.name == "edit_file"
    for edit in parsed.arguments["edits"]:
        assert edit["old"] and edit["old"] in FILES["calc.py"]


def test_session_model_turn_free_then_constrained(llama, ll_tok, git_repo):
    """Phase 1 is steered to write `<tool_call>`; phase 2 must then produce a valid edit."""
    from agent.config import Config
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session
    from agent.events import AgentResult, GenerationStats, TextDelta, ToolCallStarted
    from agent.backends.local import LocalModel
    from agent.core.conversation import Conversation
    from llguidance import LLMatcher

    class OpensACall(Session):
        def generate(self, prompt, **kw):
            if kw.get("constraint") is None and OPEN in kw.get("stop_strings", ()):
                lark = LLMatcher.grammar_from_lark(f'start: "ok " {json.dumps(OPEN)} /.*/')
                kw["constraint"] = GrammarConstraint(ll_tok, lark, llama.vocab_size)
            return super().generate(prompt, **kw)

    ctx = ToolContext(git_repo, in_git=True)
    model = LocalModel(OpensACall(llama), SamplingParams(), 400, ctx, tools=small_edit_tool())
    events = list(model.generate([{"role": "user", "content": "edit calc.py"}]))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    (stats,) = [e for e in events if isinstance(e, GenerationStats)]
    assert text.startswith("ok " + OPEN) and text.endswith(CLOSE) and stats.finish_reason == "stop_string"
    assert stats.generated_tokens > len(llama.tokenizer.encode("ok " + OPEN, add_special_tokens=False))
    (parsed,) = parse_calls(text)
    content = SAMPLE[parsed.arguments["path"]]
    assert parsed.error == "" and all(e["old"] in content for e in parsed.arguments["edits"])
    agent = Conversation(model, ctx, Config(approval_mode="full-auto", max_turns=2))
    run = list(agent.send("edit calc.py"))
    assert isinstance(run[-1], AgentResult) and run[-1].num_turns == 2
    assert [e.name for e in run if isinstance(e, ToolCallStarted)] == ["edit_file", "edit_file"]


@pytest.mark.embedded
def test_embedded_model_under_grammar_writes_a_valid_edit(embedded, git_repo):
    """With only edit_file allowed, the real model's `old` texts come from the file."""
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session
    from agent.backends.local import LocalModel

    model = LocalModel(Session(embedded), SamplingParams(), 200, ToolContext(git_repo, in_git=True),
                         tools={"edit_file": TOOLS["edit_file"]})
    c = model.constraint([{"role": "user", "content": "Change add in calc.py to return a - b."}])
    assert json.dumps('"calc.py","edits":[') in model.last_grammar  # repo files are in the grammar
    text, finish = _constrained_text(model.session, c, SamplingParams(), max_tokens=200)
    assert finish == "stop_string", text
    (parsed,) = parse_calls(OPEN + text)
    assert parsed.error == "" and parsed.name == "edit_file"
    content = (git_repo / parsed.arguments["path"]).read_text()
    assert all(e["old"] in content for e in parsed.arguments["edits"])

"""The model's own tool format on the local backend: a chat template that takes `tools`
(Qwen2.5's, written into a small test tokenizer) gets the schemas through the template,
Hermes-style `<tool_call>` JSON calls under the grammar, results as `tool` messages, and an
append-only prompt; a template without tools (ChatML, like SmolLM2's) keeps the text format."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from scripted import SAMPLE, make_repo

from agent.backends.local import LocalModel, template_takes_tools
from agent.core.callformat import CLOSE, OPEN, parse_calls
from agent.events import GenerationStats, TextDelta, ToolCallFinished, ToolCallStarted
from tools import ToolContext

# Qwen2.5-Instruct's chat template, as published with the model (it is also the template
# inside Qwen2.5-Coder's GGUF files).
QWEN25_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory, qwen2_dir) -> Path:
    """The tiny random qwen2 model with Qwen2.5's chat template in its tokenizer config."""
    from transformers import AutoTokenizer

    d = tmp_path_factory.mktemp("qwen_tools")
    shutil.copytree(qwen2_dir, d, dirs_exist_ok=True)
    (d / "chat_template.jinja").unlink(missing_ok=True)
    tok = AutoTokenizer.from_pretrained(str(d))
    tok.chat_template = QWEN25_TEMPLATE
    tok.save_pretrained(str(d))
    return d


@pytest.fixture(scope="module")
def qwen(qwen_dir):
    from agent.engine.loading import load_model

    return load_model(str(qwen_dir), device="cpu")


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo", SAMPLE)


def local_model(lm, repo: Path, **kw) -> LocalModel:
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session

    return LocalModel(Session(lm), SamplingParams(), 120, ToolContext(repo, in_git=True), **kw)


def test_detects_templates_that_take_tools(qwen, llama):
    assert template_takes_tools(qwen.tokenizer)
    assert not template_takes_tools(llama.tokenizer)  # ChatML without tools: the text format


def test_schemas_go_through_the_template_and_results_as_tool_responses(qwen, llama, repo):
    from agent.core.conversation import Conversation
    from agent.config import Config

    model = local_model(qwen, repo)
    assert model.native_tools
    conv = Conversation(model, model.ctx, Config(approval_mode="full-auto"))
    system = conv.messages[0]["content"]
    assert "Tools:" not in system and OPEN not in system  # the template lists them instead
    call = OPEN + '\n{"name": "read_file", "arguments": {"path": "calc.py"}}\n' + CLOSE
    msgs = conv.messages + [
        {"role": "user", "content": "read calc.py"},
        {"role": "assistant", "content": "Reading. " + call},
        {"role": "user", "content": '<tool_result name="read_file" status="ok">\ndef add\n</tool_result>'}]
    text = qwen.tokenizer.decode(model.render(msgs))
    assert "# Tools" in text and '"name": "read_file"' in text and '"name": "edit_file"' in text
    assert "<|im_start|>assistant\nReading. " + call + "<|im_end|>" in text  # as the model wrote it
    assert "<|im_start|>user\n<tool_response>\ndef add\n</tool_response><|im_end|>" in text
    text_model = local_model(llama, repo)
    assert not text_model.native_tools
    assert "<tool_response>" not in llama.tokenizer.decode(text_model.render(msgs))


def test_prompt_is_append_only_across_turns(qwen, repo):
    model = local_model(qwen, repo)
    call = OPEN + '{"name":"git_status","arguments":{}}' + CLOSE
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "status?"}]
    turns = [("Checking. " + call, '<tool_result name="git_status" status="ok">\nclean\n</tool_result>'),
             ("It is clean.", "thanks; now list files")]
    for reply, then in turns:
        before = model.render(history)
        produced = qwen.tokenizer.encode(reply + "<|im_end|>", add_special_tokens=False)
        history += [{"role": "assistant", "content": reply}, {"role": "user", "content": then}]
        after = model.render(history)
        assert after[:len(before) + len(produced)] == before + produced


def test_calls_in_qwen_syntax_parse():
    text = 'Sure.\n<tool_call>\n{"name": "grep", "arguments": {"pattern": "def "}}\n</tool_call>'
    (c,) = parse_calls(text)
    assert c.error == "" and c.name == "grep" and c.arguments == {"pattern": "def "}


@pytest.mark.parametrize("tool", ["read_file", "git_status"])
def test_grammar_constrains_the_call_in_the_native_format(qwen, repo, tool):
    """A random model forced to call (tool_choice=required) writes a schema-valid call."""
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session
    from tools import TOOLS

    model = LocalModel(Session(qwen), SamplingParams(), 200, ToolContext(repo, in_git=True),
                       tools={tool: TOOLS[tool]}, tool_choice="required")
    assert model.native_tools
    events = list(model.generate([{"role": "system", "content": "s"},
                                  {"role": "user", "content": "look around"}]))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    (stats,) = [e for e in events if isinstance(e, GenerationStats)]
    assert text.startswith(OPEN) and text.endswith(CLOSE), text
    (c,) = parse_calls(text)
    assert c.error == "" and c.name == tool, (c.error, text)
    assert "# Tools" in qwen.tokenizer.decode(model.session.tokens)  # the prompt had the schemas


def test_conversation_round_trip_on_the_native_format(qwen, repo):
    """Two turns under the template: a forced call, its result as a tool response, an answer."""
    from agent.config import Config
    from agent.core.conversation import Conversation
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session

    model = LocalModel(Session(qwen), SamplingParams(), 60, ToolContext(repo, in_git=True),
                       tools=None, tool_choice="first")
    conv = Conversation(model, model.ctx, Config(approval_mode="full-auto", max_turns=2))
    events = list(conv.send("look around"))
    assert len([e for e in events if isinstance(e, ToolCallStarted)]) >= 1
    assert all(e.output for e in events if isinstance(e, ToolCallFinished))
    prompt = qwen.tokenizer.decode(model.session.tokens)
    assert "<tool_response>\n" in prompt  # the second turn read the result the template's way


@pytest.mark.parametrize("reply", [
    '{"name": "read_file", "arguments": {"path": "calc.py"}}',
    '```json\n{"name": "read_file", "parameters": {"path": "calc.py"}}\n```',  # Llama 3.x style
])
def test_a_bare_call_object_is_a_call(reply):
    from agent.core.callformat import strip_calls

    (c,) = parse_calls(reply)
    assert c.error == "" and c.name == "read_file" and c.arguments == {"path": "calc.py"}
    assert strip_calls(reply) == ""


@pytest.mark.parametrize("reply", [
    '{"name": "Ada", "arguments": {}}',  # not a tool
    'Here it is: {"name": "read_file", "arguments": {"path": "a"}}',  # prose around it
    '{"name": "read_file", "arguments": {"path": "a"}',  # not JSON
])
def test_other_json_replies_stay_text(reply):
    from agent.core.callformat import strip_calls

    assert parse_calls(reply) == [] and strip_calls(reply) == reply.strip()


@pytest.mark.parametrize("which", ["qwen", "llama"])
def test_a_lead_begins_the_reply_and_the_model_goes_on_after_it(which, qwen, llama, repo):
    """`generate(..., lead=...)` streams the lead (without its last token, which the model
    writes itself) first, then exactly what the model decodes after the prompt with those
    tokens appended (greedy: token for token)."""
    from agent.engine.session import Session

    lm = {"qwen": qwen, "llama": llama}[which]
    model = local_model(lm, repo)
    prompts = []
    real = model.session.generate

    def spy(prompt, **kw):
        prompts.append(list(prompt))
        return real(prompt, **kw)

    model.session.generate = spy
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "write calc.py"}]
    lead = "calc.py\n```python\ndef add(a, b):"
    ids = lm.tokenizer.encode(lead, add_special_tokens=False)
    events = list(model.generate(msgs, lead=lead))
    assert prompts == [model.render(msgs) + ids[:-1]]
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert deltas[0].text == lm.tokenizer.decode(ids[:-1]) and lead.startswith(deltas[0].text)
    assert deltas[0].tokens == () and len(deltas[0].text) < len(lead)
    stats = [e for e in events if isinstance(e, GenerationStats)]
    assert len(stats) == 1 and stats[0].generated_tokens > 0
    tokens = [t for d in deltas[1:] for t in d.tokens]
    plain = [t for e in Session(lm).generate(prompts[0], max_tokens=120, stop_strings=[OPEN])
             if isinstance(e, TextDelta) for t in e.tokens]
    assert tokens == plain[:len(tokens)] and len(tokens) > 0


def test_a_call_after_a_lead_is_decoded_after_the_lead_and_the_text(llama, repo):
    """A led reply that opens a call: the call is decoded (under the grammar) after the
    prompt, the lead and the text before the call, as any reply's call."""
    from dataclasses import replace

    from scripted import fake_stats

    model = local_model(llama, repo)
    calls = []

    def stream(prompt, out, cancel, params, *args, **kw):
        out += ["see ", OPEN, replace(fake_stats(), finish_reason="stop_string")]
        yield from ()

    def call(messages, prompt, text, stats, cancel, params):
        calls.append((prompt, text))
        yield from ()

    model._stream, model._call = stream, call
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    list(model.generate(msgs, lead="x.py\n```python\nimport os"))
    head = model._lead("x.py\n```python\nimport os")[0]
    assert calls == [(model.render(msgs), head + "see " + OPEN)]

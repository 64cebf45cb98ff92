"""What a backend declares (agent/core/backend.py `Capabilities`) and sampling passed per call
(`Sampling`): the backends' records, the conversation reading them instead of probing the
model, and a resample that leaves the backend's own settings as they were."""

from __future__ import annotations

import ast
from pathlib import Path

from agent.core.backend import Capabilities, Sampling
from agent.events import Warning
from scripted import ScriptedModel, conversation, full_auto, git_repo  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
CODE = "calc.py\n```python\ndef add(a, b):\n    return a - b\n```\n"


def test_the_core_reads_capabilities_and_never_probes_the_model():
    """No `getattr(<...model...>, ...)` in agent/core or agent/runtime.py: what a backend can
    do is its `capabilities` record."""
    found = []
    for path in [*sorted((ROOT / "agent" / "core").glob("*.py")), ROOT / "agent" / "runtime.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args
                    and "model" in ast.unparse(node.args[0])):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_a_backend_that_declares_no_sampling_is_never_resampled(git_repo):
    """ScriptedModel declares nothing (its generate takes no `sampling=`): a repeated reply
    with resample_temperature on stands, and no call is given sampling."""
    model = ScriptedModel([CODE, CODE])
    assert model.capabilities == Capabilities()
    conv = conversation(git_repo, model, full_auto(edit_format="whole", resample_temperature=0.7,
                                                   fix_mode="resample"))
    list(conv.send("change add"))
    events = list(conv.send("again"))
    assert not any(isinstance(e, Warning) and "sampling it again" in e.message for e in events)


def test_the_server_backend_takes_sampling_per_request_and_declares_what_it_can():
    from agent.backends.openai import ApiOptions, OpenAIBackend

    backend = OpenAIBackend(ApiOptions("http://127.0.0.1:9/v1", "m", temperature=0.2))
    try:
        caps = backend.capabilities
        assert (caps.leads, caps.sampling, caps.count_tokens) == (False, False, None)
        assert caps.native_tools and caps.label == backend.label
        msgs = [{"role": "user", "content": "hi"}]
        plain = backend.body(msgs)
        assert plain["temperature"] == 0.2 and "seed" not in plain
        sampled = backend.body(msgs, Sampling(0.7, 1234))
        assert (sampled["temperature"], sampled["seed"]) == (0.7, 1234)
        assert backend.opts.temperature == 0.2  # the backend's own settings are as they were
    finally:
        backend.close()


def test_the_local_backend_declares_leads_sampling_and_its_window(llama, tmp_path):
    from agent.backends.local import LocalModel
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session
    from tools import ToolContext

    own = SamplingParams(0.0, top_p=0.9)
    model = LocalModel(Session(llama), own, 120, ToolContext(tmp_path))
    caps = model.capabilities
    assert caps.leads and caps.sampling and caps.reply_reserve == 120
    assert caps.context_limit == model.session.context_limit > 0
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}]
    assert caps.count_tokens(msgs) == len(model.render(msgs))
    turn = model._params(Sampling(0.7, 5))
    assert (turn.temperature, turn.top_p) == (0.7, 0.9) and model.params is own
    assert model._params(None) is own

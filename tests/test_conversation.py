"""The conversation core: history across messages, usage, cancel tokens, approvals with
"always" and previews, sources and live progress from the engine, warm == cold after a cancel."""

from __future__ import annotations

import threading

import pytest
from scripted import INTERRUPT, ScriptedModel, call, conversation, full_auto, git_repo  # noqa: F401

from agent.cancel import CancelToken
from agent.config import Config
from agent.core.conversation import NOT_RUN, Conversation
from agent.events import (AgentResult, DecodeProgress, PrefillProgress, RunStopped,
                          TextDelta, ToolCallFinished, TurnStats)

EDIT = call("edit_file", path="calc.py", edits=[{"old": "return a + b", "new": "return b + a"}])
EDIT2 = call("edit_file", path="calc.py", edits=[{"old": "return a - b", "new": "return b - a"}])


def result(events) -> AgentResult:
    assert isinstance(events[-1], AgentResult) and isinstance(events[-2], RunStopped)
    return events[-1]


def test_history_and_usage_span_messages(git_repo):
    model = ScriptedModel([call("read_file", path="calc.py"), "It adds.", "Yes, sub too."])
    conv = conversation(git_repo, model)
    first = result(list(conv.send("what does calc.py do?")))
    second = result(list(conv.send("and sub?")))
    assert (first.result, second.result) == ("It adds.", "Yes, sub too.")
    # the third model call saw the whole first exchange, then the new message
    roles = [m["role"] for m in model.seen[2]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert model.seen[2][-1]["content"] == "and sub?"
    assert first.usage["model_turns"] == 2 and second.usage["model_turns"] == 1
    assert conv.usage.as_dict()["model_turns"] == 3 and conv.usage.tool_calls == 1


def test_cancelled_message_keeps_history_well_formed(git_repo):
    model = ScriptedModel([INTERRUPT, "Fine."])
    conv = conversation(git_repo, model)
    cancelled = result(list(conv.send("start something", CancelToken())))
    assert cancelled.stop_reason == "cancelled" and cancelled.is_error
    assert conv.messages[-1] == {"role": "assistant", "content": "Partial"}
    answer = result(list(conv.send("never mind")))
    assert answer.stop_reason == "answered" and answer.result == "Fine."


def test_cancel_between_calls_answers_every_call(git_repo):
    """Calls after the cancel are not run, but each gets a result, so the history stays valid."""
    cancel = CancelToken()
    two = call("read_file", path="calc.py") + call("run_shell", command="touch ran.txt")
    conv = conversation(git_repo, ScriptedModel([two]))
    events = []
    for ev in conv.send("go", cancel):
        events.append(ev)
        if isinstance(ev, ToolCallFinished):
            cancel.cancel()
    assert result(events).stop_reason == "cancelled"
    assert not (git_repo / "ran.txt").exists()
    last = conv.messages[-1]["content"]
    assert last.count("<tool_result") == 2 and NOT_RUN in last


def test_always_covers_its_scope_but_never_destructive_commands(git_repo):
    asked = []

    def approver(req):
        asked.append(req)
        return "always"

    turns = [EDIT, EDIT2, call("run_shell", command="rm -f nothing.txt"),
             call("run_shell", command="rm -f other.txt"), call("run_shell", command="rm -rf ."), "ok"]
    conv = conversation(git_repo, ScriptedModel(turns), Config(approval_mode="suggest"), approver)
    list(conv.send("edit twice"))
    kinds = [(r.name, r.scope, r.can_always) for r in asked]
    assert kinds == [("edit_file", "edits", True), ("run_shell", "shell:rm", True),
                     ("run_shell", "shell:rm", False)]
    assert "return b + a" in (git_repo / "calc.py").read_text()
    assert "return b - a" in (git_repo / "calc.py").read_text()


def test_approval_preview_is_the_diff_before_anything_is_written(git_repo):
    seen = {}

    def approver(req):
        seen["preview"] = req.preview
        seen["file"] = (git_repo / "calc.py").read_text()
        return "no"

    conv = conversation(git_repo, ScriptedModel([EDIT, "ok"]), Config(approval_mode="suggest"), approver)
    list(conv.send("swap"))
    assert "-    return a + b" in seen["preview"] and "+    return b + a" in seen["preview"]
    assert "return a + b" in seen["file"]  # not yet applied while asking
    assert "return a + b" in (git_repo / "calc.py").read_text()  # and "no" kept it so


def test_shell_preview_names_the_command_and_directory(git_repo):
    seen = []
    conv = conversation(git_repo, ScriptedModel([call("run_shell", command="ls -la"), "ok"]),
                        Config(approval_mode="suggest"), lambda r: seen.append(r) or "yes")
    list(conv.send("list"))
    assert seen[0].preview == f"$ ls -la\n(in {git_repo.resolve()})"


# ---- the real engine: cancel tokens, sources, progress --------------------------------------


def _local(lm, root, speculator=None, max_tokens=48):
    from agent.backends.local import LocalModel
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session
    from tools import ToolContext

    session = Session(lm, speculator=speculator)
    ctx = ToolContext(root)
    return LocalModel(session, SamplingParams(), max_tokens, ctx, constrain=False), ctx


def _texts(events):
    return "".join(e.text for e in events if isinstance(e, TextDelta))


@pytest.mark.parametrize("speculate", [False, True])
def test_cancel_mid_generation_then_next_message_equals_cold(pair, git_repo, speculate):
    from agent.engine.drafters import DraftModel
    from agent.engine.speculative import SpecPolicy, Speculator

    target, draft = pair
    spec = Speculator(DraftModel(draft), SpecPolicy(mode="on", fixed_k=3)) if speculate else None
    model, ctx = _local(target, git_repo, spec)
    cfg = full_auto(max_turns=1)
    warm = Conversation(model, ctx, cfg)
    cancel = CancelToken()
    events = []
    for ev in warm.send("write something long", cancel):
        events.append(ev)
        if isinstance(ev, TextDelta) and len(events) > 4:
            cancel.cancel()
    assert result(events).stop_reason == "cancelled"
    (stats,) = [e.stats for e in events if isinstance(e, TurnStats)]
    assert stats.finish_reason == "cancelled" and stats.generated_tokens < 48
    session = model.session
    assert session.tcache.offset <= len(session.tokens)
    history = list(warm.messages)
    warm_next = _texts(list(warm.send("and then?")))
    cold_model, _ = _local(target, git_repo)
    cold = Conversation(cold_model, ctx, cfg, messages=history)
    assert _texts(list(cold.send("and then?"))) == warm_next


def test_cancel_before_prefill_leaves_session_clean(llama):
    from agent.engine.session import Session

    s = Session(llama, prefill_chunk=4)
    prompt = s.render([{"role": "user", "content": "a prompt long enough for several chunks"}])
    cancel = CancelToken()
    cancel.cancel()
    events = list(s.generate(prompt, max_tokens=10, cancel=cancel))
    assert events[-1].finish_reason == "cancelled" and events[-1].generated_tokens == 0
    assert not any(isinstance(e, (TextDelta, PrefillProgress)) for e in events)
    assert s.tcache.offset <= len(s.tokens)


def test_sources_and_progress_from_the_engine(pair, monkeypatch):
    import agent.engine.session as session_mod
    from agent.engine.drafters import DraftModel
    from agent.engine.session import Session
    from agent.engine.speculative import SpecPolicy, Speculator

    monkeypatch.setattr(session_mod, "PROGRESS_EVERY_S", 0.0)
    target, draft = pair
    s = Session(target, speculator=Speculator(DraftModel(draft), SpecPolicy(mode="on", fixed_k=4)))
    prompt = s.render([{"role": "user", "content": "sources"}])
    events = list(s.generate(prompt, max_tokens=40, stop_tokens=set()))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    sources = [x for e in deltas for x in e.sources]
    assert set(sources) <= {"target", "draft"} and "draft" in sources and "target" in sources
    assert all(f == (x != "target") for e in deltas for f, x in zip(e.from_draft, e.sources))
    progress = [e for e in events if isinstance(e, DecodeProgress)]
    stats = events[-1]
    assert progress and progress[-1].speculation == "on" and progress[-1].k == 4
    assert [p.generated for p in progress] == sorted(p.generated for p in progress)
    assert progress[-1].accepted <= stats.accepted and progress[-1].context_tokens <= stats.context_tokens
    assert all(p.tps >= 0 for p in progress) and progress[-1].context_limit == stats.context_limit


def test_cancel_from_another_thread_stops_decoding(llama):
    from agent.engine.session import Session

    s = Session(llama)
    prompt = s.render([{"role": "user", "content": "go on forever"}])
    cancel = CancelToken()
    timer = threading.Timer(0.3, cancel.cancel)
    timer.start()
    events = list(s.generate(prompt, max_tokens=100_000, stop_tokens=set(), cancel=cancel))
    timer.join()
    assert events[-1].finish_reason == "cancelled" and events[-1].generated_tokens < 100_000
    assert s.tcache.offset <= len(s.tokens)


def test_conversation_is_saved_from_its_first_message_and_resumes(git_repo, tmp_path):
    from agent.core.history import HistoryStore
    from agent.runtime import Runtime

    store = HistoryStore(git_repo, home=tmp_path / "home")
    rt = Runtime(full_auto(), git_repo, model=ScriptedModel(["One.", "Two."]), history=store)
    conv = rt.new_conversation()
    assert store.latest() is None  # nothing said yet: nothing to resume
    list(conv.send("first"))
    assert store.latest() == conv.id
    rt2 = Runtime(full_auto(), git_repo, model=ScriptedModel(["Three."]), history=store)
    resumed = rt2.resume("last")
    assert resumed.id == conv.id and resumed.messages == conv.messages
    list(resumed.send("again"))
    assert store.load(conv.id)[-2:] == [{"role": "user", "content": "again"},
                                        {"role": "assistant", "content": "Three."}]


def test_commit_names_the_summary_not_the_attached_files(git_repo):
    from scripted import git

    conv = conversation(git_repo, ScriptedModel([EDIT, "ok"]))
    list(conv.send("swap it\n\nAttached files:\n<file path=\"calc.py\">...</file>", summary="swap it"))
    subject = git(git_repo, "log", "-1", "--format=%s").strip()
    assert subject == "spec-agent: swap it"


def test_always_for_a_program_does_not_cover_a_compound_command(git_repo):
    """"always" for `ls` approves later `ls` commands (prefixes and variables aside), never a
    command that also runs something else."""
    asked = []

    def approver(req):
        asked.append(req.arguments["command"])
        return "always" if req.arguments["command"] == "ls" else "no"

    turns = [call("run_shell", command="ls"), call("run_shell", command="FOO=1 ls -la"),
             call("run_shell", command="ls && touch x.txt"), call("run_shell", command="echo $(touch y.txt)"),
             call("run_shell", command="$CMD"), "ok"]
    conv = conversation(git_repo, ScriptedModel(turns), Config(approval_mode="suggest"), approver)
    list(conv.send("look around"))
    assert asked == ["ls", "ls && touch x.txt", "echo $(touch y.txt)", "$CMD"]
    assert not (git_repo / "x.txt").exists() and not (git_repo / "y.txt").exists()


def test_scopes_name_every_program():
    from agent.core.preview import describe_scope, scope_of, scope_keys

    scope = scope_of("shell", {"command": "env X=1 nohup pytest -q | tail -3"})
    assert scope == "shell:pytest,tail" and scope_keys(scope) == ["shell:pytest", "shell:tail"]
    assert describe_scope(scope) == "`pytest`, `tail` commands"
    assert scope_of("shell", {"command": "bash -c 'anything'"}) == ""  # unknowable: no "always"
    assert scope_of("edit", {"path": "x"}) == "edits"

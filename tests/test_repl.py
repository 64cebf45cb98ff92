"""The plain REPL driven without a terminal: a scripted model in a temp git repo, output to a
string, approvals typed through `ask`; one run of the terminal view on a pipe input."""

from __future__ import annotations

import _thread
import io
import signal
import threading
import time
from dataclasses import replace

import pytest
from prompt_toolkit.document import Document
from scripted import INTERRUPT, ScriptedModel, call, fake_stats, full_auto, git, git_repo  # noqa: F401

from agent.config import Config
from agent.events import DecodeProgress, PrefillProgress, TextDelta
from agent.runtime import Runtime
from agent.ui.repl import Repl, ReplCompleter, live_consumer, prompt_session
from agent.ui.repl_text import CallFilter, Meter, Transcript, history_summary

EDIT = call("edit_file", path="calc.py", edits=[{"old": "return a + b", "new": "return b + a"}])
EDIT_SUB = call("edit_file", path="calc.py", edits=[{"old": "return a - b", "new": "return -b + a"}])


class Recorder(io.StringIO):
    """An output stream that remembers each write (to see text arrive in pieces)."""

    def __init__(self):
        super().__init__()
        self.writes: list[str] = []
        self.changed = threading.Condition()

    def write(self, s: str) -> int:
        with self.changed:
            self.writes.append(s)
            self.changed.notify_all()
        return super().write(s)

    def wait_for(self, text: str, timeout: float = 5.0) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: text in self.getvalue(), timeout), self.getvalue()


def make(root, turns, cfg=None, answers=(), model=None):
    model = model or ScriptedModel(list(turns))
    rt = Runtime(cfg or full_auto(), root, model=model)
    typed = list(answers)
    asked: list[str] = []

    def ask(question: str) -> str:
        asked.append(question)
        return typed.pop(0)

    repl = Repl(rt, Recorder(), ask=ask)
    repl.start()
    repl.asked = asked
    return repl


@pytest.fixture
def repls():
    made: list[Repl] = []
    yield made
    for r in made:
        r.close()


def test_a_prompt_streams_the_answer(git_repo, repls):
    first_shown = threading.Event()

    class Slow(ScriptedModel):  # the second half waits until the first half is on screen
        def generate(self, messages, cancel=None):
            self.seen.append(messages)
            yield TextDelta("The answer ", ())
            assert first_shown.wait(5)
            yield TextDelta("is 42.", ())
            yield fake_stats(generated=5)

    repl = make(git_repo, [], model=Slow([]))
    repls.append(repl)
    watcher = threading.Thread(target=lambda: (repl.out.wait_for("The answer"), first_shown.set()))
    watcher.start()
    result = repl.handle_line("what is the answer?")
    watcher.join()
    out = repl.out.getvalue()
    assert result is True and "The answer is 42." in out
    assert "The answer " in repl.out.writes and "is 42." in repl.out.writes  # in pieces, as generated
    assert "decode 10.0 tok/s" in out  # the one-line summary after the message
    assert repl.rt.conversation.messages[-1] == {"role": "assistant", "content": "The answer is 42."}


def test_the_meter_shows_the_engine_figures():
    m = Meter(model="smollm2", draft="lookup", mode="suggest", branch="main", dirty=2)
    m.update(PrefillProgress(64, 256))
    assert m.status() == "prefill 64/256"
    m.update(DecodeProgress(generated=42, tps=23.5, elapsed_s=1.0, drafted=30, accepted=20, rounds=10,
                            k=4, speculation="on", reason="", context_tokens=900, context_limit=8192))
    text = m.text()
    for figure in ("decoding 42 tok", "23.5 tok/s", "accept 67% 2.00/round", "K=4 spec on",
                   "ctx 900/8192", "smollm2 + lookup", "suggest", "main (2 dirty)"):
        assert figure in text, (figure, text)
    m.update(replace(fake_stats(generated=12, prompt=300, cached=240), context_tokens=312,
                     context_limit=8192))
    text = m.text()
    assert "24.0 tok/s" in text and "cache 240/300" in text and "ctx 312/8192" in text
    assert "accept 50% 1.50/round" in text  # fake_stats: 6 of 12 drafted tokens in 4 rounds


def test_the_toolbar_after_a_message(git_repo, repls):
    class Figures(ScriptedModel):
        def generate(self, messages, cancel=None):
            yield DecodeProgress(3, 17.0, 0.2, 6, 3, 2, 3, "on", "", 120, 2048)
            yield TextDelta("ok", ())
            yield replace(fake_stats(generated=20, prompt=120, cached=96), context_tokens=122,
                          context_limit=2048)

    repl = make(git_repo, [], model=Figures([]))
    repls.append(repl)
    repl.handle_line("hi")
    text = repl.meter.text()
    assert "40.0 tok/s" in text and "cache 96/120" in text and "ctx 122/2048" in text
    assert "accept 50% 1.50/round" in text and "full-auto" in text and "main" in text
    from prompt_toolkit.application import create_app_session
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        toolbar = prompt_session(repl).bottom_toolbar()
    shown = "".join(t for _, t in toolbar)
    assert "40.0 tok/s" in shown and "Esc-Enter or Ctrl+J new line" in shown


@pytest.mark.parametrize("answer", ["y", "n"])
def test_approval_yes_and_no(git_repo, repls, answer):
    repl = make(git_repo, [EDIT, "Done."], Config(approval_mode="suggest"), answers=[answer])
    repls.append(repl)
    repl.handle_line("swap the operands")
    out = repl.out.getvalue()
    assert "edit_file wants to edit a file" in out and "+    return b + a" in out  # the diff to be made
    assert repl.asked == ["Allow edit_file? [y]es / [n]o / [a]lways (all file edits) "]
    edited = "return b + a" in (git_repo / "calc.py").read_text()
    assert edited is (answer == "y")
    if answer == "n":
        assert "did not approve" in repl.rt.conversation.messages[-2]["content"]


def test_approval_always_does_not_ask_again(git_repo, repls):
    repl = make(git_repo, [EDIT, EDIT_SUB, "Done."], Config(approval_mode="suggest"), answers=["what", "a"])
    repls.append(repl)
    repl.handle_line("change both")
    assert len(repl.asked) == 2 and "answer y or n or a" in repl.out.getvalue()  # one bad answer
    text = (git_repo / "calc.py").read_text()
    assert "return b + a" in text and "return -b + a" in text  # the second edit was not asked


def test_slash_commands(git_repo, repls):
    repl = make(git_repo, [EDIT, "Swapped."])
    repls.append(repl)
    out = repl.out
    assert repl.handle_line("/help") and "Commands:" in out.getvalue() and "/undo" in out.getvalue()
    repl.handle_line("swap them")
    assert "return b + a" in (git_repo / "calc.py").read_text()
    repl.handle_line("/diff")
    assert "spec-agent's last commit" in out.getvalue()
    repl.handle_line("/undo")
    assert "return a + b" in (git_repo / "calc.py").read_text()
    first = repl.rt.conversation
    repl.handle_line("/clear")
    assert repl.rt.conversation is not first and "─" * 60 in out.getvalue()
    assert repl.rt.conversation.approver == repl._approve  # approvals still come to the REPL
    repl.handle_line("/nope")
    assert "error: unknown command /nope" in out.getvalue()
    assert repl.handle_line("/quit") is False


def test_shell_command_adds_a_note(git_repo, repls):
    repl = make(git_repo, [])
    repls.append(repl)
    repl.handle_line("!echo hi")
    note = repl.rt.conversation.messages[-1]
    assert note["role"] == "user" and "`echo hi`" in note["content"] and "hi" in note["content"]
    assert "hi\n(exit code 0; output added to the conversation)" in repl.out.getvalue()


def test_mentions_are_attached(git_repo, repls):
    repl = make(git_repo, ["Seen."])
    repls.append(repl)
    repl.handle_line("look at @calc.py")
    assert "(attached calc.py (" in repl.out.getvalue()  # with its size
    assert '<file path="calc.py">' in repl.rt.model.seen[0][-1]["content"]


def test_completion_for_slash_and_at(git_repo):
    ctx = Runtime(full_auto(), git_repo, model=ScriptedModel([])).ctx
    comp = ReplCompleter(ctx)

    def texts(line):
        return [c.text for c in comp.get_completions(Document(line), None)]

    assert texts("/he") == ["/help"] and "/quit" in texts("/")
    assert texts("/help me") == []
    assert texts("look at @calc")[0] == "@calc.py" and texts("@READ")[0] == "@README.md"
    assert texts("mail me@calc") == []


def test_a_cancelled_message_keeps_the_conversation_usable(git_repo, repls):
    repl = make(git_repo, [INTERRUPT, "Fine."])
    repls.append(repl)
    repl.handle_line("start something")
    assert "(cancelled)" in repl.out.getvalue()
    repl.handle_line("try again")
    assert "Fine." in repl.out.getvalue()
    roles = [(m["role"], m["content"]) for m in repl.rt.conversation.messages[1:]]
    assert roles == [("user", "start something"), ("assistant", "Partial"), ("user", "try again"),
                     ("assistant", "Fine.")]


def test_ctrl_c_while_generating_cancels(git_repo, repls, request):
    class Waits(ScriptedModel):  # decodes until cancelled, as the engine does between rounds
        def generate(self, messages, cancel=None):
            if len(self.seen) > 0:
                yield from super().generate(messages, cancel)
                return
            self.seen.append(messages)
            yield TextDelta("Working", ())
            deadline = time.monotonic() + 10
            while not cancel.cancelled and time.monotonic() < deadline:
                time.sleep(0.01)
            yield replace(fake_stats(generated=1), finish_reason="cancelled")

    repl = make(git_repo, [], model=Waits(["Again."]))
    repls.append(repl)
    # interrupt_main does nothing while SIGINT is ignored, as it is for a job started in the
    # background (`cmd &`, nohup): give this test Python's own handler, as a terminal has.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    threading.Thread(target=lambda: (repl.out.wait_for("Working"), _thread.interrupt_main())).start()
    repl.handle_line("go")  # the Ctrl+C (SIGINT's KeyboardInterrupt) arrives here
    assert "(cancelling…)" in repl.out.getvalue() and "(cancelled)" in repl.out.getvalue()
    repl.handle_line("again")
    assert repl.rt.conversation.messages[-1] == {"role": "assistant", "content": "Again."}


def test_ctrl_c_twice_within_two_seconds_leaves():
    now = [100.0]
    repl = Repl(Runtime.__new__(Runtime), io.StringIO(), clock=lambda: now[0])
    try:
        assert repl.interrupted() is False
        now[0] += 3.0
        assert repl.interrupted() is False  # too late: counts as a first one again
        now[0] += 1.5
        assert repl.interrupted() is True
    finally:
        repl.close()


def test_models_load_and_run_on_one_thread(git_repo):
    threads = []

    class Recording(ScriptedModel):
        def generate(self, messages, cancel=None):
            threads.append(threading.get_ident())
            yield from super().generate(messages, cancel)

    rt = Runtime(full_auto(), git_repo)
    rt.load = lambda: (threads.append(threading.get_ident()), setattr(rt, "model", Recording(["Hi."])))
    repl = Repl(rt, io.StringIO())
    try:
        repl.start()
        repl.handle_line("hello")
    finally:
        repl.close()
    assert repl.out.getvalue().startswith(f"loading {Config().model}…\n")
    assert len(threads) == 2 and threads[0] == threads[1] != threading.get_ident()


def test_resume_prints_a_summary(git_repo, tmp_path, repls):
    from agent.core.history import HistoryStore

    store = HistoryStore(git_repo, home=tmp_path / "home")
    model = ScriptedModel(["Fixed it.\n" + EDIT, "Done."])
    first = Runtime(full_auto(), git_repo, model=model, history=store)
    list(first.new_conversation().send("fix the bug"))
    rt = Runtime(full_auto(), git_repo, model=ScriptedModel([]), history=store)
    rt.resume("last")
    repl = Repl(rt, io.StringIO())
    repls.append(repl)
    repl.start()
    out = repl.out.getvalue()
    assert out == history_summary(rt.conversation)
    assert f"resumed conversation {first.conversation.id}: 3 earlier messages" in out
    assert "you  : fix the bug" in out and "agent: Fixed it." in out and "agent: Done." in out


def test_tool_call_markup_is_not_streamed():
    f = CallFilter()
    pieces = ["Let me look.<tool", "_call>{\"name\": ", "\"read_file\"}</tool_", "call> after"]
    assert "".join(f.feed(p) for p in pieces) + f.flush() == "Let me look. after"
    t = Transcript()
    assert t.render(TextDelta("a < b <", ())) + t.calls.flush() == "a < b <"


def test_terminal_view_streams_and_takes_keys(git_repo, repls):
    """The live view (prompt-toolkit application) on a pipe input: 'y' answers an approval."""
    from prompt_toolkit.application import create_app_session
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    model = ScriptedModel(["Editing.\n" + EDIT, "Done."])
    rt = Runtime(Config(approval_mode="suggest"), git_repo, model=model)
    repl = Repl(rt, Recorder(), live=live_consumer)
    repls.append(repl)
    repl.start()
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        def answer():
            deadline = time.monotonic() + 10
            while repl.meter.phase != "waiting for approval" and time.monotonic() < deadline:
                time.sleep(0.02)
            pipe.send_text("y")

        threading.Thread(target=answer).start()
        repl.handle_line("swap")
    out = repl.out.getvalue()
    assert "Editing.\n" in out and "Allow" not in out  # the question lives in the view, not the log
    assert "+    return b + a" in out and "→ yes" in out and "Done." in out
    assert "return b + a" in (git_repo / "calc.py").read_text()


def test_prompt_keys_enter_sends_ctrl_j_adds_a_line(git_repo, repls, tmp_path, monkeypatch):
    from prompt_toolkit.application import create_app_session
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path / "home"))
    repl = make(git_repo, [])
    repls.append(repl)
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        session = prompt_session(repl)
        pipe.send_text("typed ahead\n")  # Enter typed before the prompt: the tty turned it into \n
        assert session.prompt(pre_run=session.mark_shown) == "typed ahead"

        def type_slowly():
            time.sleep(0.5)
            for keys in ("one", "\n", "two", "\x1b\r", "three", "\r"):  # Ctrl+J, Esc-Enter, Enter
                pipe.send_text(keys)
                time.sleep(0.05)

        threading.Thread(target=type_slowly).start()
        assert session.prompt(pre_run=session.mark_shown) == "one\ntwo\nthree"
    assert (tmp_path / "home" / "repl_history").is_file()


def test_destructive_commands_offer_no_always(git_repo, repls):
    rm = call("run_shell", command="rm -rf ../elsewhere")  # outside the repo: never "always"
    repl = make(git_repo, [rm, "Left it."], Config(approval_mode="suggest"), answers=["a", "n"])
    repls.append(repl)
    repl.handle_line("clean up")
    out = repl.out.getvalue()
    assert "destructive command" in out and "$ rm -rf ../elsewhere" in out and "answer y or n\n" in out
    assert repl.asked == ["Allow run_shell? [y]es / [n]o "] * 2

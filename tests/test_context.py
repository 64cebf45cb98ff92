"""Context the user can see and control: what the agent attaches beyond the message is listed
with sizes, budgeted and never docs by default; `/context`, `/add`, `/drop`; a cancel acts
within one prefill chunk (a fixed schedule of chunk sizes) and leaves the caches consistent."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from scripted import INTERRUPT, ScriptedModel, full_auto, make_repo  # noqa: E402

from agent.cancel import CancelToken  # noqa: E402
from agent.core import context  # noqa: E402
from agent.core.attach import AUTO_ATTACH_TOKENS, attach, is_doc  # noqa: E402
from agent.events import ContextAttached, GenerationStats, TextDelta, Warning  # noqa: E402
from tools import ToolContext  # noqa: E402

SPECIAL = "PRE_TRANSLATIONS = [('Ю', 'U')]\n\n\ndef lookup(word):\n    return dict(PRE_TRANSLATIONS).get(word)\n"
USER = "from slug.special import PRE_TRANSLATIONS\n\n\ndef slugify(text):\n    return PRE_TRANSLATIONS and text\n"
BIG = "# PRE_TRANSLATIONS again\n" + "X = 1\n" * 4000
DOC = "Uses `PRE_TRANSLATIONS` from special.py.\n" + "Long prose about PRE_TRANSLATIONS.\n" * 200


@pytest.fixture
def slug_repo(tmp_path) -> Path:
    """A package laid out like python-slugify's: code, and docs/metadata that mention its names."""
    return make_repo(tmp_path / "slug", {
        "slug/__init__.py": "", "slug/special.py": SPECIAL, "slug/slugify.py": USER,
        "slug/big.py": BIG,
        "README.md": DOC, "CHANGELOG.md": DOC, "PKG-INFO": DOC, "docs/usage.rst": DOC,
        "slug.egg-info/PKG-INFO": DOC, "requirements.txt": "PRE_TRANSLATIONS\n",
        "poetry.lock": DOC,
    })


def ctx(root: Path) -> ToolContext:
    return ToolContext(root, in_git=True)


# ---- what attach adds, shown and budgeted --------------------------------------------------


def test_docs_and_metadata_are_never_attached_or_searched_unless_named(slug_repo):
    got = attach("Fix @slug/special.py: PRE_TRANSLATIONS maps Ю wrong", ctx(slug_repo), plain=True)
    assert got.paths == ["slug/special.py", "slug/slugify.py"]
    assert [p for p, _ in got.left_out] == ["slug/big.py"]  # 20k characters: over 4096 tokens
    for doc in ("README.md", "CHANGELOG.md", "PKG-INFO", "docs/usage.rst", "poetry.lock",
                "slug.egg-info/PKG-INFO", "requirements.txt"):
        assert is_doc(doc)
        assert f'<file path="{doc}">' not in got.text and f"\n{doc}:" not in got.text
    assert not is_doc("slug/special.py") and not is_doc("docs/conf.py")
    named = attach("Fix the typo in README.md about PRE_TRANSLATIONS", ctx(slug_repo), plain=True)
    assert "README.md" in named.paths  # typed by the user: attached


def test_files_found_through_names_stay_inside_the_budget_and_the_rest_is_listed(slug_repo):
    got = attach("Fix @slug/special.py: PRE_TRANSLATIONS", ctx(slug_repo), plain=True, budget=200)
    assert got.paths == ["slug/special.py", "slug/slugify.py"]  # @path is never budgeted
    assert [p for p, _ in got.left_out] == ["slug/big.py"]
    ev = got.event()
    assert isinstance(ev, ContextAttached) and isinstance(ev, Warning)  # every UI shows it
    assert "slug/slugify.py (" in ev.message and "slug/big.py (" in ev.message
    assert "not attached (over the 200-token budget" in ev.message
    assert dict(ev.added)["slug/slugify.py"] == len(USER)
    json.dumps(ev.to_dict())  # stream-json writes it as a system event
    from agent.ui.render import Renderer

    for fmt in ("text", "events"):
        out, err = io.StringIO(), io.StringIO()
        Renderer(fmt, out, err).handle(ev)
        if fmt == "text":
            assert err.getvalue() == f"context: {ev.message}\n" and not out.getvalue()
        else:
            line = json.loads(out.getvalue())
            assert line["type"] == "context_attached" and line["left_out"] == [list(got.left_out[0])]
            assert line["left_out"][0][0] == "slug/big.py" and line["budget"] == 200
    assert AUTO_ATTACH_TOKENS == full_auto().auto_attach_tokens == 4096


def test_the_first_message_lists_its_listing_and_lookups_with_sizes(slug_repo):
    got = attach("What does PRE_TRANSLATIONS hold?", ctx(slug_repo), plain=True, listing=True)
    labels = [w for w, _ in got.extras]
    assert labels[0] == "file listing" and any("names occur" in w for w in labels)
    assert "file listing (" in got.event().message and "tokens in all" in got.event().message
    assert attach("hello", ctx(slug_repo)).event() is None  # nothing added, nothing shown


def test_every_ui_gets_the_listing_from_the_conversation(slug_repo):
    from scripted import conversation

    conv = conversation(slug_repo, ScriptedModel(["ok"]), full_auto(attach_mentioned=True,
                                                                   auto_attach_tokens=200))
    events = list(conv.send("Fix PRE_TRANSLATIONS in slug/special.py"))
    shown = [e for e in events if isinstance(e, ContextAttached)]
    assert shown and "slug/big.py" in dict(shown[0].left_out)


# ---- /context, /add, /drop -----------------------------------------------------------------


class CountingModel(ScriptedModel):
    """A scripted model with a token counter (characters / 4, plus 3 a message) and a window."""

    context_limit, reply_reserve = 8192, 256

    def count_tokens(self, messages):
        return sum(3 + len(m["content"]) // 4 for m in messages) + 2


def runtime(root: Path, model):
    from agent.runtime import Runtime

    rt = Runtime(full_auto(), root, model=model)
    rt.new_conversation()
    return rt


def test_context_lists_each_item_with_tokens_against_the_window(slug_repo):
    from agent.ui import slash

    rt = runtime(slug_repo, CountingModel(["Done."]))
    list(rt.conversation.send("look at this\n\nAttached files:\n<file path=\"slug/special.py\">\n"
                              + SPECIAL + "\n</file>"))
    out = slash.run(rt, "/context")
    assert not out.error
    lines = out.text.splitlines()
    assert lines[0].startswith("context: ") and "of 8192" in lines[0] and "~" not in lines[0]
    assert any(line.endswith("system prompt") for line in lines)
    assert any("#1 user: look at this" in line for line in lines)
    assert any(line.strip().endswith("slug/special.py") for line in lines)
    assert any("#2 assistant: Done." in line for line in lines)
    total = int(lines[0].split()[1])
    assert total == rt.conversation.model.count_tokens(rt.conversation.messages)


def test_add_attaches_files_and_drop_takes_them_out_of_what_the_model_reads(slug_repo):
    from agent.ui import slash

    model = CountingModel(["one", "two"])
    rt = runtime(slug_repo, model)
    conv = rt.conversation
    assert "added slug/special.py" in slash.run(rt, "/add slug/spec*.py").text
    assert slash.run(rt, "/add @slug/special.py").text.startswith("already in the context")
    assert slash.run(rt, "/add nope.py").error
    list(conv.send("explain it"))
    assert SPECIAL in model.seen[0][1]["content"]
    saved = [m["content"] for m in conv.messages]
    reply = slash.run(rt, "/drop slug/special.py")
    assert reply.text == "dropped slug/special.py"
    list(conv.send("and now?"))
    seen = "\n".join(m["content"] for m in model.seen[1])
    assert SPECIAL not in seen and "slug/special.py: " in seen and "dropped from the context" in seen
    assert [m["content"] for m in conv.messages[:len(saved)]] == saved  # the history keeps it
    assert slash.run(rt, "/drop slug/special.py").error  # nothing left to drop
    assert slash.run(rt, "/drop").error and slash.run(rt, "/add").error


def test_a_cancelled_message_can_be_dropped_from_context(slug_repo):
    from agent.ui import slash

    model = CountingModel(["first answer", INTERRUPT, "fresh"])
    rt = runtime(slug_repo, model)
    conv = rt.conversation
    list(conv.send("first question"))
    cancel = CancelToken()
    list(conv.send("a long question I regret", cancel))
    assert cancel.cancelled
    reply = slash.run(rt, "/drop last")
    assert "a long question I regret" in reply.text and not reply.error
    list(conv.send("another question"))
    seen = [m["content"] for m in model.seen[-1]]
    assert "a long question I regret" not in "\n".join(seen) and "Partial" not in "\n".join(seen)
    assert "first question" in seen[1] and context.WITHDRAWN in seen
    roles = [m["role"] for m in model.seen[-1]]
    assert roles == [m["role"] for m in conv.messages[:len(roles)]]  # the history's shape
    assert slash.run(rt, "/drop last").text.startswith("dropped the last message ('another")


def test_context_commands_without_a_conversation_say_so(slug_repo):
    from agent.runtime import Runtime
    from agent.ui import slash

    rt = Runtime(full_auto(), slug_repo, model=ScriptedModel([]))
    for line in ("/context", "/add slug/special.py", "/drop all"):
        assert slash.run(rt, line).error


# ---- cancel within one prefill chunk -------------------------------------------------------


class Clock:
    """A clock a patched prefill advances by `per_token` seconds a token fed."""

    def __init__(self, per_token: float):
        self.now, self.per_token = 0.0, per_token

    def perf_counter(self) -> float:
        return self.now


def slow_prefill(monkeypatch, clock: Clock, fed: list[int], after=None):
    import agent.engine.session as session_mod

    real = session_mod.prefill

    def prefill(model, tokens, cache, chunk=512):
        real(model, tokens, cache, chunk=chunk)
        fed.append(len(tokens))
        clock.now += len(tokens) * clock.per_token
        if after is not None:
            after(len(fed))

    monkeypatch.setattr(session_mod, "prefill", prefill)
    monkeypatch.setattr(session_mod, "time", clock)


def long_prompt(lm):
    from agent.engine.session import Session

    prompt = Session(lm).render([{"role": "user", "content": "value = compute(1, 2)\n" * 120}])
    assert len(prompt) > 700
    return prompt


@pytest.mark.parametrize("per_token", [0.02, 0.0002])
def test_prefill_chunks_follow_the_schedule_not_the_clock(llama, monkeypatch, per_token):
    """On a CPU each chunk is the schedule's size for its context position, the last one what
    is left (never longer than a chunk); a slow or a fast clock changes nothing."""
    from agent.engine.session import Session, chunk_at

    clock, fed = Clock(per_token), []
    slow_prefill(monkeypatch, clock, fed)
    prompt = long_prompt(llama)
    events = list(Session(llama).generate(prompt, max_tokens=1))
    assert isinstance(events[-1], GenerationStats) and sum(fed) == len(prompt) - 1
    assert llama.device == "cpu"
    at, want = 0, []
    while at < len(prompt) - 1:
        want.append(min(chunk_at(at, "cpu", 512), len(prompt) - 1 - at))
        at += want[-1]
    assert fed == want and len(fed) > 2


def test_the_cpu_schedule_shrinks_chunks_as_the_context_grows():
    """A chunk's time grows with its position (attention reads every earlier key): the CPU
    chunk shrinks so that each takes about as long, in multiples of 8, never below 16."""
    from agent.engine.session import chunk_at

    sizes = [chunk_at(pos, "cpu", 512) for pos in range(0, 40000, 256)]
    assert sizes == sorted(sizes, reverse=True) and all(n % 8 == 0 and 16 <= n <= 96 for n in sizes)
    assert [chunk_at(p, "cpu", 512) for p in (0, 4096, 8192, 16384, 1 << 20)] == [96, 48, 32, 16, 16]
    assert chunk_at(0, "cpu", 40) == 40 and chunk_at(0, "gpu", 512) == 512 and chunk_at(1 << 20, "gpu", 512) == 512


def test_a_gpu_prefills_in_chunks_of_prefill_chunk(llama, monkeypatch):
    import dataclasses

    from agent.engine.session import Session

    fed: list[int] = []
    slow_prefill(monkeypatch, Clock(0.0), fed)
    prompt = long_prompt(llama)
    list(Session(dataclasses.replace(llama, device="gpu"), prefill_chunk=256).generate(prompt, max_tokens=1))
    assert set(fed[:-1]) == {256} and 0 < fed[-1] <= 256 and sum(fed) == len(prompt) - 1


class RecordingStore:
    """A prefix store that never has a prefix and records what it is handed."""

    def __init__(self):
        self.inserted: list[int] = []

    def key_for(self, lm, kv_bits=0):
        return "k"

    def fetch_nearest(self, key, tokens, have):
        return None, 0

    def insert(self, key, tokens, cache, kind="turn"):
        self.inserted.append(len(tokens))


def test_a_cancel_during_prefill_acts_after_that_chunk_and_leaves_caches_consistent(llama, monkeypatch):
    from agent.engine.session import Session

    prompt = long_prompt(llama)
    cold = [t for e in Session(llama).generate(prompt, max_tokens=8, stop_tokens=set())
            if isinstance(e, TextDelta) for t in e.tokens]
    cancel, store = CancelToken(), RecordingStore()
    clock, fed = Clock(0.02), []
    slow_prefill(monkeypatch, clock, fed, after=lambda n: n == 2 and cancel.cancel())  # Esc in chunk 2
    s = Session(llama, store=store)
    events = list(s.generate(prompt, max_tokens=8, stop_tokens=set(), cancel=cancel))
    assert len(fed) == 2 and events[-1].finish_reason == "cancelled"
    assert not any(isinstance(e, TextDelta) for e in events)
    assert store.inserted == []  # a prompt cut short is not stored
    kept = sum(fed)
    assert s.tcache.consistent() and s.tcache.offset == kept  # whole chunks: a prefix
    warm = list(s.generate(prompt, max_tokens=8, stop_tokens=set()))
    assert warm[-1].cached_tokens == kept  # the fed chunks are reused ...
    assert [t for e in warm if isinstance(e, TextDelta) for t in e.tokens] == cold  # ... soundly
    assert store.inserted  # a finished turn is stored as before


def _greedy_and_cache(lm, prompt, chunk: int = 0):
    from agent.engine.session import Session

    s = Session(lm, prefill_chunk=chunk)
    toks = [t for e in s.generate(prompt, max_tokens=12, stop_tokens=set())
            if isinstance(e, TextDelta) for t in e.tokens]
    n = s.tcache.offset  # (the buffers behind the cache grow in steps: compare what is used)
    return toks, [a[..., :n, :] for c in s.tcache.cache for a in (c.keys, c.values)]


def test_chunked_prefill_is_deterministic_and_gives_the_tokens_of_one_chunk(llama, monkeypatch):
    """The chunks give the greedy tokens of one prefill of the whole prompt and keys and values
    equal to it within float rounding (a BLAS kernel may pick its blocking by row count); two
    runs under different clocks give the same chunks and caches to the last bit."""
    import mlx.core as mx

    prompt = long_prompt(llama)
    whole, whole_cache = _greedy_and_cache(llama, prompt, chunk=1 << 20)
    runs = []
    for per_token in (0.02, 0.0002):
        fed: list[int] = []
        with monkeypatch.context() as m:
            slow_prefill(m, Clock(per_token), fed)
            runs.append((fed, *_greedy_and_cache(llama, prompt)))
    (fed, chunked, chunked_cache), (fed2, chunked2, chunked_cache2) = runs
    assert len(fed) > 2 and fed == fed2 and chunked == chunked2 == whole and len(chunked) == 12
    assert len(chunked_cache) == len(whole_cache) > 0
    assert all(a.shape == b.shape and mx.array_equal(a, b).item()
               for a, b in zip(chunked_cache, chunked_cache2))
    assert all(a.shape == b.shape and mx.allclose(a, b, rtol=1e-4, atol=1e-4).item()
               for a, b in zip(chunked_cache, whole_cache))


def test_the_repl_shows_what_was_added_and_runs_the_context_commands(slug_repo):
    from test_repl import make

    model = CountingModel(["Seen.", "Again."])
    repl = make(slug_repo, [], full_auto(attach_mentioned=True), model=model)
    try:
        repl.handle_line("look at PRE_TRANSLATIONS in @slug/special.py")
        out = repl.out.getvalue()
        assert f"(attached slug/special.py ({len(SPECIAL)} chars))" in out
        # the file found through PRE_TRANSLATIONS, with its size, and the one over the budget
        assert "context: added to the message: " in out and f"slug/slugify.py ({len(USER)} chars)" in out
        assert "not attached (over the 4096-token budget" in out and "slug/big.py (" in out
        assert "README.md (" not in out and "PKG-INFO (" not in out  # never a doc
        repl.handle_line("/context")
        listed = repl.out.getvalue().split("\ncontext: ", 1)[1].splitlines()
        files = [line.split()[-1] for line in listed if line.startswith("  ") and
                 line.split()[-1].startswith("slug/")]
        assert files == ["slug/special.py", "slug/slugify.py"]  # the UI's @path, the agent's
        repl.handle_line("/drop slug/special.py")  # one file of the first run of blocks
        message = context.view(repl.rt.conversation)[1]["content"]
        assert SPECIAL not in message and f'<file path="slug/slugify.py">\n{USER}' in message
        assert "Files in the repository:" in message
        repl.handle_line("/add slug/big.py")
        assert "added slug/big.py (" in repl.out.getvalue()
        repl.handle_line("/drop slug/big.py")
        assert "dropped slug/big.py" in repl.out.getvalue()
        repl.handle_line("/drop last")
        assert "dropped the last message ('look at PRE_TRANSLATIONS in @slug/special.py')" in repl.out.getvalue()
        repl.handle_line("next")
        seen = "\n".join(m["content"] for m in model.seen[-1])
        assert SPECIAL not in seen and "X = 1" not in seen and context.WITHDRAWN in seen
    finally:
        repl.close()


def test_the_tui_shows_what_was_added_and_runs_the_context_commands(slug_repo):
    from test_tui import drive, say, screen_text, scripted_app

    model = CountingModel(["Read it.", "Again."])
    app = scripted_app(slug_repo, model, full_auto(attach_mentioned=True,
                                                                  auto_attach_tokens=0))

    async def scenario(pilot):
        await say(pilot, "what is PRE_TRANSLATIONS?")
        text = screen_text(app)
        assert "context: added to the message: file listing" in text
        assert "not attached (over the 0-token budget" in text  # auto_attach_tokens = 0
        assert '<file path="slug/' not in model.seen[0][-1]["content"]
        await say(pilot, "/add slug/spec*.py")
        assert "added slug/special.py" in screen_text(app)
        await say(pilot, "/context")
        assert "context: " in screen_text(app) and "of 8192" in screen_text(app)
        await say(pilot, "/drop all")
        assert "dropped slug/special.py" in screen_text(app)
        await say(pilot, "/drop nothing.py")
        assert "/drop: not attached: nothing.py" in screen_text(app)

    drive(app, scenario)

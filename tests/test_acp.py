"""`spec-agent acp` driven over real pipes by the ACP SDK's client side.

Most tests run the server on the scripted model (tests/acp_scripted.py: the same parsing,
config and server as `spec-agent acp`, only the model differs); the real-engine tests run
`python -m agent.cli acp` itself with a tiny random model, and with the embedded SmolLM2.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, image_block, spawn_agent_process, text_block
from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse
from scripted import SAMPLE, call, make_repo

from agent.core.attach import typed_text
from agent.core.history import HistoryStore

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "acp_scripted.py"
EDIT = call("edit_file", path="calc.py", edits=[{"old": "return a + b", "new": "return b + a"}])
TIMEOUT_S = 60


class Client:
    """An ACP client that records what the agent sends and answers permission requests
    with `answer`: "yes" | "always" | "no" (an option id), or "wait" (until cancelled)."""

    def __init__(self, answer: str = "yes") -> None:
        self.answer = answer
        self.updates: list[Any] = []
        self.asked: list[Any] = []
        self.chunk = asyncio.Event()
        self.asking = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update)
        if update.session_update == "agent_message_chunk":
            self.chunk.set()

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 **_: Any) -> RequestPermissionResponse:
        self.asked.append((tool_call, options))
        self.asking.set()
        if self.answer == "wait":
            await self.cancelled.wait()
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.answer))

    def of(self, kind: str) -> list[Any]:
        return [u for u in self.updates if u.session_update == kind]

    def text(self) -> str:
        return "".join(u.content.text for u in self.of("agent_message_chunk"))


@asynccontextmanager
async def serve(client: Client, argv: list[str], cwd: Path, home: Path,
                observers: list[Any] | None = None) -> AsyncIterator[tuple[Any, Any, Path]]:
    """Start an agent (`argv` after the Python interpreter) with its own home; yields the
    client connection, the process and the file its stderr goes to."""
    err_path = home / f"stderr-{len(list(home.glob('stderr-*')))}.txt"
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SPEC_AGENT_HOME=str(home))
    with err_path.open("w") as err:
        async with spawn_agent_process(client, sys.executable, *argv, env=env, cwd=cwd,
                                       transport_kwargs={"stderr": err},
                                       observers=observers or []) as (conn, proc):
            yield conn, proc, err_path


def scripted(tmp_path: Path, turns: list[str], *flags: str) -> list[str]:
    script = tmp_path / f"script-{len(list(tmp_path.glob('script-*')))}.json"
    script.write_text(json.dumps(turns))
    return [str(LAUNCHER), str(script), *flags]


async def start(conn: Any, repo: Path) -> str:
    init = await conn.initialize(protocol_version=1)
    assert init.protocol_version == 1 and init.agent_info.name == "spec-agent"
    assert init.agent_capabilities.load_session is True
    session = await conn.new_session(cwd=str(repo), mcp_servers=[])
    assert session.modes.current_mode_id == "suggest"
    assert [m.id for m in session.modes.available_modes] == ["suggest", "auto-edit", "full-auto"]
    return session.session_id


def run(coro: Any, timeout_s: float = TIMEOUT_S) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", SAMPLE)


def saved(repo: Path, home: Path, session_id: str) -> list[dict[str, str]]:
    return HistoryStore(repo, home=home).load(session_id)


# ---- a prompt streams ----------------------------------------------------------------------


def test_prompt_streams_chunks_and_figures(tmp_path, repo, caplog):
    answer = "Hello! calc.py defines add and sub; both take two numbers."
    client = Client()

    async def go() -> Any:
        async with serve(client, scripted(tmp_path, [answer]), repo, tmp_path / "home") as (conn, _, err):
            sid = await start(conn, repo)
            response = await conn.prompt(session_id=sid, prompt=[text_block("What is in calc.py?")])
            return sid, response, err

    with caplog.at_level(logging.WARNING):
        sid, response, err = run(go())
    chunks = client.of("agent_message_chunk")
    assert len(chunks) >= 2 and client.text() == answer  # streamed in pieces, nothing lost
    thoughts = "".join(u.content.text for u in client.of("agent_thought_chunk"))
    assert "context: added to the message: calc.py (66 chars)" in thoughts  # beside the answer
    assert response.stop_reason == "end_turn"
    assert response.usage.output_tokens > 0 and response.usage.cached_read_tokens == 80
    meta = response.field_meta["spec-agent"]
    assert meta["decode_tps"] > 0 and meta["acceptance_rate"] == 0.5 and meta["cache_hit_rate"] == 0.8
    usage = client.of("usage_update")
    assert usage and usage[-1].size == 2048 and 0 < usage[-1].used <= 2048
    assert usage[-1].field_meta["spec-agent"]["decode_tps"] > 0
    log = err.read_text()
    assert "serving" in log and "stray print from the model" in log and "stray write to fd 1" in log
    assert not [r for r in caplog.records if "pars" in r.getMessage().lower()]  # stdout stayed JSON
    assert [m["role"] for m in saved(repo, tmp_path / "home", sid)] == ["system", "user", "assistant"]


# ---- tool calls and permissions ---------------------------------------------------------------


@pytest.mark.parametrize("answer", ["yes", "no"])
def test_tool_call_round_trip_with_permission(tmp_path, repo, answer):
    client = Client(answer)
    before = (repo / "calc.py").read_text()

    async def go() -> Any:
        async with serve(client, scripted(tmp_path, [EDIT, "Done."]), repo, tmp_path / "home") as (conn, _, _e):
            sid = await start(conn, repo)
            return sid, await conn.prompt(session_id=sid, prompt=[text_block("swap the operands")])

    sid, response = run(go())
    assert response.stop_reason == "end_turn" and client.text().endswith("Done.")
    (tool_call, options), = client.asked
    assert [o.kind for o in options] == ["allow_once", "allow_always", "reject_once"]
    diff = tool_call.content[0]
    assert tool_call.kind == "edit" and diff.type == "diff" and diff.path == str(repo / "calc.py")
    assert diff.old_text == before and diff.new_text == before.replace("a + b", "b + a")
    started, = client.of("tool_call")
    finished, *after = client.of("tool_call_update")
    assert started.tool_call_id == finished.tool_call_id == tool_call.tool_call_id
    assert started.status == "pending" and started.content[0].new_text == diff.new_text
    history = saved(repo, tmp_path / "home", sid)
    if answer == "yes":
        assert finished.status == "completed" and (repo / "calc.py").read_text() == diff.new_text
        git_note, = after  # the commit, shown on the edit it commits
        assert git_note.tool_call_id == finished.tool_call_id
        assert git_note.content[-1].content.text.startswith("git: committed the agent's edits as ")
    else:
        assert finished.status == "failed" and (repo / "calc.py").read_text() == before
        assert after == []
        assert "did not approve" in history[-2]["content"]  # the model was told, and went on


def test_always_modes_and_workspaces(tmp_path, repo):
    """"Always" covers later edits in the conversation; full-auto mode asks for none; a
    session works in the folder it names."""
    second = call("write_file", path="notes.txt", content="x\n")
    third = call("write_file", path="more.txt", content="y\n")
    other_repo = make_repo(tmp_path / "other", {"a.txt": "a\n"})
    client = Client("always")

    async def go() -> None:
        turns = [EDIT, second, "ok", third, "ok"]
        async with serve(client, scripted(tmp_path, turns), repo, tmp_path / "home") as (conn, _, _e):
            sid = await start(conn, repo)
            await conn.prompt(session_id=sid, prompt=[text_block("two edits")])
            assert len(client.asked) == 1  # the second edit was covered by "always"
            with pytest.raises(RequestError):
                await conn.new_session(cwd="relative/path", mcp_servers=[])
            with pytest.raises(RequestError):
                await conn.set_session_mode(session_id=sid, mode_id="yolo")
            other = await conn.new_session(cwd=str(other_repo), mcp_servers=[])
            await conn.set_session_mode(session_id=other.session_id, mode_id="full-auto")
            await conn.prompt(session_id=other.session_id, prompt=[text_block("one more")])

    run(go())
    assert len(client.asked) == 1
    assert (repo / "notes.txt").read_text() == "x\n" and (other_repo / "more.txt").read_text() == "y\n"
    assert not (repo / "more.txt").exists()
    assert [u.status for u in client.of("tool_call_update") if u.status] == ["completed"] * 3


# ---- cancel ------------------------------------------------------------------------------------


def test_cancel_mid_generation_and_while_asking(tmp_path, repo):
    client = Client("wait")
    home = tmp_path / "home"

    async def go() -> Any:
        async with serve(client, scripted(tmp_path, ["<slow>", "Back again.", EDIT]), repo, home) as (conn, _, _e):
            sid = await start(conn, repo)
            turn = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("count")]))
            await client.chunk.wait()
            await conn.cancel(session_id=sid)
            first = await turn
            second = await conn.prompt(session_id=sid, prompt=[text_block("hello?")])
            turn = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("edit")]))
            await client.asking.wait()
            await conn.cancel(session_id=sid)
            client.cancelled.set()  # as the protocol asks: answer pending requests "cancelled"
            third = await turn
            return sid, first, second, third

    sid, first, second, third = run(go())
    assert first.stop_reason == "cancelled" and second.stop_reason == "end_turn"
    assert third.stop_reason == "cancelled"
    assert (repo / "calc.py").read_text() == SAMPLE["calc.py"]  # the cancelled edit never ran
    history = saved(repo, home, sid)
    roles = [m["role"] for m in history]
    assert roles[:5] == ["system", "user", "assistant", "user", "assistant"]
    assert history[2]["content"].startswith("tick") and history[4]["content"] == "Back again."
    # the cancelled call got a result, so the history stays well-formed for the next turn
    assert roles[5:] == ["user", "assistant", "user"] and "<tool_result" in history[7]["content"]


# ---- bad input ---------------------------------------------------------------------------------


def test_malformed_messages_get_errors_and_serving_goes_on(tmp_path, repo):
    client = Client()
    errors: list[dict] = []

    def observe(event: Any) -> None:
        if event.direction.value == "incoming" and "error" in event.message:
            errors.append(event.message)

    async def go() -> Any:
        argv = scripted(tmp_path, ["Still here."])
        async with serve(client, argv, repo, tmp_path / "home", [observe]) as (conn, proc, _e):
            sid = await start(conn, repo)
            for line in (b"{this is not json\n", b"[1, 2, 3]\n", b"\xff\xfe\n", b"[" * 200000 + b"\n",
                         b'{"jsonrpc": "2.0", "id": 901, "method": "session/prompt", "params": {"sessionId": 5}}\n',
                         b'{"jsonrpc": "2.0", "id": 902, "method": "no/such_method", "params": {}}\n',
                         (b'{"jsonrpc": "2.0", "id": 903, "method": "session/prompt", '
                          b'"params": {"sessionId": "nope", "prompt": []}}\n')):
                proc.stdin.write(line)
            await proc.stdin.drain()
            with pytest.raises(RequestError) as image:  # content it did not advertise
                await conn.prompt(session_id=sid, prompt=[image_block("aGk=", "image/png")])
            assert image.value.code == -32602 and "text only" in str(image.value.data)
            return await conn.prompt(session_id=sid, prompt=[text_block("are you alive?")])

    response = run(go())
    assert response.stop_reason == "end_turn" and client.text() == "Still here."
    by_id = {e["id"]: e["error"]["code"] for e in errors if e["id"] is not None}
    assert {k: v for k, v in by_id.items() if k >= 900} == {901: -32602, 902: -32601, 903: -32602}
    assert sorted(e["error"]["code"] for e in errors if e["id"] is None) == [-32700, -32700, -32700, -32600]


# ---- resumable sessions ------------------------------------------------------------------------


def test_load_session_replays_and_continues(tmp_path, repo):
    home = tmp_path / "home"
    first, second = Client(), Client()

    async def go() -> Any:
        async with serve(first, scripted(tmp_path, ["First answer."]), repo, home) as (conn, _, _e):
            sid = await start(conn, repo)
            await conn.prompt(session_id=sid, prompt=[text_block("first question")])
        async with serve(second, scripted(tmp_path, ["Second answer."]), repo, home) as (conn, _, _e):
            await conn.initialize(protocol_version=1)
            listed = await conn.list_sessions(cwd=str(repo))
            loaded = await conn.load_session(cwd=str(repo), session_id=sid, mcp_servers=[])
            replayed = list(second.updates)
            response = await conn.prompt(session_id=sid, prompt=[text_block("second question")])
            return sid, listed, loaded, replayed, response

    sid, listed, loaded, replayed, response = run(go())
    assert [(s.session_id, s.title) for s in listed.sessions] == [(sid, "first question")]
    assert loaded.modes.current_mode_id == "suggest"
    assert [(u.session_update, u.content.text) for u in replayed] == [
        ("user_message_chunk", "first question"), ("agent_message_chunk", "First answer.")]
    assert response.stop_reason == "end_turn"
    contents = [typed_text(m["content"]) for m in saved(repo, home, sid)[1:]]
    assert contents == ["first question", "First answer.", "second question", "Second answer."]
    assert "Files in the repository:" in saved(repo, home, sid)[1]["content"]  # the model saw it


# ---- the real engine ---------------------------------------------------------------------------


def real(model: Path | str, *flags: str, before: tuple[str, ...] = ()) -> list[str]:
    """`spec-agent [before] acp -m model [flags]` as a module run."""
    return ["-m", "agent.cli", *before, "acp", "-m", str(model), *flags]


@pytest.mark.slow
def test_real_engine_cancel_keeps_conversation_and_caches_consistent(tmp_path, repo, pair_dirs):
    """A turn cancelled mid-generation, then another: the answer equals the one a fresh
    process (cold caches) gives for the same saved history."""
    target, draft = pair_dirs
    # No resampling: this synthetic pair loops, and a second sample would read the first's cache.
    flags = ("--draft-model", str(draft), "--max-tokens", "200", "--speculation", "on",
             "--resample-temperature", "0")
    warm, cold = Client(), Client()
    home_a, home_b = tmp_path / "a", tmp_path / "b"

    async def go() -> Any:
        async with serve(warm, real(target, *flags), repo, home_a) as (conn, _, _e):
            sid = await start(conn, repo)
            turn = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("Say something.")]))
            await warm.chunk.wait()
            await conn.cancel(session_id=sid)
            cancelled = await turn
            kept = home_a / "conversations"
            shutil.copytree(kept, home_b / "conversations")  # the history as the cancel left it
            start_at = len(warm.updates)
            again = await conn.prompt(session_id=sid, prompt=[text_block("And now?")])
            warm_text = "".join(u.content.text for u in warm.updates[start_at:]
                                if u.session_update == "agent_message_chunk")
        async with serve(cold, real(target, *flags), repo, home_b) as (conn, _, _e):
            await conn.initialize(protocol_version=1)
            await conn.load_session(cwd=str(repo), session_id=sid, mcp_servers=[])
            start_at = len(cold.updates)
            fresh = await conn.prompt(session_id=sid, prompt=[text_block("And now?")])
            cold_text = "".join(u.content.text for u in cold.updates[start_at:]
                                if u.session_update == "agent_message_chunk")
        return sid, cancelled, again, fresh, warm_text, cold_text

    sid, cancelled, again, fresh, warm_text, cold_text = run(go(), 4 * TIMEOUT_S)
    assert cancelled.stop_reason == "cancelled" and cancelled.usage.output_tokens < 200
    assert again.stop_reason in ("end_turn", "max_tokens") and fresh.stop_reason == again.stop_reason
    assert len(set(warm_text)) > 10  # varied text, not one repeated token
    assert warm_text == cold_text and again.usage.output_tokens == fresh.usage.output_tokens
    # The warm process reads the cancelled turn's cache; the cold one only what its own turn
    # wrote (this pair loops, and a turn stopped for repeating itself asks the model again).
    assert again.usage.cached_read_tokens > fresh.usage.cached_read_tokens
    assert saved(repo, home_a, sid)[:4] == saved(repo, home_b, sid)[:4]
    usage = warm.of("usage_update")
    assert usage and usage[-1].size > 0 and "decode_tps" in usage[-1].field_meta["spec-agent"]


@pytest.mark.embedded
@pytest.mark.slow
def test_embedded_model_answers_over_acp(tmp_path, repo, embedded):
    from agent import store

    client = Client("no")
    home = tmp_path / "home"
    home.mkdir()
    for shared in ("models", "converted"):  # the pulled model, without sharing the history
        if (store.home() / shared).exists():
            (home / shared).symlink_to(store.home() / shared)

    async def go() -> Any:
        argv = real("default", "--max-tokens", "32", before=("--max-turns", "1"))
        async with serve(client, argv, repo, home) as (conn, _, _e):
            sid = await start(conn, repo)
            return await conn.prompt(session_id=sid, prompt=[text_block("Say hello in one short sentence.")])

    response = run(go(), 4 * TIMEOUT_S)
    assert response.stop_reason in ("end_turn", "max_tokens", "max_turn_requests")
    assert client.text().strip() and response.usage.output_tokens > 0
    assert response.field_meta["spec-agent"]["decode_tps"] > 0


def test_acp_front_end_imports_no_ui_toolkit():
    from test_layering import _import_blocked

    r = _import_blocked(("textual", "prompt_toolkit"), (), "agent.ui.acp, agent.ui.acp_events")
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr


# ---- the translation, without a process ------------------------------------------------------


def test_translator_hides_call_markup_and_maps_stops(tmp_path):
    from dataclasses import replace as dc_replace

    from scripted import fake_stats

    from agent.events import AgentResult, AssistantMessage, TextDelta, TurnStats
    from agent.ui.acp import merge_text
    from agent.ui.acp_events import Translator

    clock = iter([0.0, 0.1, 0.2, 5.0]).__next__
    tr = Translator(tmp_path, clock=clock)
    out = []
    for piece in ("Let me look. <tool", "_call>{\"name\": \"read_file\", ", "\"arguments\": {}}</tool_call>"):
        out += tr.feed(TextDelta(piece, ()))
    out += tr.feed(AssistantMessage("Let me look.", 1))
    assert "".join(u.content.text for u in merge_text(out)) == "Let me look. "
    stats = dc_replace(fake_stats(), finish_reason="length", context_tokens=10, context_limit=100)
    usage, = tr.feed(TurnStats(1, stats))
    assert (usage.used, usage.size) == (10, 100) and usage.field_meta["spec-agent"]["k"] == 3
    assert tr.stop_reason(AgentResult(False, "", 1, {}, stop_reason="answered")) == "max_tokens"
    assert tr.stop_reason(AgentResult(False, "", 8, {}, stop_reason="max_turns")) == "max_turn_requests"


def test_prompt_blocks_and_edit_previews(tmp_path):
    from acp import embedded_text_resource, resource_block, resource_link_block

    from agent.ui.acp_events import edit_texts, prompt_text

    root = make_repo(tmp_path / "r", {"calc.py": "x = 1\n"})
    text = prompt_text([text_block("fix"), resource_link_block("calc.py", (root / "calc.py").as_uri()),
                        resource_link_block("doc", "https://example.com/doc"),
                        resource_block(embedded_text_resource((root / "n.md").as_uri(), "note"))], root)
    assert text == 'fix\n@calc.py\ndoc (https://example.com/doc)\n<file path="n.md">\nnote\n</file>'
    with pytest.raises(ValueError, match="text only"):
        prompt_text([image_block("aGk=", "image/png")], root)
    assert edit_texts(root, "write_file", {"path": "new.txt", "content": "y"}) == (str(root / "new.txt"), None, "y")
    assert edit_texts(root, "edit_file", {"path": "calc.py", "edits": [{"old": "1", "new": "2"}]})[1:] == ("x = 1\n", "x = 2\n")
    for bad in ({"content": "y"}, {"path": ".", "content": "y"}, {"path": "../out", "content": "y"}):
        assert edit_texts(root, "write_file", bad) is None  # the tool will say why; no diff shown
    assert edit_texts(root, "edit_file", {"path": "calc.py", "edits": [{"old": "zzz", "new": "2"}]}) is None


def test_git_work_lands_on_its_tool_calls(tmp_path):
    from agent.events import GitAction, ToolCallFinished, ToolCallStarted
    from agent.ui.acp_events import Translator

    root = make_repo(tmp_path / "r", {"a.txt": "a\n"})
    tr = Translator(root)
    args = {"path": "a.txt", "content": "b\n"}
    started, = tr.feed(ToolCallStarted("c1", "write_file", args))
    assert tr.feed(GitAction("protect", "saved your uncommitted a.txt as 1234abcd")) == []
    finished, = tr.feed(ToolCallFinished("c1", "write_file", True, "wrote a.txt"))
    texts = [c.content.text for c in finished.content if c.type == "content"]
    assert texts == ["git: saved your uncommitted a.txt as 1234abcd", "wrote a.txt"]
    assert finished.content[0].type == "diff" and finished.content[0].old_text == "a\n"
    commit, = tr.feed(GitAction("commit", "committed the agent's edits as 99ff", "99ff", ("a.txt",)))
    assert commit.tool_call_id == "c1" and commit.content[-1].content.text.endswith("as 99ff")
    assert tr.feed(GitAction("commit", "committed again", "aa", ())) == []  # each edit once

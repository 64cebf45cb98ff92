"""The MCP client: servers from the user's config, their tools as mcp__SERVER__TOOL, each call
validated against (and, with a local model, constrained by) the server's inputSchema;
approvals; a server that fails to start, hangs, crashes or answers garbage gives one error.

The servers are tests/mcp_fixture_server.py (the SDK's MCPServer, and a hand-written JSON-RPC
one for garbage) and `mcp-server-time` from PyPI where it is installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
from scripted import SAMPLE, ScriptedModel, call, full_auto, make_repo

from agent.config import Config, ConfigError, load_config
from agent.exit_codes import for_stop_reason
from agent.extensions import Extensions, ServerSpec, load as load_extensions
from tools import TOOLS, ToolContext, call_tool

pytest.importorskip("mcp")

FIXTURE = str(Path(__file__).with_name("mcp_fixture_server.py"))
TIME_SERVER = shutil.which("mcp-server-time") or str(Path(sys.executable).with_name("mcp-server-time"))
GIT_SERVER = shutil.which("mcp-server-git") or str(Path(sys.executable).with_name("mcp-server-git"))
TRIP = {"trip": {"city": "lima", "nights": 2, "travellers": [{"name": "Ana", "age": 30}]},
        "seat": "aisle"}


def fixture(name: str, mode: str, **kw) -> ServerSpec:
    return ServerSpec(name, sys.executable, (FIXTURE, mode), **kw)


@pytest.fixture(scope="module")
def manager(tmp_path_factory):
    from agent.mcp import McpManager

    specs = [fixture("fx", "good"), fixture("sleepy", "good", call_timeout_s=2.0), fixture("crashy", "good"),
             fixture("junk", "garbage", call_timeout_s=2.0), fixture("dead", "nostart"),
             fixture("mute", "silent", startup_timeout_s=3.0)]
    if Path(TIME_SERVER).exists():
        specs.append(ServerSpec("time", TIME_SERVER, ("--local-timezone", "UTC")))
    if Path(GIT_SERVER).exists():
        repo = make_repo(tmp_path_factory.mktemp("gitrepo") / "r", SAMPLE)
        (repo / "calc.py").write_text(SAMPLE["calc.py"] + "# changed\n")
        specs.append(ServerSpec("git", GIT_SERVER, ("--repository", str(repo))))
    warnings: list[str] = []
    m = McpManager(Extensions(tuple(specs), tuple(s.name for s in specs)),
                   tmp_path_factory.mktemp("mcp-logs"), warnings.append)
    t0 = time.monotonic()
    m.start()
    m.start_s, m.warnings = time.monotonic() - t0, warnings
    yield m
    m.close()


@pytest.fixture
def ctx(tmp_path) -> ToolContext:
    return ToolContext(tmp_path)


def test_tools_are_registered_with_the_servers_schemas(manager):
    tool = TOOLS["mcp__fx__book_trip"]
    assert tool.kind == "mcp" and tool.description == "Book a trip for some travellers."
    trip = tool.schema["$defs"]["Trip"]
    assert trip["properties"]["city"]["enum"] == ["paris", "tokyo", "lima"]
    assert trip["additionalProperties"] is False and tool.schema["additionalProperties"] is False
    assert set(tool.schema["required"]) == {"trip", "seat"}
    assert "mcp__dead__echo" not in TOOLS and "mcp__mute__echo" not in TOOLS
    assert manager.start_s < 15  # started side by side: the silent one's 3 s limit, not the sum


def test_a_call_runs_on_the_server_and_bad_arguments_never_reach_it(manager, ctx):
    r = call_tool("mcp__fx__book_trip", TRIP, ctx)
    assert r.ok and r.output == "booked 2 nights in lima for Ana (aisle seats)"
    bad = call_tool("mcp__fx__book_trip", {**TRIP, "seat": "roof"}, ctx)
    assert not bad.ok and "invalid arguments for mcp__fx__book_trip at seat" in bad.output
    failed = call_tool("mcp__fx__fail", {"why": "no"}, ctx)
    assert not failed.ok and failed.output.startswith("Error: mcp__fx__fail:")


def test_a_hanging_call_times_out_and_the_server_stays_usable(manager, ctx):
    t0 = time.monotonic()
    r = call_tool("mcp__sleepy__hang", {}, ctx)
    assert not r.ok and r.output == "Error: MCP server 'sleepy' did not answer hang within 2s"
    assert time.monotonic() - t0 < 6
    assert call_tool("mcp__sleepy__echo", {"text": "still here"}, ctx).output == "still here"


def test_garbage_is_one_error(manager, ctx):
    r = call_tool("mcp__junk__garbage", {}, ctx)
    assert not r.ok and r.output.startswith("Error: MCP server 'junk' failed on garbage:")
    assert "not an MCP message" in r.output and "\n" not in r.output


def test_a_crash_mid_call_is_one_error_and_the_server_is_marked_stopped(manager, ctx):
    r = call_tool("mcp__crashy__crash", {}, ctx)
    assert not r.ok and "the server has stopped" in r.output and "\n" not in r.output
    again = call_tool("mcp__crashy__echo", {"text": "x"}, ctx)
    assert again.output.startswith("Error: MCP server 'crashy' has stopped")
    assert manager.servers["crashy"].state == "exited"


def test_servers_that_do_not_start_are_reported(manager):
    dead, mute = manager.servers["dead"], manager.servers["mute"]
    assert dead.state == "failed" and "cannot start: no configuration" in dead.error
    assert mute.state == "failed" and mute.error == "did not start within 3s"
    assert any(w.startswith("MCP server 'dead' failed") for w in manager.warnings)
    listing = manager.listing()
    assert "fx: running" in listing and "mcp__fx__book_trip (asks first)" in listing
    assert "mute: failed (did not start within 3s)" in listing


@pytest.mark.skipif(not Path(TIME_SERVER).exists(), reason="mcp-server-time is not installed")
def test_mcp_server_time_from_pypi(manager, ctx):
    schema = TOOLS["mcp__time__get_current_time"].schema
    assert schema["required"] == ["timezone"]
    r = call_tool("mcp__time__get_current_time", {"timezone": "UTC"}, ctx)
    assert r.ok and json.loads(r.output)["timezone"] == "UTC"


@pytest.mark.skipif(not Path(GIT_SERVER).exists(), reason="mcp-server-git is not installed")
def test_mcp_server_git_from_pypi(manager, ctx):
    (spec,) = [c.spec for c in manager.servers.values() if c.spec.name == "git"]
    repo = spec.args[-1]
    assert TOOLS["mcp__git__git_status"].schema["required"] == ["repo_path"]
    r = call_tool("mcp__git__git_diff_unstaged", {"repo_path": repo}, ctx)
    assert r.ok and "+# changed" in r.output
    bad = call_tool("mcp__git__git_status", {}, ctx)
    assert not bad.ok and "'repo_path' is a required property" in bad.output


def test_close_stops_the_servers_and_unregisters_their_tools(tmp_path):
    from agent.mcp import McpManager

    m = McpManager(Extensions((fixture("one", "good"),), ("one",)), tmp_path)
    m.start()
    assert "mcp__one__echo" in TOOLS
    m.close()
    assert not [n for n in TOOLS if n.startswith("mcp__one__")]
    assert m.listing() and m.host is None


def test_prompt_budget_leaves_tools_out(tmp_path):
    from agent.mcp import McpManager

    warnings: list[str] = []
    m = McpManager(Extensions((fixture("tight", "good"),), ("tight",), prompt_chars=200),
                   tmp_path, warnings.append)
    m.start()
    try:
        offered = [n for n in TOOLS if n.startswith("mcp__tight__")]
        assert 0 < len(offered) < 5
        assert any("past the [mcp] prompt_chars budget" in w for w in warnings)
    finally:
        m.close()


# ---- config: the user declares, a repository may only enable --------------------------------


def _user_config(tmp_path: Path, monkeypatch, text: str) -> None:
    (tmp_path / "xdg" / "spec-agent").mkdir(parents=True)
    (tmp_path / "xdg" / "spec-agent" / "config.toml").write_text(text)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


SERVER_TOML = f"""
[mcp.servers.trips]
command = {json.dumps(sys.executable)}
args = [{json.dumps(FIXTURE)}, "good"]
enabled = false
"""


def test_a_repo_may_enable_a_declared_server_only(tmp_path, monkeypatch):
    _user_config(tmp_path, monkeypatch, SERVER_TOML)
    repo = tmp_path / "repo"
    repo.mkdir()
    assert load_extensions(repo).servers == ()  # declared, not enabled
    (repo / ".specrc").write_text('[mcp]\nenable = ["trips"]\n')
    (spec,) = load_extensions(repo).servers
    assert spec.name == "trips" and spec.args[-1] == "good"
    load_config(repo)  # the table does not reach the flat keys
    (repo / ".specrc").write_text('[mcp]\nenable = ["other"]\n')
    with pytest.raises(ConfigError, match="does not declare"):
        load_extensions(repo)


@pytest.mark.parametrize("specrc", ['[mcp.servers.evil]\ncommand = "sh"\n',
                                    '[[hooks.PreToolUse]]\ncommand = "true"\n'])
def test_a_repo_specrc_may_not_declare_programs(tmp_path, specrc):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".specrc").write_text(specrc)
    r = subprocess.run([sys.executable, "-m", "agent.cli", "-p", "hi", "--repo", str(repo)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("spec-agent: error: ") and ".specrc" in line


# ---- in a conversation: approvals, the system prompt ------------------------------------------


def _run(repo: Path, turns: list[str], cfg: Config) -> tuple[int, dict, ScriptedModel]:
    import io
    from contextlib import redirect_stdout

    from agent.commands import run_task

    model, out = ScriptedModel(turns), io.StringIO()
    with redirect_stdout(out):
        code = run_task("book it", SimpleNamespace(repo=repo, output_format="json", stats=False),
                        cfg, model=model)
    return code, json.loads(out.getvalue()), model


def test_an_mcp_call_needs_approval_unless_the_user_allows_it(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "repo", SAMPLE)
    _user_config(tmp_path, monkeypatch, SERVER_TOML.replace("enabled = false", "enabled = true"))
    turns = [call("mcp__trips__book_trip", **TRIP), "Booked."]
    code, out, model = _run(repo, list(turns), full_auto())
    assert code == for_stop_reason("approval_required") == 4 and out["stop_reason"] == "approval_required"
    assert "mcp__trips__book_trip" in model.seen[0][0]["content"]  # described in the system prompt

    cfg_path = tmp_path / "xdg" / "spec-agent" / "config.toml"
    cfg_path.write_text(cfg_path.read_text() + 'allow_tools = ["book_trip"]\n')
    code, out, model = _run(repo, list(turns), full_auto())
    assert code == 0 and out["result"] == "Booked."
    result = model.seen[1][-1]["content"]
    assert 'name="mcp__trips__book_trip" status="ok"' in result and "booked 2 nights in lima" in result
    assert not [n for n in TOOLS if n.startswith("mcp__trips__")]  # stopped with the run


# ---- constrained by the server's schema -----------------------------------------------------


@pytest.mark.embedded
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_embedded_model_writes_schema_valid_mcp_calls(manager, embedded, tmp_path, seed):
    """Under the grammar built from book_trip's inputSchema (nested objects, enums, required
    fields), the real model's call validates against that schema, sampled at temperature 1."""
    import mlx.core as mx

    from agent.backends.local import LocalModel
    from agent.core.callformat import CLOSE, OPEN, parse_calls
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session
    from agent.events import GenerationStats, TextDelta

    mx.random.seed(seed)
    tool = TOOLS["mcp__fx__book_trip"]
    model = LocalModel(Session(embedded), SamplingParams(temperature=1.0), 200, None,
                       tools={tool.name: tool})
    constraint = model.constraint([])
    session = model.session
    prompt = session.render([{"role": "user", "content": "Book two nights in Tokyo for Ana, 30."}])
    prompt += session.tokenizer.encode(OPEN, add_special_tokens=False)
    text, finish = "", ""
    for ev in session.generate(prompt, params=SamplingParams(temperature=1.0), max_tokens=160,
                               constraint=constraint, stop_strings=[CLOSE]):
        if isinstance(ev, TextDelta):
            text += ev.text
        elif isinstance(ev, GenerationStats):
            finish = ev.finish_reason
    assert finish == "stop_string", text
    (parsed,) = parse_calls(OPEN + text)
    assert parsed.name == tool.name and parsed.error == ""
    jsonschema.validate(parsed.arguments, tool.schema)
    r = call_tool(tool.name, parsed.arguments, ToolContext(tmp_path))
    assert r.ok and r.output.startswith("booked "), r.output


# ---- ACP: the servers a client passes with a session ----------------------------------------


def test_acp_session_gets_the_clients_mcp_servers(tmp_path, monkeypatch):
    import asyncio

    from acp import text_block
    from acp.schema import McpServerStdio
    from test_acp import Client, run, scripted, serve

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no user servers
    repo = make_repo(tmp_path / "repo", SAMPLE)
    client = Client("yes")
    turns = [call("mcp__editor__echo", text="from the editor"), "Echoed."]

    async def go():
        async with serve(client, scripted(tmp_path, turns), repo, tmp_path / "home") as (conn, _, err):
            await conn.initialize(protocol_version=1)
            server = McpServerStdio(name="editor", command=sys.executable, args=[FIXTURE, "good"], env=[])
            session = await conn.new_session(cwd=str(repo), mcp_servers=[server])
            response = await conn.prompt(session_id=session.session_id,
                                         prompt=[text_block("echo something")])
            return response, err

    response, err = run(go())
    assert response.stop_reason == "end_turn"
    (asked, _), = client.asked  # an MCP tool asks first
    assert "mcp__editor__echo" in str(asked)
    results = [u for u in client.of("tool_call_update") if u.status == "completed"]
    assert results and "from the editor" in str(results[-1].content)


# ---- a call written without its markers is decoded again under the grammar -------------------


PICK = {"type": "object", "properties": {"seat": {"enum": ["window", "aisle"]},
                                         "rows": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["seat", "rows"], "additionalProperties": False}


@pytest.mark.parametrize("bare", ['```json\n{\n  "name": "mcp__x__pick",\n  "arguments": {}\n}\n```',
                                  '{\n  "name": "mcp__x__pick", "arguments": {}}'])
def test_a_bare_or_fenced_call_is_decoded_under_the_schema(llama, bare):
    """A model that writes its call as a (fenced, pretty-printed) JSON object instead of
    `<tool_call>` gets the call decoded again under the grammar: schema-valid."""
    from llguidance import LLMatcher

    from agent.backends.local import LocalModel
    from agent.backends.grammar import GrammarConstraint, ll_tokenizer
    from agent.core.callformat import parse_calls
    from agent.engine.sampling import SamplingParams
    from agent.engine.session import Session
    from agent.events import TextDelta
    from tools import Tool, ToolResult, register, unregister

    ll_tok = ll_tokenizer(llama.tokenizer)

    class WritesBare(Session):  # phase 1 writes `bare`; phase 2 (the grammar's) is the model's
        def generate(self, prompt, **kw):
            if kw.get("constraint") is None:
                lark = LLMatcher.grammar_from_lark(f"start: {json.dumps(bare)}")
                kw["constraint"] = GrammarConstraint(ll_tok, lark, llama.vocab_size)
            return super().generate(prompt, **kw)

    tool = Tool("mcp__x__pick", "Pick a seat.", PICK, lambda ctx, **a: ToolResult(True, "ok"), "mcp")
    model = LocalModel(WritesBare(llama), SamplingParams(temperature=1.0), 80, None,
                       tools={tool.name: tool})
    register(tool)  # as McpManager does: the reply names a registered tool
    try:
        text = "".join(e.text for e in model.generate([{"role": "user", "content": "pick"}])
                       if isinstance(e, TextDelta))
    finally:
        unregister(tool.name)
    assert text.startswith("<tool_call>") and "{}" not in text, text
    (parsed,) = parse_calls(text)
    assert parsed.name == "mcp__x__pick"
    jsonschema.validate(parsed.arguments, PICK)


def test_a_streamable_http_server(tmp_path, ctx):
    import socket

    from agent.mcp import McpManager

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, FIXTURE, "http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        m = McpManager(Extensions((ServerSpec("web", url=f"http://127.0.0.1:{port}/mcp"),), ("web",)),
                       tmp_path)
        m.start()
        try:
            assert m.servers["web"].state == "running", m.servers["web"].error
            r = call_tool("mcp__web__book_trip", TRIP, ctx)
            assert r.ok and r.output.startswith("booked 2 nights in lima")
        finally:
            m.close()
    finally:
        proc.kill()
        proc.wait(10)

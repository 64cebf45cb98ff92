"""Every option works where `--help` shows it or is refused in one line (agent/cli_checks.py),
and the model-free shell examples of the README and docs/ run and exit 0."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import _flags, build_parser
from agent.config import Config

ROOT = Path(__file__).parents[1]
BIN = [sys.executable, "-m", "agent.cli"]


def cli(*args, cwd=None, env=None):
    e = {**os.environ, **(env or {})}
    return subprocess.run([*BIN, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env=e)


@pytest.mark.parametrize("argv,flag,where", [
    (["-m", "x", "bench", "spec"], "-m/--model", "bench spec"),
    (["bench", "spec", "--draft-model", "d"], "--draft-model", "bench spec"),
    (["bench", "cache", "--quick"], "--quick", "bench cache"),
    (["bench", "grammar", "--tokens", "5"], "--tokens", "bench grammar"),
    (["bench", "lookup", "--pair", "controlled"], "--pair", "bench lookup"),
    (["bench", "spec", "--modes", "lookup"], "--modes", "bench spec"),
    (["bench", "agentic", "--record", "--out", "r.jsonl"], "--out", "bench agentic --record"),
    (["--output-format", "json", "models", "list"], "--output-format", "spec-agent models"),
    (["--max-turns", "3", "undo", "--list"], "--max-turns", "spec-agent undo"),
    (["-c", "config", "show"], "-c/--continue", "config show"),
    (["-p", "hi", "models", "list"], "-p", "spec-agent models"),
    (["--stats"], "--stats", "the interactive UI"),
    (["--output-format", "json"], "--output-format", "the interactive UI"),
    (["-p", "hi", "--plain"], "--plain", "-p"),
])
def test_an_option_the_command_ignores_is_one_error(argv, flag, where, tmp_path):
    r = cli("-C", str(tmp_path), *argv)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert flag in r.stderr and where in r.stderr and "Traceback" not in r.stderr


def test_permission_mode_is_claude_codes_name_for_approval_mode():
    for mode, ours in (("default", "suggest"), ("acceptEdits", "auto-edit"),
                       ("bypassPermissions", "full-auto")):
        args = build_parser().parse_args(["--permission-mode", mode, "-p", "x"])
        assert _flags(args)["approval_mode"] == ours
    r = cli("--permission-mode", "default", "--yes", "-p", "x")
    assert r.returncode == 2 and "give one of --permission-mode" in r.stderr


def test_bare_p_reads_the_task_from_stdin():
    r = subprocess.run([*BIN, "-p"], input="  \n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "the task is empty" in r.stderr
    assert build_parser().parse_args(["-p", "--yes"]).prompt == "-"


def test_model_given_before_bench_reaches_the_bench():
    for argv in (["-m", "x", "bench", "lookup"], ["bench", "lookup", "-m", "x"],
                 ["-m", "x", "bench", "cache"]):
        args = build_parser().parse_args(argv)
        assert _flags(args)["model"] == "x", argv
    args = build_parser().parse_args(["bench", "lookup"])
    assert _flags(args)["model"] == "embedded" and args.json is False and args.tokens is None


def test_flags_reach_the_config_they_name():
    """Each config-setting flag `_flags` reads is a Config key (none is read into nowhere)."""
    args = build_parser().parse_args(["-p", "x"])
    keys = {f.name for f in dataclasses.fields(Config)}
    assert set(_flags(args)) <= keys


# ---- README and docs/ -------------------------------------------------------------------------

README = (ROOT / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}
CONFIGURATION = DOCS["configuration.md"]


def _readme_commands() -> list[str]:
    """`spec-agent ...` lines of the sh blocks of the README and docs/ that need no model."""
    blocks = re.findall(r"```sh\n(.*?)```", "\n".join([README, *DOCS.values()]), re.S)
    lines = [ln.split("#")[0].strip() for b in blocks for ln in b.splitlines()]
    pat = re.compile(r"^spec-agent( --help| --version| config show| models list| undo --list)\b")
    return [ln for ln in lines if pat.match(ln)]


def test_readme_has_the_model_free_examples():
    found = {c.split()[1] for c in _readme_commands()}
    assert {"--help", "config", "models", "undo"} <= found, _readme_commands()


@pytest.mark.parametrize("command", _readme_commands())
def test_readme_example_exits_0(command, tmp_path):
    import shlex

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    argv = shlex.split(command)[1:]
    r = cli(*argv, cwd=repo, env={"XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert r.returncode == 0, (command, r.stderr)
    assert "Traceback" not in r.stderr


def test_readme_config_table_and_example_name_every_key():
    import tomllib

    keys = [f.name for f in dataclasses.fields(Config)]
    table = re.search(r"\n\| key \| default \| flag \| what it does \|\n(.*?)\n\n", CONFIGURATION, re.S)
    assert table, "docs/configuration.md's configuration table"
    in_table = set(re.findall(r"`([a-z_0-9]+)`", "".join(
        row.split("|")[1] for row in table.group(1).splitlines() if row.startswith("| `"))))
    assert [k for k in keys if k not in in_table] == []
    example = tomllib.loads((ROOT / ".specrc.example").read_text())
    assert [k for k in keys if k not in example] == []


def test_readme_config_defaults_match_the_loader():
    """The table's default column says what Config() holds (e.g. the default model)."""
    table = re.search(r"\n\| key \| default \| flag \| what it does \|\n(.*?)\n\n", CONFIGURATION, re.S)
    assert table, "docs/configuration.md's configuration table"
    cfg = Config()
    for row in table.group(1).splitlines():
        cells = [c.strip() for c in row.split("|")[1:3]]
        names = re.findall(r"`([a-z_0-9]+)`", cells[0])
        values = re.findall(r"`([^`]*)`", cells[1])
        if len(names) != len(values):
            continue
        for name, value in zip(names, values):
            want = getattr(cfg, name)
            shown = {"true": True, "false": False}.get(value, value.strip('"'))
            assert str(shown) == str(want), (name, value, want)


def test_readme_output_schema_lists_every_event_and_field():
    import dataclasses as dc

    from agent.events import (AgentResult, ContextAttached, ContextCompacted, GenerationStats,
                              TurnStats, _snake)
    from agent.ui.render import _STREAMED

    section = CONFIGURATION[CONFIGURATION.index("\n## Output schema\n"):]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    for cls in (*_STREAMED, ContextCompacted, ContextAttached, AgentResult):
        name = "result" if cls is AgentResult else _snake(cls.__name__)
        row = next((r for r in section.splitlines() if r.startswith(f"| `{name}` |")), None)
        assert row, name
        fields = [f.name for f in dc.fields(cls) if f.name not in ("stats",)]
        if cls is TurnStats:
            fields += [f.name for f in dc.fields(GenerationStats)]
        assert [f for f in fields if f"`{f}`" not in row] == [], name
    from agent import exit_codes

    for reason in exit_codes.STOP_REASONS:
        assert f"`{reason}`" in section


def test_stats_say_n_a_for_figures_nothing_measured():
    import io
    from dataclasses import replace

    from scripted import fake_stats

    from agent.events import AgentResult, RunStopped, TurnStats
    from agent.ui.render import Renderer

    def summary(stats, usage):
        err = io.StringIO()
        r = Renderer("text", io.StringIO(), err, stats=True)
        for ev in (TurnStats(1, stats), RunStopped("answered", 1),
                   AgentResult(False, "ok", 1, usage, stop_reason="answered")):
            r.handle(ev)
        return err.getvalue().splitlines()[-1]

    usage = {"input_tokens": 100, "cached_input_tokens": 80, "cache_hit_rate": 0.8,
             "drafted_tokens": 12, "acceptance_rate": 0.5, "output_tokens": 10, "decode_tps": 20.0}
    assert "cache hits 80%, acceptance 50%" in summary(fake_stats(), usage)
    server = replace(fake_stats(), backend="openai h · m", cache_reported=False, drafted=0,
                     accepted=0, speculative=False)
    bare = {**usage, "cached_input_tokens": 0, "cache_hit_rate": 0.0, "drafted_tokens": 0,
            "acceptance_rate": 0.0}
    assert "cache hits n/a, acceptance n/a" in summary(server, bare)

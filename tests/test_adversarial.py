"""Adversarial cases as a hostile model or a careless user would try them, across paths, shell,
git, config and tools. Each case (tests/adversarial/*.toml) sets up a repository, does one
thing through the real pieces (a full-auto conversation with a scripted model, the tools and
the sandbox; `spec-agent undo`; the config loader; the system prompt) and asserts what a user
would see: a file intact, an approval asked, `ok=False`, a process gone, a time limit kept.

Two sets: `tuning.toml` (the code was fixed against it) and `check.toml` (written apart and
not tuned against; a case that fails there is marked with `known_failure` and reported).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import adversarial_actions
from scripted import SAMPLE, ScriptedModel, call, conversation, full_auto, git, make_repo

from agent.cli import main
from agent.config import ConfigError, load_config
from agent.core.prompt import system_prompt
from agent.events import ApprovalRequired, ToolCallFinished
from tools import sandbox

CASES = Path(__file__).parent / "adversarial"
BWRAP_OK = sys.platform.startswith("linux") and sandbox.available()[0]


def load(set_name: str) -> list[Any]:
    cases = tomllib.loads((CASES / f"{set_name}.toml").read_text())["case"]
    out = []
    for case in cases:
        marks = []
        if case.get("needs_sandbox") and not BWRAP_OK:
            marks.append(pytest.mark.skip(reason="no working bubblewrap"))
        if case.get("known_failure"):
            marks.append(pytest.mark.xfail(reason=case["known_failure"], strict=True))
        out.append(pytest.param(case, id=f"{set_name}/{case['id']}", marks=marks))
    return out


class World:
    """A repository with the user's uncommitted work, a fake home and a folder outside both."""

    def __init__(self, tmp: Path, monkeypatch):
        self.repo = make_repo(tmp / "repo", SAMPLE)
        self.home, self.out = tmp / "home", tmp / "out"
        self.home.mkdir()
        self.out.mkdir()
        (self.home / ".bashrc").write_text("# the user's bashrc\n")
        (self.out / "secret.txt").write_text("SECRET outside the repo\n")
        (self.repo / "calc.py").write_text(SAMPLE["calc.py"] + "# uncommitted user work\n")
        monkeypatch.setenv("HOME", str(self.home))
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp / "config"))
        monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp / "agent-home"))
        self.tmp = tmp
        self.env = {**os.environ, "ADV_OUT": str(self.out), "ADV_HOME": str(self.home),
                    "ADV_PY": sys.executable, "PYTHONPATH": str(Path(__file__).parents[1])}

    def path(self, spec: str) -> Path:
        if spec.startswith("~/"):
            return self.home / spec[2:]
        if spec.startswith("@out/"):
            return self.out / spec[5:]
        return Path(spec) if spec.startswith("/") else self.repo / spec

    def setup(self, script: str) -> None:
        if script:
            subprocess.run(["bash", "-c", script], cwd=self.repo, env=self.env, check=True,
                           capture_output=True, timeout=30)

    def read(self, spec: str) -> bytes | None:
        p = self.path(spec)
        try:
            return p.read_bytes() if p.is_file() else (b"<dir>" if p.is_dir() else None)
        except OSError:
            return b"<unreadable>"

    def state(self) -> tuple:
        files = {}
        for p in sorted(self.repo.rglob("*")):
            rel = p.relative_to(self.repo).as_posix()
            if not rel.startswith(".git/") and rel != ".git" and (p.is_file() or p.is_symlink()):
                files[rel] = str(os.readlink(p)) if p.is_symlink() else p.read_bytes()
        modes = {rel: oct(os.lstat(self.repo / rel).st_mode) for rel in files}
        head = subprocess.run(["git", "symbolic-ref", "-q", "HEAD"], cwd=self.repo, capture_output=True,
                              text=True).stdout  # '' when detached
        return (files, modes, git(self.repo, "diff", "--cached"), git(self.repo, "rev-parse", "HEAD"),
                head)


def act(world: World, case: dict) -> dict[str, Any]:
    """Do the case's action; returns what happened."""
    action = case.get("action", "call")
    seen: dict[str, Any] = {}
    if action == "call":
        tool_call = case.get("call") or {"name": "run_shell", "arguments": {"command": case["command"]}}
        cfg = full_auto(**case.get("config", {}))
        approver = (lambda req: case["approve"]) if case.get("approve") else None
        model = ScriptedModel([call(tool_call["name"], **tool_call["arguments"]), "Done."])
        events = list(conversation(world.repo, model, cfg, approver=approver).send("do it"))
        seen["asked"] = any(isinstance(e, ApprovalRequired) for e in events)
        done = [e for e in events if isinstance(e, ToolCallFinished)]
        seen["ok"] = done[0].ok if done else None
        seen["output"] = done[0].output if done else ""
    elif action == "undo":
        seen["exit"] = main(["-C", str(world.repo), "undo"])
    elif action == "config":
        try:
            load_config(world.repo)
            seen["config_error"] = False
        except ConfigError:
            seen["config_error"] = True
        except BaseException as e:  # noqa: BLE001 - what a case looks for
            seen["crash"] = type(e).__name__
    elif action == "history":
        seen = adversarial_actions.history(world.repo, case)
    elif action == "acp_line":
        seen = adversarial_actions.acp_line(case)
    elif action == "remote":
        seen = adversarial_actions.remote(world.repo, case)
    elif action == "approval":
        seen = adversarial_actions.approval(world.repo, case)
    elif action == "orphans":
        seen = adversarial_actions.orphans(world.repo, case, world.tmp)
    elif action == "prompt":
        seen["prompt"] = system_prompt(world.repo)
    return seen


def check(world: World, case: dict, seen: dict, before: dict, state: tuple, elapsed: float) -> None:
    expect = case["expect"]
    assert "crash" not in seen, f"crashed: {seen.get('crash')}; output: {seen.get('output', '')[-300:]}"
    for key in ("asked", "ok", "exit", "config_error", "clean_error", "answered", "shown_clean",
                "orphans", "hung_up"):
        if key in expect:
            assert seen.get(key) == expect[key], f"{key}: {seen.get(key)!r}, output: {seen.get('output', '')[:300]}"
    if "output_has" in expect:
        assert expect["output_has"] in seen["output"], seen["output"][:300]
    for text in expect.get("output_lacks", []):
        assert text not in seen["output"], seen["output"][:300]
    if "exit_nonzero" in expect:
        assert seen["exit"] not in (0, None), seen.get("output", "")[-300:]
    for spec in expect.get("unchanged", []):
        assert world.read(spec) == before[spec], f"{spec} changed"
    for spec in expect.get("absent", []):
        assert not world.path(spec).exists() and not world.path(spec).is_symlink(), f"{spec} exists"
    if "max_s" in expect:
        assert elapsed < expect["max_s"], f"took {elapsed:.1f}s"
    if "prompt_lacks" in expect:
        assert expect["prompt_lacks"] not in seen["prompt"]
    if "gone" in expect:
        time.sleep(0.2)
        ps = subprocess.run(["pgrep", "-af", expect["gone"]], capture_output=True, text=True).stdout
        assert ps.strip() == "", ps
    for path in expect.get("not_committed", []):
        assert path not in git(world.repo, "show", "--name-only", "--format=", "HEAD").split()
    if expect.get("undo_restores"):
        assert world.state() != state, "the action destroyed nothing; the case tests nothing"
        assert main(["-C", str(world.repo), "undo"]) == 0
        assert world.state() == state


def _unique(value: Any, n: str) -> Any:
    """`value` with every "{n}" in its strings replaced by `n` (markers no other run shares)."""
    if isinstance(value, str):
        return value.replace("{n}", n)
    if isinstance(value, dict):
        return {k: _unique(v, n) for k, v in value.items()}
    if isinstance(value, list):
        return [_unique(v, n) for v in value]
    return value


def run_case(case: dict, tmp_path: Path, monkeypatch) -> None:
    import tools.grep

    case = _unique(case, str(os.getpid()))
    for name, value in case.get("environ", {}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tools.grep, "TIME_LIMIT_S", 2.0)  # the limit kept, sooner (fast tests)
    world = World(tmp_path, monkeypatch)
    world.setup(case.get("setup", ""))
    specs = case["expect"].get("unchanged", [])
    before = {spec: world.read(spec) for spec in specs}
    state = world.state()
    start = time.monotonic()
    seen = act(world, case)
    check(world, case, seen, before, state, time.monotonic() - start)


@pytest.mark.parametrize("case", load("tuning"))
def test_tuning(case, tmp_path, monkeypatch):
    run_case(case, tmp_path, monkeypatch)


@pytest.mark.parametrize("case", load("check"))
def test_check(case, tmp_path, monkeypatch):
    run_case(case, tmp_path, monkeypatch)


# ---- races and limits that a case file cannot stage --------------------------------------------


def test_parent_swapped_for_a_symlink_after_the_check_is_refused(tmp_path):
    from tools._paths import PathError, confine
    from tools.write_file import atomic_write

    root, outside = tmp_path / "repo", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    full = confine(root, "d/x.txt")  # checked while d is a real folder ...
    (root / "d").rmdir()
    (root / "d").symlink_to(outside)  # ... then swapped before the write
    with pytest.raises(PathError, match="symlink"):
        atomic_write(full, "evil", root)
    assert list(outside.iterdir()) == []


def test_every_tool_call_has_a_time_limit(tmp_path, monkeypatch):
    import tools
    from dataclasses import replace

    def stuck(ctx, **_):
        time.sleep(5)

    monkeypatch.setitem(tools.TOOLS, "git_status", replace(tools.TOOLS["git_status"], fn=stuck))
    monkeypatch.setattr(tools, "TOOL_TIME_LIMIT_S", 0.3)
    start = time.monotonic()
    result = tools.call_tool("git_status", {}, tools.ToolContext(tmp_path))
    assert not result.ok and "did not finish within 0.3s" in result.output
    assert time.monotonic() - start < 2

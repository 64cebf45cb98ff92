"""The repo tools: confinement, read/write/edit semantics, .gitignore, grep caps, shell limits."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
from scripted import git_repo, plain_dir  # noqa: F401 - fixtures

from tools import TOOLS, ToolContext, call_tool


@pytest.fixture
def ctx(git_repo) -> ToolContext:
    return ToolContext(git_repo, shell_timeout_s=10, max_output_chars=2000, in_git=True)


def run(ctx: ToolContext, name: str, **args):
    return call_tool(name, args, ctx)


# ---- confinement -----------------------------------------------------------------------------


@pytest.mark.parametrize("tool,extra", [
    ("read_file", {}), ("write_file", {"content": "x"}),
    ("edit_file", {"edits": [{"old": "a", "new": "b"}]}), ("git_diff", {}),
])
@pytest.mark.parametrize("bad", ["../outside.txt", "sub/../../outside.txt", "/etc/passwd", "~/x"])
def test_paths_outside_the_repo_are_refused(ctx, tmp_path, tool, extra, bad):
    (tmp_path / "outside.txt").write_text("secret\n")
    r = run(ctx, tool, path=bad, **extra)
    assert not r.ok and "secret" not in r.output
    assert (tmp_path / "outside.txt").read_text() == "secret\n"


def test_symlink_escaping_the_repo_is_refused(ctx, tmp_path):
    (tmp_path / "outside.txt").write_text("secret\n")
    os.symlink(tmp_path / "outside.txt", ctx.root / "link.txt")
    os.symlink(tmp_path, ctx.root / "linkdir")
    assert not run(ctx, "read_file", path="link.txt").ok
    assert not run(ctx, "write_file", path="linkdir/new.txt", content="x").ok
    assert not (tmp_path / "new.txt").exists()
    r = run(ctx, "edit_file", path="link.txt", edits=[{"old": "secret", "new": "gone"}])
    assert not r.ok and "outside the repo" in r.output
    assert (tmp_path / "outside.txt").read_text() == "secret\n"


def test_symlink_inside_the_repo_is_fine(ctx):
    os.symlink(ctx.root / "calc.py", ctx.root / "alias.py")
    assert run(ctx, "read_file", path="alias.py").output.startswith("def add")


def test_git_folder_is_off_limits(ctx):
    assert not run(ctx, "read_file", path=".git/config").ok


@pytest.mark.parametrize("spelling", [".GIT", ".Git", ".git.", ".git ", "GIT~1", ".g\u200cit"])
def test_git_folder_is_off_limits_however_spelled(ctx, spelling):
    # A case-insensitive filesystem (macOS, Windows) maps these onto .git itself.
    r = run(ctx, "write_file", path=f"{spelling}/hooks/pre-commit", content="#!/bin/sh\n")
    assert not r.ok and "off limits" in r.output
    assert not (ctx.root / spelling).exists()
    assert not run(ctx, "read_file", path=f"sub/{spelling}/config").ok


def test_git_folder_is_off_limits_wherever_it_lives(tmp_path):
    root = tmp_path / "wt"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "--separate-git-dir", str(root / "meta"), str(root)], check=True)
    os.symlink(root / "meta", root / "alias")
    ctx = ToolContext(root, in_git=True)
    for path in ("meta/config", "alias/config", "meta"):
        r = run(ctx, "read_file", path=path)
        assert not r.ok and "off limits" in r.output, path
    assert not run(ctx, "write_file", path="meta/hooks/post-checkout", content="x").ok
    assert run(ctx, "write_file", path="metadata.txt", content="fine\n").ok


# ---- read / write / edit -------------------------------------------------------------------


def test_read_file_whole_and_range(ctx):
    assert run(ctx, "read_file", path="calc.py").output.startswith("def add(a, b):\n")
    r = run(ctx, "read_file", path="calc.py", start_line=5, end_line=6)
    assert r.ok and "lines 5-6 of 6" in r.output and "def sub" in r.output and "def add" not in r.output
    assert not run(ctx, "read_file", path="calc.py", start_line=50).ok
    assert "no such file" in run(ctx, "read_file", path="nope.py").output


def test_read_file_refuses_binary_and_huge(ctx):
    (ctx.root / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    r = run(ctx, "read_file", path="blob.bin")
    assert not r.ok and "binary" in r.output
    (ctx.root / "big.txt").write_text("x" * 600_000)
    r = run(ctx, "read_file", path="big.txt")
    assert not r.ok and "start_line" in r.output
    assert run(ctx, "read_file", path="big.txt", start_line=1, end_line=1).ok


def test_read_file_caps_output(ctx):
    (ctx.root / "long.txt").write_text("".join(f"line {i}\n" for i in range(2000)))
    r = run(ctx, "read_file", path="long.txt")
    assert r.ok and len(r.output) < 2200 and "start_line=" in r.output


def test_write_file_is_atomic_and_keeps_mode(ctx):
    script = ctx.root / "run.sh"
    script.write_text("#!/bin/sh\necho old\n")
    script.chmod(0o755)
    r = run(ctx, "write_file", path="run.sh", content="#!/bin/sh\necho new\n")
    assert r.ok and r.changed == ("run.sh",)
    assert script.read_text().endswith("echo new\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert not [p for p in ctx.root.iterdir() if p.name.endswith(".tmp")]
    r = run(ctx, "write_file", path="pkg/new.py", content="x = 1\n")
    assert r.ok and (ctx.root / "pkg/new.py").read_text() == "x = 1\n"


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_write_file_new_file_mode_follows_umask(ctx, umask):
    old = os.umask(umask)
    try:
        assert run(ctx, "write_file", path="pkg/new.py", content="x = 1\n").ok
    finally:
        os.umask(old)
    assert stat.S_IMODE((ctx.root / "pkg/new.py").stat().st_mode) == 0o666 & ~umask


def test_edit_file_replaces_exactly_once(ctx):
    r = run(ctx, "edit_file", path="calc.py", edits=[{"old": "return a + b", "new": "return b + a"}])
    assert r.ok and r.changed == ("calc.py",) and "+    return b + a" in r.output
    assert "return b + a" in (ctx.root / "calc.py").read_text()


def test_edit_file_no_match_points_at_closest_lines(ctx):
    before = (ctx.root / "calc.py").read_text()
    r = run(ctx, "edit_file", path="calc.py", edits=[{"old": "    return a+b", "new": "x"}])
    assert not r.ok and "not found" in r.output and "lines 2-2" in r.output and "return a + b" in r.output
    assert (ctx.root / "calc.py").read_text() == before


def test_edit_file_multiple_matches_counts_them(ctx):
    before = (ctx.root / "calc.py").read_text()
    r = run(ctx, "edit_file", path="calc.py", edits=[{"old": "(a, b):", "new": "(x, y):"}])
    assert not r.ok and "occurs 2 times" in r.output and "lines 1, 5" in r.output
    assert (ctx.root / "calc.py").read_text() == before


def test_edit_file_several_edits_all_or_nothing(ctx):
    ok = [{"old": "def add", "new": "def plus"}, {"old": "def sub", "new": "def minus"}]
    assert run(ctx, "edit_file", path="calc.py", edits=ok).ok
    text = (ctx.root / "calc.py").read_text()
    assert "def plus" in text and "def minus" in text
    bad = [{"old": "def plus", "new": "def add"}, {"old": "nowhere", "new": "x"}]
    r = run(ctx, "edit_file", path="calc.py", edits=bad)
    assert not r.ok and "edit 2" in r.output and (ctx.root / "calc.py").read_text() == text


def test_arguments_are_validated_against_the_schema(ctx):
    r = run(ctx, "edit_file", path="calc.py", edits=[{"old": "", "new": "x"}])
    assert not r.ok and "invalid arguments" in r.output
    assert "required" in call_tool("read_file", {}, ctx).output
    assert "unknown tool" in call_tool("delete_everything", {}, ctx).output


# ---- listing and search -----------------------------------------------------------------------


def test_list_files_respects_gitignore(ctx):
    (ctx.root / "build").mkdir()
    (ctx.root / "build/out.py").write_text("x\n")
    (ctx.root / "debug.log").write_text("x\n")
    (ctx.root / "new.py").write_text("x\n")  # untracked, not ignored
    out = run(ctx, "list_files").output.splitlines()
    assert "calc.py" in out and "new.py" in out
    assert "debug.log" not in out and "build/out.py" not in out
    assert run(ctx, "list_files", pattern="*.py").output.splitlines() == ["calc.py", "new.py"]


def test_list_files_outside_git_walks_the_tree(plain_dir):
    ctx = ToolContext(plain_dir)
    (plain_dir / "sub").mkdir()
    (plain_dir / "sub/a.py").write_text("x\n")
    out = call_tool("list_files", {"pattern": "**/*.py"}, ctx).output.splitlines()
    assert out == ["calc.py", "sub/a.py"]


def test_grep_finds_and_caps(ctx):
    r = run(ctx, "grep", pattern=r"def \w+")
    assert r.ok and "calc.py:1: def add(a, b):" in r.output and "calc.py:5:" in r.output
    (ctx.root / "many.txt").write_text("hit\n" * 500)
    r = run(ctx, "grep", pattern="hit", glob="*.txt")
    assert r.output.count("many.txt:") == 100 and "400 more matches" in r.output
    assert "bad regex" in run(ctx, "grep", pattern="(").output


# ---- shell ------------------------------------------------------------------------------------


def test_shell_runs_in_the_repo(ctx):
    r = run(ctx, "run_shell", command="pwd && ls calc.py")
    assert r.ok and str(ctx.root.resolve()) in r.output and "exit code 0" in r.output
    r = run(ctx, "run_shell", command="exit 3")
    assert not r.ok and "exit code 3" in r.output


def test_shell_timeout_kills_the_command(ctx):
    t = time.perf_counter()
    r = run(ctx, "run_shell", command="sleep 30; echo never", timeout_s=1)
    assert not r.ok and "timed out after 1s" in r.output and "never" not in r.output
    assert time.perf_counter() - t < 5


def test_shell_output_is_capped(ctx):
    r = run(ctx, "run_shell", command="yes spam | head -c 300000")
    assert r.ok and len(r.output) < 2300 and "output cut" in r.output


# ---- git ----------------------------------------------------------------------------------------


def test_git_status_and_diff(ctx, plain_dir):
    (ctx.root / "calc.py").write_text("changed\n")
    assert "calc.py" in run(ctx, "git_status").output
    assert "+changed" in run(ctx, "git_diff", path="calc.py").output
    outside = ToolContext(plain_dir)
    assert "not a git repository" in call_tool("git_status", {}, outside).output


def test_every_tool_has_a_schema_and_description():
    import jsonschema

    for tool in TOOLS.values():
        jsonschema.Draft202012Validator.check_schema(tool.schema)
        assert tool.description and tool.kind in ("read", "edit", "shell")

"""Tools always return, quickly, with data: catastrophic regexes and globs, symlink loops,
FIFOs, devices, sockets, unreadable and huge (sparse) files give `ok=False` or the right
slice, never an exception or a hang."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import time
from pathlib import Path

import pytest
from scripted import git_repo, plain_dir  # noqa: F401 - fixtures

import tools.grep
import tools.read_file
from tools import ToolContext, ToolResult, call_tool

AS_ROOT = os.geteuid() == 0
GB = 1 << 30


@pytest.fixture(params=["git", "plain"])
def ctx(request, git_repo, plain_dir) -> ToolContext:
    """Both listings: `git ls-files` and the walk outside git."""
    if request.param == "git":
        return ToolContext(git_repo, max_output_chars=2000, in_git=True)
    return ToolContext(plain_dir, max_output_chars=2000)


@pytest.fixture
def git_ctx(git_repo) -> ToolContext:
    return ToolContext(git_repo, max_output_chars=2000, in_git=True)


def run(ctx: ToolContext, name: str, limit_s: float = 3.0, **args) -> ToolResult:
    """Call a tool; it must return a ToolResult within `limit_s`."""
    t = time.monotonic()
    r = call_tool(name, args, ctx)
    assert isinstance(r, ToolResult)
    assert time.monotonic() - t < limit_s, f"{name} took {time.monotonic() - t:.1f}s"
    return r


# ---- catastrophic patterns ----------------------------------------------------------------------


def test_catastrophic_regex_is_stopped(git_ctx, monkeypatch):
    monkeypatch.setattr(tools.grep, "TIME_LIMIT_S", 1.5)
    (git_ctx.root / "aaa.txt").write_text("a" * 5000 + "!\n")
    r = run(git_ctx, "grep", limit_s=5, pattern="(a+)+$")
    assert not r.ok and "cut after 1.5s" in r.output and "simplify" in r.output
    assert run(git_ctx, "grep", pattern="a{3}!").output.startswith("aaa.txt:1:")  # still usable


@pytest.mark.parametrize("tool,arg", [("list_files", "pattern"), ("grep", "glob")])
def test_catastrophic_glob_is_linear(ctx, tool, arg):
    # a backtracking regex for this glob tries ~C(250, 40) splits before failing
    (ctx.root / ("a" * 250)).write_text("x\n")
    extra = {"pattern": "x"} if tool == "grep" else {}
    r = run(ctx, tool, limit_s=2, **{arg: "*a" * 40 + "*b"}, **extra)
    assert r.ok and r.output.startswith("no ")
    assert run(ctx, "list_files", pattern="a" * 150 + "*").output == "a" * 250


# ---- special files -----------------------------------------------------------------------------


def test_symlink_loops(ctx):
    os.symlink("loop", ctx.root / "loop")
    os.symlink("pong", ctx.root / "ping")
    os.symlink("ping", ctx.root / "pong")
    os.symlink(".", ctx.root / "self")  # a folder loop: a walk must not follow it
    for path in ("loop", "ping", "loop/x"):
        r = run(ctx, "read_file", path=path)
        assert not r.ok and "loop" in r.output, r.output
        assert not run(ctx, "grep", pattern="x", path=path).ok
        assert not run(ctx, "list_files", path=path).ok
    listed = run(ctx, "list_files").output.splitlines()
    assert "calc.py" in listed and not any(n.startswith(("loop", "ping", "self")) for n in listed)
    assert run(ctx, "grep", pattern="def add").ok


def test_fifo_never_blocks(ctx):
    os.mkfifo(ctx.root / "pipe")
    r = run(ctx, "read_file", path="pipe")
    assert not r.ok and "FIFO" in r.output
    assert not run(ctx, "read_file", path="pipe", start_line=1, end_line=2).ok
    assert not run(ctx, "grep", pattern="x", path="pipe").ok
    assert "pipe" not in run(ctx, "list_files").output
    assert "calc.py:1:" in run(ctx, "grep", pattern="def add").output


def test_device_file(ctx):
    try:  # a /dev/zero twin inside the repo (needs CAP_MKNOD)
        os.mknod(ctx.root / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot create a device node here: {e}")
    r = run(ctx, "read_file", path="zero", start_line=1, end_line=5)
    assert not r.ok and "character device" in r.output
    assert "zero" not in run(ctx, "list_files").output
    assert run(ctx, "grep", pattern="def add").ok


def test_socket_file(ctx):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(ctx.root / "sock"))
    except OSError as e:  # path too long for sun_path
        pytest.skip(str(e))
    try:
        r = run(ctx, "read_file", path="sock")
        assert not r.ok and "socket" in r.output
        assert not run(ctx, "grep", pattern="x", path="sock").ok
    finally:
        s.close()


def test_directory_is_not_a_file(ctx):
    (ctx.root / "pkg").mkdir()
    r = run(ctx, "read_file", path="pkg")
    assert not r.ok and "directory" in r.output


@pytest.mark.skipif(AS_ROOT, reason="root reads a chmod 000 file anyway")
def test_unreadable_file_and_folder(ctx):
    (ctx.root / "secret.txt").write_text("hidden\n")
    (ctx.root / "secret.txt").chmod(0)
    (ctx.root / "locked").mkdir()
    (ctx.root / "locked/in.txt").write_text("hidden\n")
    (ctx.root / "locked").chmod(0)
    try:
        r = run(ctx, "read_file", path="secret.txt")
        assert not r.ok and "Permission denied" in r.output
        assert run(ctx, "grep", pattern="hidden").output.startswith("no matches")
        assert run(ctx, "list_files").ok
    finally:
        (ctx.root / "locked").chmod(0o755)


# ---- huge files ----------------------------------------------------------------------------------


def sparse(path: Path, head: bytes, size: int) -> Path:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)  # a hole: no disk used, reads as NUL bytes
    return path


def test_huge_sparse_file_line_range_streams(ctx):
    head = b"".join(b"line %d\n" % i for i in range(1, 3000))  # > 8 KB of text before the hole
    sparse(ctx.root / "huge.log", head, 2 * GB)
    r = run(ctx, "read_file", limit_s=1, path="huge.log", start_line=5, end_line=7)
    assert r.ok and r.output == f"[huge.log lines 5-7 of a {2 * GB}-byte file]\nline 5\nline 6\nline 7\n"
    r = run(ctx, "read_file", limit_s=1, path="huge.log")
    assert not r.ok and "start_line" in r.output
    assert run(ctx, "grep", pattern="line 5$").output.startswith("no matches")  # too big: skipped


def test_huge_sparse_file_of_zeros_is_binary(ctx):
    sparse(ctx.root / "disk.img", b"", GB)
    r = run(ctx, "read_file", limit_s=1, path="disk.img", start_line=1, end_line=10)
    assert not r.ok and "binary" in r.output


def test_one_giant_line_is_cut_and_the_model_can_read_on(ctx):
    (ctx.root / "min.js").write_bytes(b"x" * 3_000_000 + b"\nsecond\n")
    r = run(ctx, "read_file", path="min.js", start_line=1, end_line=1)
    assert r.ok and len(r.output) < 2200 and "start_line=2" in r.output
    r = run(ctx, "read_file", path="min.js", start_line=2)
    assert r.ok and r.output.endswith("second\n")


def test_line_beyond_the_scan_limit_is_refused(ctx, monkeypatch):
    monkeypatch.setattr(tools.read_file, "MAX_SCAN_BYTES", 1 << 20)
    (ctx.root / "wide.txt").write_bytes((b"y" * 4000 + b"\n") * 1000)  # 4 MB
    r = run(ctx, "read_file", path="wide.txt", start_line=900, end_line=901)
    assert not r.ok and "not reachable" in r.output
    assert run(ctx, "read_file", path="wide.txt", start_line=100, end_line=100).ok


def test_range_cut_inside_a_multibyte_character(ctx):
    (ctx.root / "accents.txt").write_text("é" * 5000 + "\n", encoding="utf-8")
    r = run(ctx, "read_file", path="accents.txt", start_line=1, end_line=1)
    assert r.ok and r.output.startswith("é" * 1000)


def test_range_past_the_end_and_inverted(ctx):
    assert "has 6 lines" in run(ctx, "read_file", path="calc.py", start_line=7).output
    assert "before start_line" in run(ctx, "read_file", path="calc.py", start_line=5, end_line=2).output
    r = run(ctx, "read_file", path="calc.py", start_line=6, end_line=99)
    assert r.ok and "lines 6-6 of 6" in r.output


def test_no_tool_raises_on_hostile_paths(ctx):
    os.mkfifo(ctx.root / "fifo")
    os.symlink("loop", ctx.root / "loop")
    sparse(ctx.root / "big.bin", b"", GB)
    paths = ["fifo", "loop", "loop/a/b", "big.bin", "calc.py/x", "nope", "\u202e.txt", " ", "a" * 200]
    for path in paths:
        for name, args in (("read_file", {"path": path}), ("read_file", {"path": path, "start_line": 3}),
                           ("grep", {"pattern": "x", "path": path}), ("list_files", {"path": path})):
            r = run(ctx, name, **args)
            assert r.output and "Traceback" not in r.output, (name, path, r.output)
            assert not r.ok or path == "big.bin", (name, path, r.output)


def test_listing_after_git_is_gone(git_ctx):
    # `git ls-files` failing (a broken repo) falls back to the bounded walk
    shutil.rmtree(git_ctx.root / ".git")
    assert "calc.py" in run(git_ctx, "list_files").output.splitlines()

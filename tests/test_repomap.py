"""The repository map (agent/core/repomap.py): outlines per language, with tree-sitter and with
Python's ast, ranking, the token budget, what is never read, and when the first message has one."""

from __future__ import annotations

import os
import subprocess

import pytest
from scripted import ScriptedModel, conversation, full_auto, make_repo

from agent.core import repomap
from agent.core.attach import MAX_LISTED, attach_mentions, typed_text
from tools._base import ToolContext

PY = '''"""A module."""
import os

MAX_RETRIES = 5  # per request
TABLE = {
    "a": 1,
}
lower = 3
_PRIVATE = 4


@dataclass
class Store(Base):
    """Keeps things."""
    LIMIT = 3

    def __init__(self, root: Path,
                 size: int = 10) -> None:  # trailing
        self.root = root

    @property
    def size(self) -> int: return 1

    async def fetch(self, key: str, sep: str = "#") -> bytes:
        return b""

    def _hidden(self):
        pass

    class Inner:
        def deep(self):
            pass


def load_config(path: str, *, strict: bool = False) -> dict:
    return {}


def _helper():
    pass
'''

PY_OUTLINE = [
    (0, "MAX_RETRIES = 5", "MAX_RETRIES"),
    (0, "TABLE = ...", "TABLE"),
    (0, "class Store(Base)", "Store"),
    (1, "def __init__(self, root: Path, size: int = 10) -> None", "__init__"),
    (1, "def size(self) -> int", "size"),
    (1, 'async def fetch(self, key: str, sep: str = "#") -> bytes', "fetch"),
    (1, "class Inner", "Inner"),
    (0, "def load_config(path: str, *, strict: bool = False) -> dict", "load_config"),
]

TS = '''import { x } from "./x";
export interface Shape { area(): number; name: string }
export type Id = string | number;
export abstract class Base<T> implements Shape {
  private x: number = 1;
  constructor(public readonly n: number) { }
  area(): number { return 0 }
  abstract name(): string;
}
export function make<T>(x: T,
    y: number): Base<T> { return null as any; }
export const build = async (a: number): Promise<void> => {};
const MAX = 10;
let counter = 0;
'''

GO = '''package shapes

import "fmt"

const Max = 10
const hidden = 1

type Point struct {
	X, Y int
}

func (p *Point) Move(dx int) { p.X += dx }

func Add(a, b int) int {
	return a + b
}
'''

RUST = '''use std::fmt;
pub const MAX: usize = 10;
pub struct Point { x: i32 }
pub trait Area { fn area(&self) -> f64; }
impl Area for Point {
    fn area(&self) -> f64 { 0.0 }
}
pub fn add(a: i32, b: i32) -> i32 { a + b }
'''


def _no_library(monkeypatch):
    monkeypatch.setattr(repomap, "_parser", lambda lang: None)


needs_library = pytest.mark.skipif(repomap._parser("python") is None,
                                   reason="tree-sitter and its grammars are not installed")


@needs_library
def test_python_outline_with_tree_sitter():
    assert repomap.outline("m.py", PY.encode()) == PY_OUTLINE


def test_python_outline_without_the_library_is_the_same(monkeypatch):
    _no_library(monkeypatch)
    assert repomap.outline("m.py", PY.encode()) == PY_OUTLINE
    assert repomap.outline("m.ts", TS.encode()) is None  # other languages: not outlined


def sigs(path: str, src: str) -> list[tuple[int, str]]:
    return [(d, s) for d, s, _ in repomap.outline(path, src.encode())]


@needs_library
def test_typescript_go_and_rust_outlines():
    assert sigs("a.ts", TS) == [
        (0, "interface Shape"), (1, "area(): number"), (0, "type Id = string | number"),
        (0, "abstract class Base<T> implements Shape"),
        (1, "constructor(public readonly n: number)"), (1, "area(): number"),
        (1, "abstract name(): string"), (0, "function make<T>(x: T, y: number): Base<T>"),
        (0, "const build = async (a: number): Promise<void> =>"), (0, "const MAX = 10")]
    assert sigs("a.go", GO) == [
        (0, "const Max = 10"), (0, "type Point struct"), (0, "func (p *Point) Move(dx int)"),
        (0, "func Add(a, b int) int")]
    assert sigs("a.rs", RUST) == [
        (0, "pub const MAX: usize = 10"), (0, "pub struct Point"), (0, "pub trait Area"),
        (1, "fn area(&self) -> f64"), (0, "impl Area for Point"), (1, "fn area(&self) -> f64"),
        (0, "pub fn add(a: i32, b: i32) -> i32")]
    js = "export class Calc extends Base {\n  static mul(a, b) { return a * b; }\n}\n" \
         "export function add(a, b) { return a + b; }\n"
    assert sigs("a.js", js) == [(0, "class Calc extends Base"), (1, "static mul(a, b)"),
                                (0, "function add(a, b)")]


@pytest.mark.parametrize("library", [True, False])
def test_a_file_with_a_syntax_error_is_skipped(library, monkeypatch, tmp_path):
    if library and repomap._parser("python") is None:
        pytest.skip("tree-sitter is not installed")
    if not library:
        _no_library(monkeypatch)
    assert repomap.outline("bad.py", b"def broken(:\n    pass\n") is None
    make_repo(tmp_path / "r", {"bad.py": "def broken(:\n    pass\n", "good.py": "def fine():\n    pass\n"})
    out = repomap.repo_map(tmp_path / "r", ["bad.py", "good.py"], "fix it", 500)
    assert "good.py:\n  def fine()" in out and "bad.py" not in out and "broken" not in out


def _module(i: int, body: str = "") -> str:
    return "".join(f"def f{i}_{k}(a, b):\n    return a\n\n\n" for k in range(8)) + body


def test_ranking_puts_the_file_defining_a_mentioned_name_first(tmp_path):
    files = {f"pkg/m{i}.py": _module(i) for i in range(10)}
    files["pkg/store.py"] = "def load_config(path):\n    return {}\n"
    files["pkg/uses.py"] = "from pkg.store import load_config\n\ndef main():\n    load_config('x')\n"
    files["a_top.py"] = "def unrelated():\n    pass\n"
    root = make_repo(tmp_path / "r", files)
    out = repomap.repo_map(root, sorted(files), "Why does `load_config` ignore the path?", 2000,
                           names=["load_config"])
    order = [line[:-1] for line in out.splitlines()[1:] if not line.startswith(" ")]
    assert order[:2] == ["pkg/store.py", "pkg/uses.py"]
    # Without a mention: files whose definitions others use, then shallower before deeper.
    out = repomap.repo_map(root, sorted(files), "Tidy up.", 2000)
    order = [line[:-1] for line in out.splitlines()[1:] if not line.startswith(" ")]
    assert order[:3] == ["pkg/store.py", "a_top.py", "pkg/m0.py"]
    # Words of the message meet path and definition names.
    files["pkg/prefix_disk.py"] = "class DiskTier:\n    def write(self, data):\n        pass\n"
    files["pkg/prefill_cache.py"] = "def fill(cache):\n    pass\n"  # "prefill" is not "prefix"
    root = make_repo(tmp_path / "r2", files)
    out = repomap.repo_map(root, sorted(files), "where is the prefix cache written?", 2000)
    assert out.splitlines()[1] == "pkg/prefix_disk.py:"


def test_the_map_fits_its_budget_and_never_cuts_a_file_entry(tmp_path):
    files = {f"src/mod{i:02d}.py": _module(i) for i in range(80)}
    root = make_repo(tmp_path / "r", files)
    for budget in (100, 300, 1000):
        out = repomap.repo_map(root, sorted(files), "Refactor the modules.", budget)
        assert repomap.approx_tokens(out) <= budget
        blocks = out.split("\n")[1:]
        paths = [b[:-1] for b in blocks if not b.startswith(" ")]
        assert paths, budget
        for path in paths:  # each file's entry whole: all 8 functions
            entry = repomap.Outline(path, repomap.outline(path, files[path].encode())).render()
            assert entry in out
        assert sum(line.startswith("  def ") for line in blocks) == 8 * len(paths)
    assert repomap.repo_map(root, sorted(files), "x", 5) == ""  # not even the header fits
    assert repomap.repo_map(root, sorted(files), "x", 0) == ""
    # A counter given counts instead of characters / 3.
    words = repomap.repo_map(root, sorted(files), "x", 200, count=lambda s: len(s.split()))
    assert len(words.split()) <= 200 < repomap.approx_tokens(words)


def test_ignored_files_and_links_out_of_the_repo_are_never_read(tmp_path, monkeypatch):
    outside = tmp_path / "outside.py"
    outside.write_text("def secret_outside():\n    pass\n")
    files = {f"m{i:02d}.py": f"def f{i}():\n    pass\n" for i in range(MAX_LISTED + 5)}
    files[".gitignore"] = "ignored.py\n"
    root = make_repo(tmp_path / "r", files)
    (root / "ignored.py").write_text("def secret_ignored():\n    pass\n")
    (root / "link.py").symlink_to(outside)
    os.mkfifo(root / "pipe.py")
    read = []
    real = repomap.read_source
    monkeypatch.setattr(repomap, "read_source", lambda r, p, n: read.append(p) or real(r, p, n))
    ctx = ToolContext(root, in_git=True, repo_map_tokens=4000)
    message, _ = attach_mentions("Tidy up secret_ignored and secret_outside.", ctx, plain=True,
                                 listing=True)
    head = message.split("Repository map", 1)[1]
    assert "m00.py:\n  def f0()" in head
    assert "def secret" not in message
    assert not {"ignored.py", "link.py", "pipe.py"} & set(read) and "m00.py" in read
    # Given those paths anyway, the reader refuses them: the link leads out, the FIFO is no file.
    assert real(root, "link.py", 10_000) is None and real(root, "pipe.py", 10_000) is None
    assert real(root, "../outside.py", 10_000) is None and real(root, ".git/config", 10_000) is None
    out = repomap.repo_map(root, ["link.py", "pipe.py", "m01.py"], "x", 1000)
    assert "m01.py" in out and "secret" not in out


def test_a_big_file_is_not_read_past_the_cap(tmp_path):
    root = make_repo(tmp_path / "r", {"small.py": "def small():\n    pass\n"})
    big = root / "big.py"
    big.write_text("def big():\n    pass\n")
    with big.open("ab") as f:
        f.truncate(8 << 30)  # 8 GiB, sparse: reading it would take minutes
    assert repomap.read_source(root, "big.py", repomap.MAX_FILE_BYTES) is None
    out = repomap.repo_map(root, ["big.py", "small.py"], "x", 1000)
    assert "small.py" in out and "big.py" not in out


def test_no_map_for_a_repository_the_listing_covers(tmp_path):
    root = make_repo(tmp_path / "small", {"calc.py": "def add(a, b):\n    return a + b\n",
                                          "test_calc.py": "def test_add():\n    pass\n"})
    ctx = ToolContext(root, in_git=True, repo_map_tokens=1024)
    message, _ = attach_mentions("Fix add", ctx, plain=True, listing=True)
    assert "Files in the repository: calc.py, test_calc.py." in message
    assert "Repository map" not in message
    # More source text than a message attaches: the map comes, even with few files.
    (root / "big.py").write_text(_module(1) + "x = 1\n" * 8000)
    subprocess.run(["git", "add", "big.py"], cwd=root, check=True)
    message, _ = attach_mentions("Fix add", ctx, plain=True, listing=True)
    mapped = message.split("Repository map (definitions per file, most relevant first):\n")[1]
    assert mapped.startswith("calc.py:\n  def add(a, b)\n") and "\nbig.py:\n  def f1_0(a, b)" in mapped
    assert typed_text(message) == "Fix add"
    # A file attached whole is not outlined again; off with a budget of 0.
    message, attached = attach_mentions("Fix add in calc.py", ctx, plain=True, listing=True)
    assert attached == ["calc.py"] and "\ncalc.py:\n" not in message.split("Attached files:")[0]
    off = ToolContext(root, in_git=True, repo_map_tokens=0)
    assert "Repository map" not in attach_mentions("Fix add", off, plain=True, listing=True)[0]


def test_the_first_message_of_a_conversation_carries_the_configured_map(tmp_path):
    files = {f"lib/m{i:02d}.py": f"def fn{i}(x):\n    return x\n" for i in range(MAX_LISTED + 1)}
    root = make_repo(tmp_path / "r", files)
    model = ScriptedModel(["ok", "ok"])
    conv = conversation(root, model, full_auto(attach_mentioned=True, repo_map_tokens=200))
    list(conv.send("What does fn7 do?"))
    list(conv.send("And fn8?"))
    first, second = model.seen[0][-1]["content"], model.seen[1][-1]["content"]
    mapped = first.split("Repository map (definitions per file, most relevant first):\n", 1)[1]
    assert mapped.startswith("lib/m07.py:\n  def fn7(x)")
    assert repomap.approx_tokens("Repository map" + mapped.split("\n\n")[0]) <= 200
    assert "Repository map" not in second


def test_repo_map_tokens_is_range_checked():
    from agent.config import ConfigError, check_value

    assert check_value("repo_map_tokens", "2048", "test") == 2048
    with pytest.raises(ConfigError, match="repo_map_tokens"):
        check_value("repo_map_tokens", -1, "test")



def test_files_parsed_bytes_read_and_time_are_capped(tmp_path, monkeypatch):
    files = {f"m{i:02d}.py": f"def f{i}():\n    pass\n" for i in range(20)}
    root = make_repo(tmp_path / "r", files)
    read = []
    real = repomap.read_source
    monkeypatch.setattr(repomap, "read_source", lambda r, p, n: read.append((p, n)) or real(r, p, n))
    monkeypatch.setattr(repomap, "MAX_FILES", 5)
    out = repomap.repo_map(root, sorted(files), "x", 1000)
    assert [p for p, _ in read] == [f"m{i:02d}.py" for i in range(5)] and out.count(".py:") == 5
    read.clear()
    monkeypatch.setattr(repomap, "MAX_FILES", 400)
    monkeypatch.setattr(repomap, "MAX_BYTES", 3 * len(files["m00.py"]))
    repomap.repo_map(root, sorted(files), "x", 1000)
    assert len(read) == 3 and read[-1][1] == len(files["m00.py"])  # the last read: what is left
    read.clear()
    monkeypatch.setattr(repomap, "MAX_SECONDS", -1.0)
    assert repomap.repo_map(root, sorted(files), "x", 1000) == "" and read == []

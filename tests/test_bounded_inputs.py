"""Hostile input read through the bounded readers (agent/engine/bounded.py, tools/_schema.py):
nested JSON on stream-json stdin, FIFOs, symlinks and devices in the caches, GGUF headers with
counts and lengths that do not fit, damaged converted-weights entries, schemas whose regexes
backtrack without end. Each ends in one line and exit 2, or a warning and a run that goes on,
within seconds and bounded memory. What could hang runs in a subprocess with a timeout, so a
regression fails instead of hanging the suite."""

from __future__ import annotations

import io
import json
import logging
import os
import resource
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from scripted import SAMPLE, make_repo

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
GIB = 1 << 30


def run(args: list[str], *, stdin: bytes | None = None, timeout: float = 60, env: dict | None = None,
        max_memory: int | None = None) -> subprocess.CompletedProcess:
    """`args` in a subprocess from the repo root; still running after `timeout`: the test fails."""
    def limit() -> None:
        if max_memory:
            resource.setrlimit(resource.RLIMIT_AS, (max_memory, max_memory))

    try:
        return subprocess.run(args, input=stdin, capture_output=True, timeout=timeout, cwd=ROOT,
                              env={**os.environ, **(env or {})}, preexec_fn=limit, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: {' '.join(args)[:120]} still running after {timeout:g} s")


def py(code: str, *argv: str, **kw) -> subprocess.CompletedProcess:
    return run([sys.executable, "-c", code, *argv], **kw)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    """The one line on stderr of a run that failed with exit code 2: no traceback, no byte a
    terminal acts on (what the message quotes from a file is escaped)."""
    err = r.stderr.decode(errors="replace")
    lines = [line for line in err.splitlines() if line.strip()]
    assert r.returncode == 2 and "Traceback" not in err and len(lines) == 1, err[-2000:]
    assert not any(c < 0x20 and c not in b"\n" or c == 0x7F for c in r.stderr), err[-2000:]
    return lines[0]


# ---- stream-json stdin ---------------------------------------------------------------------


def test_a_100k_deep_stream_json_line_is_one_error_and_exit_2(tmp_path):
    repo = make_repo(tmp_path / "repo", SAMPLE)
    line = '{"type":"user","message":' + "[" * 100_000 + "]" * 100_000 + "}\n"
    r = run([sys.executable, str(TESTS / "scripted_cli.py"), "-p", "--input-format", "stream-json",
             "--output-format", "stream-json", "--repo", str(repo)], stdin=line.encode(), timeout=60,
            env={"SCRIPTED_TURNS": '["hi"]', "SPEC_AGENT_HOME": str(tmp_path / "home")})
    error = one_error_line(r)
    assert error.startswith("spec-agent: error: stdin line 1: not JSON (nested") and "the limit is" in error


def _ended(stdin) -> tuple[str, str]:
    from agent.headless import StreamInput

    inbox = StreamInput(stdin, write=None).inbox
    return inbox.get(timeout=20)  # a reader thread that died would leave nothing: queue.Empty


def test_an_overlong_line_and_a_failing_stdin_still_end_the_reader(monkeypatch):
    import agent.headless as headless

    monkeypatch.setattr(headless, "MAX_LINE", 100)
    kind, why = _ended(io.StringIO('{"type": "user", "message": "' + "x" * 200 + '"}\n'))
    assert kind == "error" and "longer than 100 characters" in why

    class Broken(io.StringIO):
        def readline(self, *a):
            raise RecursionError("deep")

    assert _ended(Broken()) == ("error", "cannot read stdin: RecursionError")


# ---- the prefix cache folder ---------------------------------------------------------------

_SCAN = """
import json, sys
from pathlib import Path
from agent.engine.prefix_disk import DiskTier
warnings = []
disk = DiskTier(Path(sys.argv[1]), 1 << 30, warnings.append)
tokens = tuple(range(100))
found = disk.candidates("k", tokens, 0)
again = disk.candidates("k", tokens, 0)
loaded = [disk.load(p, "k") for p in sorted(Path(sys.argv[1], "k").iterdir())]
print(json.dumps({"found": len(found) + len(again), "wants": disk.wants("k", tokens, "turn"),
                  "loaded": [x is not None for x in loaded], "warnings": warnings}))
"""


def test_fifos_links_devices_and_bad_headers_in_the_prefix_cache_never_block(tmp_path):
    from agent.engine.prefix_disk import digest

    folder = tmp_path / "cache" / "k"
    folder.mkdir(parents=True)
    outside = tmp_path / "precious.txt"
    outside.write_text("the user's file")

    def name(n: int, kind: str = "turn") -> Path:
        return folder / f"{kind}-{n}-{digest(tuple(range(n)))}-0123456789abcdef.safetensors"

    os.mkfifo(name(5))
    name(6).symlink_to("/dev/zero")
    name(7).mkdir()
    name(8).symlink_to(outside)
    name(9).write_bytes(struct.pack("<Q", 200_008) + b"[" * 200_000 + b"]" * 8)  # nested header
    name(10).write_bytes(struct.pack("<Q", 4) + b"\xff\xfe\xfd\xfc")  # not UTF-8
    name(11).write_bytes(struct.pack("<Q", 1 << 62))  # a header larger than the file
    r = py(_SCAN, str(tmp_path / "cache"), timeout=60)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    out = json.loads(r.stdout)
    assert out["found"] == 0 and out["wants"] is True and not any(out["loaded"])
    assert len(out["warnings"]) == 7  # one per bad entry, however often it is met
    assert all(w.startswith("prefix cache: ignored and deleted") for w in out["warnings"])
    assert [p.name for p in folder.iterdir()] == [name(7).name]  # a folder cannot be unlinked
    assert outside.read_text() == "the user's file"  # a link is removed, never its target


# ---- GGUF headers --------------------------------------------------------------------------

STR, ARR, U8, U32 = 8, 9, 0, 4


def _s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, vtype: int, payload: bytes) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + payload


def _arr(etype: int, n: int, body: bytes = b"") -> bytes:
    return struct.pack("<IQ", etype, n) + body


def _gguf(kvs: list[bytes], n_tensors: int = 0, tensors: bytes = b"") -> bytes:
    data = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(kvs)) + b"".join(kvs) + tensors
    return data + b"\0" * (64 + -len(data) % 32)


_LLAMA = [_kv("general.architecture", STR, _s("llama"))]
_U32_4 = struct.pack("<I", 4)
HOSTILE_GGUF = {
    "nested_arrays": (_gguf([_kv("x", ARR, _arr(ARR, 1) * 50_000 + _arr(U8, 0))]), "array of arrays"),
    "huge_array_count": (_gguf([_kv("x", ARR, _arr(U8, 1 << 62))]), "does not fit"),
    "max_u64_count": (_gguf([_kv("x", ARR, _arr(U32, (1 << 64) - 1))]), "does not fit"),
    "huge_string_length": (_gguf([_kv("x", STR, struct.pack("<Q", (1 << 63) + 5))]), "does not fit"),
    "strings_that_cannot_fit": (_gguf([_kv("x", ARR, _arr(STR, 4_000_000, _s("") * 1000))]), "does not fit"),
    "huge_tensor_count": (_gguf(_LLAMA, n_tensors=1 << 40), "does not fit"),
    "unknown_value_type": (_gguf([_kv("x", 99, b"")]), "value type 99"),
    "architecture_is_an_array": (_gguf([_kv("general.architecture", ARR, _arr(U32, 2, b"\0" * 8))]),
                                 "wrong type"),
    "width_is_a_string": (_gguf(_LLAMA + [_kv("llama.embedding_length", STR, _s("abc")),
                                          _kv("llama.attention.head_count", U32, _U32_4)]), "wrong type"),
    "layers_without_tensors": (_gguf(_LLAMA + [_kv(f"llama.{k}", U32, _U32_4) for k in (
        "embedding_length", "attention.head_count", "block_count", "feed_forward_length", "vocab_size")]),
        "says 4 layers, its tensors have 0"),
    "tensor_dims_overflow": (_gguf(_LLAMA, 1, _s("token_embd.weight") + struct.pack("<IQQIQ", 2, 1 << 40,
                                                                                     1 << 40, 0, 0)), "truncated"),
    "escapes_in_a_tensor_name": (_gguf(_LLAMA, 1, _s(b"tok\x1b[8m\nhid\x1b]0;t\x07") + struct.pack(
        "<IQIQ", 1, 4, 77, 0)), "tensor 'tok\\x1b[8m hid\\x1b]0;t\\x07' has unknown GGML type 77"),
    "bad_utf8_key": (_gguf([_kv("x", U32, _U32_4)[:8] + b"\xff" + struct.pack("<I", U32) + _U32_4]),
                     "architecture"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_GGUF))
def test_a_hostile_gguf_header_is_one_line_and_exit_2_in_bounded_memory(tmp_path, case):
    data, why = HOSTILE_GGUF[case]
    path = tmp_path / f"{case}.gguf"
    path.write_bytes(data)
    r = run([sys.executable, "-m", "agent.cli", "-p", "hi", "-m", str(path), "--blas", "off"],
            timeout=120, max_memory=GIB, env={"SPEC_AGENT_HOME": str(tmp_path / "home")})
    assert why in one_error_line(r)


def test_a_fifo_or_a_device_as_a_model_is_refused(tmp_path):
    os.mkfifo(tmp_path / "pipe.gguf")
    (tmp_path / "zero.gguf").symlink_to("/dev/zero")
    for name in ("pipe.gguf", "zero.gguf"):
        r = run([sys.executable, "-m", "agent.cli", "-p", "hi", "-m", str(tmp_path / name), "--blas", "off"],
                timeout=60, env={"SPEC_AGENT_HOME": str(tmp_path / "home")})
        assert "not a regular file" in one_error_line(r)


_LLAMA_CONFIG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 512,
                 "num_attention_heads": 4, "intermediate_size": 128, "rms_norm_eps": 1e-5}
DAMAGED_CONFIG = {
    "nested": ("[" * 100_000 + "]" * 100_000, "config.json: not JSON (nested"),
    "truncated": ('{"model_type": "llama", "hidden_size": ', "config.json: not JSON (Expecting value"),
    "not_utf8": (b"\xff\xfe{}", "config.json: not UTF-8 text"),
    "a_list": ("[1, 2]", "config.json: not a JSON object"),
    "no_model_type": ({"model_type": None}, "not an object with a model_type string"),
    "width_is_a_string": ({"hidden_size": "abc"}, "hidden_size = 'abc' is out of range"),
    "heads_are_a_fraction": ({"num_attention_heads": 1.5}, "num_attention_heads = 1.5 is out of range"),
    "a_billion_layers": ({"num_hidden_layers": 10**9}, "num_hidden_layers = 1000000000 is out of range"),
    "negative_layers": ({"num_hidden_layers": -3}, "num_hidden_layers = -3 is out of range"),
    "rope_base_is_text": ({"rope_theta": "x"}, "rope_theta = 'x' is out of range"),
    "a_long_value": ({"hidden_size": "x" * 100_000}, "hidden_size = '" + "x" * 36 + "... is out of range"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED_CONFIG))
def test_a_damaged_config_in_a_model_folder_is_one_line_and_exit_2(tmp_path, case):
    content, why = DAMAGED_CONFIG[case]
    if isinstance(content, dict):
        content = json.dumps({**_LLAMA_CONFIG, **content})
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_bytes(content if isinstance(content, bytes) else content.encode())
    r = run([sys.executable, "-m", "agent.cli", "-p", "hi", "-m", str(folder), "--blas", "off"],
            timeout=60, max_memory=2 * GIB, env={"SPEC_AGENT_HOME": str(tmp_path / "home")})
    assert why in one_error_line(r)


def test_a_config_value_mlx_lm_cannot_build_from_is_one_line_and_exit_2(tmp_path, llama_dir):
    folder = tmp_path / "model"
    shutil.copytree(llama_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": None}))
    r = run([sys.executable, "-m", "agent.cli", "-p", "hi", "-m", str(folder), "--blas", "off"],
            timeout=120, env={"SPEC_AGENT_HOME": str(tmp_path / "home")})
    assert f"cannot load model {folder}: TypeError" in one_error_line(r)


def test_tokenizer_fields_of_the_wrong_type_are_model_load_errors():
    import numpy as np

    from agent.engine.errors import ModelLoadError
    from agent.engine.gguf_tokenizer import build_tokenizer, stop_ids

    good = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab"],
            "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.eos_token_id": 2}
    build_tokenizer(good)
    for bad in ({"tokenizer.ggml.tokens": np.arange(3, dtype=np.uint32)},
                {"tokenizer.ggml.merges": ["ab"]},
                {"tokenizer.ggml.eos_token_id": 7},
                {"tokenizer.ggml.eos_token_id": "2"},
                {"tokenizer.ggml.token_type": np.array([1, 1])},
                {"tokenizer.ggml.pre": np.array([1, 2])},
                {"tokenizer.chat_template": 5}):
        with pytest.raises(ModelLoadError):
            build_tokenizer({**good, **bad})
    with pytest.raises(ModelLoadError):
        stop_ids({**good, "tokenizer.ggml.eos_token_id": -1})


# ---- the converted-weights cache ------------------------------------------------------------


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A K-quant GGUF file converted once: (path, cache root, the entry's files)."""
    import gguf_synth
    from gguf import GGMLQuantizationType as T

    from agent.engine.gguf import load_gguf

    tmp = tmp_path_factory.mktemp("convert")
    s = gguf_synth.write(tmp / "c.gguf", "qwen2", lambda n: T.Q4_K)
    assert load_gguf(s.path, dequantize=True, cache=tmp / "cache").reader == "gguf"
    (folder,) = [p for p in (tmp / "cache").iterdir() if p.is_dir()]
    return s.path, tmp / "cache", {p.name: p.read_bytes() for p in folder.iterdir()}


def _restore(cache: Path, files: dict[str, bytes]) -> Path:
    for p in cache.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    from agent.engine.convert_cache import folder_for

    manifest = json.loads(files["manifest.json"])
    folder = folder_for(cache, manifest["source_sha256"], manifest["format"])
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


DAMAGE = {
    "manifest_not_utf8": ("manifest.json", b"\xff\xfe{\"a\": 1}"),
    "manifest_truncated": ("manifest.json", lambda b: b[:60]),
    "manifest_nested": ("manifest.json", b"[" * 100_000),
    "manifest_wrong_types": ("manifest.json", lambda b: json.dumps(
        dict(json.loads(b), args=[1], stop_ids="x")).encode()),
    "manifest_huge_layers": ("manifest.json", lambda b: json.dumps(
        dict(json.loads(b), args=dict(json.loads(b)["args"], num_hidden_layers=10**9))).encode()),
    "tokenizer_not_utf8": ("tokenizer.json", b"\xff\xfe\x00garbage"),
    "tokenizer_truncated": ("tokenizer.json", lambda b: b[:100]),
    "weights_truncated": ("model.safetensors", lambda b: b[:1000]),
    "weights_header_not_utf8": ("model.safetensors", lambda b: struct.pack("<Q", 20) + b"\xff" * 20 + b[28:]),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_converted_entry_is_deleted_with_a_warning_and_converted_again(converted, case, caplog):
    from agent.engine.gguf import load_gguf

    path, cache, files = converted
    folder = _restore(cache, files)
    name, damage = DAMAGE[case]
    (folder / name).write_bytes(damage(files[name]) if callable(damage) else damage)
    with caplog.at_level(logging.WARNING, logger="agent.engine.convert_cache"):
        assert load_gguf(path, dequantize=True, cache=cache).reader == "gguf"
    warned = [r.getMessage() for r in caplog.records if "converted-weights cache" in r.getMessage()]
    assert len(warned) == 1 and "ignored and deleted" in warned[0] and "\n" not in warned[0]
    assert load_gguf(path, dequantize=True, cache=cache).reader == "cache"  # rebuilt, good again


@pytest.mark.parametrize("memo", [b"[" * 100_000, b"[1, 2]", b"\xff\xff", b'{"x": "y"}'])
def test_a_damaged_sha256_memo_is_started_again(converted, memo):
    from agent.engine.gguf import load_gguf

    path, cache, files = converted
    _restore(cache, files)
    (cache / "sources.json").write_bytes(memo)
    assert load_gguf(path, dequantize=True, cache=cache).reader == "cache"


_CACHE_FIFO = """
import json, sys
from pathlib import Path
from agent import store
from agent.engine.convert_cache import lookup, source_sha256
root = Path(sys.argv[1])
print(json.dumps([lookup(root, "a" * 64, "f32") is None, source_sha256(Path(sys.argv[2]), root),
                  store.converted_for("a" * 64)]))
"""


def test_fifos_and_links_in_the_converted_cache_never_block(tmp_path):
    from agent.engine.convert_cache import folder_for

    root = tmp_path / "home" / "converted"
    folder = folder_for(root, "a" * 64, "f32")
    folder.mkdir(parents=True)
    os.mkfifo(folder / "manifest.json")
    os.mkfifo(root / "sources.json")
    other = folder_for(root, "b" * 64, "f32")
    other.mkdir()
    (other / "manifest.json").symlink_to("/dev/zero")
    source = tmp_path / "m.gguf"
    source.write_bytes(b"GGUF")
    r = py(_CACHE_FIFO, str(root), str(source), timeout=60, env={"SPEC_AGENT_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    missing, digest, found = json.loads(r.stdout)
    assert missing and len(digest) == 64 and found == []
    assert "ignored and deleted" in r.stderr.decode() and not folder.exists()


# ---- schemas: regexes, size, depth, references ----------------------------------------------

_VALIDATE = """
import json, sys, time
from tools import TOOLS, Tool, ToolResult, register, schema_problem, validate
schema, args = json.loads(sys.stdin.read())
TOOLS["mcp__x__t"] = Tool("mcp__x__t", "d", schema, lambda ctx, **a: ToolResult(True, ""), "mcp")
t0 = time.monotonic()
message = validate("mcp__x__t", args)
print(json.dumps({"s": time.monotonic() - t0, "message": message, "problem": schema_problem(schema)}))
"""

EVIL = "^(a|aa)+$"
LONG = "a" * 5000 + "!"
REDOS = {
    "pattern": ({"type": "object", "properties": {"q": {"type": "string", "pattern": EVIL}}}, {"q": LONG}),
    "nested_plus": ({"type": "object", "properties": {"q": {"pattern": "^(a+)+$"}}}, {"q": LONG}),
    "pattern_properties": ({"type": "object", "patternProperties": {EVIL: {}}}, {LONG: 1}),
    "additional_properties": ({"type": "object", "properties": {"z": {}}, "patternProperties": {EVIL: {}},
                               "additionalProperties": False}, {LONG: 1}),
    "property_names": ({"type": "object", "propertyNames": {"pattern": EVIL}}, {LONG: 1}),
    "unevaluated_properties": ({"type": "object", "patternProperties": {EVIL: {}},
                                "unevaluatedProperties": False}, {LONG: 1}),
    "recursive_any_of": ({"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "$defs": {"n": {
        "anyOf": [{"type": "array", "items": {"$ref": "#/$defs/n"}},
                  {"type": "array", "items": {"$ref": "#/$defs/n"}, "minItems": 0},
                  {"type": "integer"}]}}}, {"a": json.loads("[" * 22 + '"x"' + "]" * 22)}),
    "unique_items": ({"type": "object", "properties": {"a": {"uniqueItems": True}}},
                     {"a": [{"k": i} for i in range(60_000)]}),
}


@pytest.mark.parametrize("case", sorted(REDOS))
def test_argument_validation_is_bounded_in_time(case):
    schema, args = REDOS[case]
    r = py(_VALIDATE, stdin=json.dumps([schema, args]).encode(), timeout=30)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    out = json.loads(r.stdout)
    assert out["s"] < 3.0 and out["problem"] == ""  # (a 1 s regex deadline; a loaded CI box)
    if case != "unique_items":
        assert out["message"].startswith("invalid arguments for mcp__x__t")
        assert "did not finish" in out["message"] or "does not match" in out["message"]


def _nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


@pytest.mark.parametrize("schema,why", [
    ({"$ref": "#"}, "refers to itself without end"),
    (_nested(40), "nested deeper than"),
    ({"type": "object", "properties": {f"p{i}": {"enum": list(range(30))} for i in range(1000)}},
     "larger than"),
    ({"type": "object", "properties": {"q": {"type": "string", "pattern": "("}}}, "regex"),
    ({"type": "object", "properties": {"a": {"$ref": "#/nope"}}}, ""),
])
def test_a_schema_that_cannot_be_bounded_is_refused(schema, why):
    from tools import Tool, ToolResult, register, schema_problem, validate

    problem = schema_problem(schema)
    if not why:  # a $ref to nowhere shows when an argument reaches it, as an error for the model
        assert problem == ""
        from tools import TOOLS

        TOOLS["mcp__x__r"] = Tool("mcp__x__r", "d", schema, lambda ctx, **a: None, "mcp")
        try:
            assert "a $ref does not resolve" in validate("mcp__x__r", {"a": 1})
        finally:
            del TOOLS["mcp__x__r"]
        return
    assert why in problem
    with pytest.raises(ValueError, match="mcp__x__t"):
        register(Tool("mcp__x__t", "d", schema, lambda ctx, **a: ToolResult(True, ""), "mcp"))


_SERVER = r'''
import json, sys

def deep(n):
    s = {"type": "string"}
    for _ in range(n):
        s = {"type": "object", "properties": {"x": s}}
    return s

TOOLS = [("fine", {"type": "object", "properties": {"q": {"type": "string"}}}),
         ("loop", {"type": "object", "allOf": [{"$ref": "#"}]}),
         ("deep", deep(60)),
         ("badregex", {"type": "object", "properties": {"q": {"type": "string", "pattern": "(("}}})]
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "hostile", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": [{"name": n, "description": n, "inputSchema": s} for n, s in TOOLS]}
    elif mid is None:
        continue
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}) + "\n")
    sys.stdout.flush()
'''


def test_mcp_tools_whose_schema_cannot_be_bounded_are_not_offered(tmp_path):
    from agent.extensions import Extensions, ServerSpec
    from agent.mcp import McpManager
    from tools import TOOLS

    server = tmp_path / "hostile.py"
    server.write_text(_SERVER)
    warnings: list[str] = []
    m = McpManager(Extensions((ServerSpec("hostile", sys.executable, (str(server),)),), ("hostile",)),
                   tmp_path, warnings.append)
    m.start()
    try:
        assert [n for n in TOOLS if n.startswith("mcp__hostile__")] == ["mcp__hostile__fine"]
        (warning,) = warnings
        assert "3 tool(s) not offered" in warning
        skipped = " ".join(m.skipped["hostile"])
        assert "refers to itself" in skipped and "nested deeper" in skipped and "regex" in skipped
    finally:
        m.close()


# ---- other readers: hooks' JSON, repository files for the grammar -----------------------------


def test_a_hook_writing_deeply_nested_json_is_one_note(tmp_path):
    from agent.core.hooks import HookRunner
    from agent.extensions import HookSpec

    hook = tmp_path / "deep.sh"
    hook.write_text("#!/bin/sh\ncat >/dev/null\nprintf '{\"a\":%s' \"$(head -c 1990 /dev/zero | tr '\\0' '[')\"\n")
    hook.chmod(0o755)
    out = HookRunner((HookSpec("PreToolUse", str(hook)),), "s", tmp_path).run("PreToolUse", {}, "x")
    assert out.decision == "" and any("does not parse" in n for n in out.notes)


_CANDIDATES = """
import json, sys
from pathlib import Path
from tools import ToolContext
from agent.backends.grammar import candidate_files
files, complete = candidate_files(ToolContext(Path(sys.argv[1])))
print(json.dumps([sorted(files), complete]))
"""


def test_grammar_file_reads_skip_links_to_devices(tmp_path):
    repo = make_repo(tmp_path / "repo", SAMPLE)
    (repo / "zero").symlink_to("/dev/zero")
    subprocess.run(["git", "add", "zero"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "link"], cwd=repo, check=True)
    r = py(_CANDIDATES, str(repo), timeout=60, max_memory=2 * GIB)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    files, _complete = json.loads(r.stdout)
    assert "zero" not in files and "calc.py" in files

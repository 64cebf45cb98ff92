"""The Python versions spec-agent claims (pyproject's requires-python) install and start.

For each supported version under pyenv: a fresh venv, `pip install` of this checkout (not
editable: the wheel must carry its data files), `spec-agent --version`, `config show` reading
a `.specrc`, and the eval task loader. On a version below the floor, pip itself must refuse
spec-agent with its Python requirement. Slow (a full install each); the pip cache makes reruns
quicker. Run: `pytest -m slow tests/test_python_versions.py -s` (prints each step's output).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
SUPPORTED = ("3.11", "3.12", "3.13")
TOO_OLD = ("3.10",)

pytestmark = [pytest.mark.slow, pytest.mark.install]  # minutes: `make test-versions`


def _interpreter(version: str) -> Path:
    found = sorted(PYENV.glob(f"{version}.*/bin/python{version}"))
    if not found:
        pytest.skip(f"no Python {version} under {PYENV}")
    return found[-1]


def _run(*cmd, cwd=None, env=None, timeout=1800) -> subprocess.CompletedProcess:
    e = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **(env or {})}
    e.pop("PYTHONPATH", None)  # the venv must use its own installed copy
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=e, capture_output=True, text=True,
                       timeout=timeout)
    print(f"$ {' '.join(str(c) for c in cmd)}  -> exit {r.returncode}")
    print((r.stdout + r.stderr).strip()[-1500:])
    return r


def _venv(version: str, tmp_path: Path) -> Path:
    venv = tmp_path / f"venv{version}"
    assert _run(_interpreter(version), "-m", "venv", venv).returncode == 0
    return venv / "bin"


def test_requires_python_matches_this_test():
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["requires-python"] == f">={SUPPORTED[0]}"


@pytest.mark.parametrize("version", SUPPORTED)
def test_supported_version_installs_and_runs(version, tmp_path):
    bin_ = _venv(version, tmp_path)
    r = _run(bin_ / "python", "-m", "pip", "install", "-q", ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    r = _run(bin_ / "spec-agent", "--version", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("spec-agent ")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".specrc").write_text("temperature = 0.25\nmax_turns = 4\n")
    r = _run(bin_ / "spec-agent", "-C", repo, "config", "show", cwd=tmp_path,
             env={"XDG_CONFIG_HOME": str(tmp_path / "nocfg")})
    rows = {line.split("=")[0].strip(): line for line in r.stdout.splitlines()}
    assert r.returncode == 0 and rows["temperature"].startswith("temperature")
    assert "0.25" in rows["temperature"] and rows["max_turns"].endswith(f"# {repo / '.specrc'}")
    code = ("from agent.eval.tasks import load_tasks\n"
            "t = load_tasks()\nprint(len(t), 'tasks:', ', '.join(x.name for x in t[:3]), '...')")
    r = _run(bin_ / "python", "-c", code, cwd=tmp_path)
    assert r.returncode == 0 and int(r.stdout.split()[0]) > 0, r.stderr


@pytest.mark.parametrize("version", TOO_OLD)
def test_older_version_is_refused_by_pip(version, tmp_path):
    bin_ = _venv(version, tmp_path)
    # As `make setup` does: a current pip (pip 23.0 resolved the dependencies first and
    # reported mlx-lm's Python requirement instead of spec-agent's).
    assert _run(bin_ / "python", "-m", "pip", "install", "-q", "--upgrade", "pip").returncode == 0
    r = _run(bin_ / "python", "-m", "pip", "install", ROOT, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "requires a different Python" in out and f">={SUPPORTED[0]}" in out

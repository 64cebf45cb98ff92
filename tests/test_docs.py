"""The documentation against the code: the layout table of docs/architecture.md is the one
scripts/gen_layout.py generates from the layering test, every relative link and anchor of the
README, docs/ and lab/ resolves, dated records live in lab/ only, and a wheel built from the
checkout holds only what the program reads at run time (no measurement records)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _gen_layout():
    spec = importlib.util.spec_from_file_location("gen_layout", ROOT / "scripts" / "gen_layout.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- the layout table -----------------------------------------------------------------------


def test_architecture_layout_table_is_the_generated_one():
    gen = _gen_layout()
    doc = gen.DOC.read_text()
    assert gen.spliced(doc, gen.table(gen.allowed_edges())) == doc, \
        "docs/architecture.md's layout table differs: run `python scripts/gen_layout.py --write`"


def test_the_table_follows_the_allowed_edges():
    """A changed edge changes the table, so the check above fails when the doc is not regenerated."""
    gen = _gen_layout()
    allowed = gen.allowed_edges()
    before = gen.table(allowed)
    changed = {**allowed, "agent.core": allowed["agent.core"] | {"agent.engine"}}
    assert gen.table(changed) != before
    assert "| `agent/core/` |" in before and "`agent/engine/`" in gen.table(changed).split(
        "| `agent/core/` |")[1].splitlines()[0]
    assert gen.spliced(gen.DOC.read_text(), gen.table(changed)) != gen.DOC.read_text()


def test_gen_layout_refuses_a_doc_without_markers():
    gen = _gen_layout()
    with pytest.raises(ValueError, match="markers"):
        gen.spliced("# no table here\n", "| a | b |")


# ---- links ----------------------------------------------------------------------------------


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "lab").rglob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _prose(page: Path) -> str:
    """The page without its fenced code blocks (a fence is a line that starts with ```)."""
    out, fenced = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return "\n".join(out)


def _anchors(page: Path) -> set[str]:
    text = _prose(page)
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        base = _slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(pages: list[Path], root: Path = ROOT) -> list[str]:
    bad = []
    for page in pages:
        text = _prose(page)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not checked here
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                bad.append(f"{page.relative_to(root)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                bad.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return bad


def test_every_relative_link_and_anchor_resolves():
    assert broken_links(_pages()) == []


def test_the_link_check_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A `Title`\n\n[ok](#a-title) [gone](#nowhere) [file](missing.md)\n")
    assert broken_links([page], tmp_path) == ["page.md: #nowhere (no such heading)",
                                              "page.md: missing.md (no such file)"]


# ---- dated records live in lab/ -------------------------------------------------------------

DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def test_no_dated_records_outside_lab():
    found = [f"{p.relative_to(ROOT)}:{i}" for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
             for i, line in enumerate(p.read_text().splitlines(), 1) if DATE.search(line)]
    assert found == [], "dated records belong in lab/LOG.md"


def test_readme_stays_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


# ---- the wheel ------------------------------------------------------------------------------

RECORD = re.compile(r"(^|/)results/|\.(jsonl|log)$")


def record_files(names: list[str]) -> list[str]:
    """Names in a wheel that are measurement records rather than code or run-time data."""
    return [n for n in names if RECORD.search(n) or n.startswith(("lab/", "docs/"))]


def test_record_files_recognises_records():
    assert record_files(["agent/eval/results/bench.json", "agent/x.jsonl", "lab/LOG.md",
                         "agent/eval/tasks/a.toml", "agent/cli.py"]) == [
        "agent/eval/results/bench.json", "agent/x.jsonl", "lab/LOG.md"]


def test_wheel_holds_no_result_files(tmp_path):
    """Build a wheel from a copy of the checkout (pip, the project's own build backend) and
    read what it holds: the run-time data files, and no measurement record."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for top in ("agent", "tools"):
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "out"),
                        str(src)], capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and re.search(r"Could not find a version|No matching distribution|"
                                       r"Failed to establish|Network is unreachable", r.stderr):
        pytest.skip("the build backend (setuptools>=77) could not be fetched: " + r.stderr.strip()[-200:])
    assert r.returncode == 0, r.stderr
    (wheel,) = (tmp_path / "out").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert record_files(names) == []
    data = {n for n in names if not n.endswith(".py") and ".dist-info/" not in n}
    assert {"agent/eval/exercism_split.json", "agent/bench/lookup_workloads.toml",
            "agent/bench/agentic/replays.json"} <= data
    assert any(n.startswith("agent/eval/tasks/") for n in data)

"""Fault injection: a scripted full-auto session (tests/fault_session.py: edits, writes, shell
commands, a delete, auto-commits, the saved conversation) SIGKILLed at KILLS points chosen
at random (seeded; SPEC_AGENT_FAULT_SEED; SPEC_AGENT_FAULT_KILLS, 2 in the default suite,
50 or more for the figures). After each kill: no
process of the session is left running; every file is as it was or as the step that
changed it left it (no half-written file, no stray temporary file); `spec-agent undo`,
repeated, brings back every byte of the user's (work tree, HEAD, branch); the saved
conversation loads. The figures are printed (pytest -s shows them). The same session also
runs on a small tmpfs (repo and SPEC_AGENT_HOME) filled to a few KB (needs root to mount;
skipped otherwise). Not covered here: the prefix caches and the model store (a scripted
model uses neither).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted import SAMPLE, git, make_repo

from agent.cli import main
from agent.core.history import HistoryError, HistoryStore

SESSION = Path(__file__).with_name("fault_session.py")
KILLS = int(os.environ.get("SPEC_AGENT_FAULT_KILLS", "2"))  # 50+ for the figures (~10 s a kill)
SEED = int(os.environ.get("SPEC_AGENT_FAULT_SEED", "21"))


def files(repo: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(repo.rglob("*")):
        rel = p.relative_to(repo).as_posix()
        if rel != ".git" and not rel.startswith(".git/") and p.is_file():
            out[rel] = p.read_bytes()
    return out


def user_state(repo: Path) -> tuple:
    branch = subprocess.run(["git", "symbolic-ref", "-q", "HEAD"], cwd=repo, capture_output=True,
                            text=True).stdout
    return files(repo), git(repo, "rev-parse", "HEAD"), branch


def leftovers(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def start(repo: Path, home: Path, marker: str) -> tuple[subprocess.Popen, float]:
    env = dict(os.environ, SPEC_AGENT_HOME=str(home), PYTHONPATH=str(Path(__file__).parents[1]))
    proc = subprocess.Popen([sys.executable, str(SESSION), str(repo), marker], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline().strip() == "READY"
    return proc, time.monotonic()


def template(tmp: Path) -> Path:
    repo = make_repo(tmp / "template", SAMPLE)
    (repo / "calc.py").write_text(SAMPLE["calc.py"] + "# the user's uncommitted work\n")
    (repo / "draft.md").write_text("an untracked draft of the user's\n")
    (repo / ".gitignore").write_text(".env\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore .env")
    (repo / ".env").write_text("TOKEN=the user's\n")
    return repo


def check_one(repo: Path, home: Path, before: tuple, final: dict[str, bytes], marker: str) -> dict:
    """The figures of one killed run."""
    out = {"orphans": 0, "half_written": 0, "lost": 0, "resume_failed": 0}
    deadline = time.monotonic() + 3
    while leftovers(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = leftovers(marker)
    out["orphans"] = len(left)
    for pid in left:
        os.kill(pid, 9)
    now = files(repo)
    for rel in set(now) | set(before[0]) | set(final):
        if now.get(rel) not in (before[0].get(rel), final.get(rel)):
            out["half_written"] += 1
            print(f"  half-written or stray: {rel}")
    store = HistoryStore(repo, home=home)
    try:
        if store.latest():
            store.load(store.latest())
    except HistoryError as e:
        out["resume_failed"] = 1
        print(f"  resume: {e}")
    for _ in range(12):
        if user_state(repo) == before:
            break
        if main(["-C", str(repo), "undo"]) != 0:
            break
    if user_state(repo) != before:
        lost = [r for r in set(before[0]) | set(now) if user_state(repo)[0].get(r) != before[0].get(r)]
        out["lost"] = sum(len(before[0].get(r, b"")) for r in lost) or 1
        print(f"  not restored: {lost or 'HEAD/branch'}")
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkill_at_random_points_loses_no_user_byte(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    base = template(tmp_path)
    before = user_state(base)
    whole = shutil.copytree(base, tmp_path / "whole", symlinks=True)
    proc, t0 = start(whole, tmp_path / "home-whole", "FAULT-whole")
    assert proc.wait(timeout=120) == 0
    duration = time.monotonic() - t0
    final = files(whole)
    assert final != before[0] and "big.txt" in final and "README.md" not in final
    rng = random.Random(SEED)
    totals = {"kills": 0, "orphans": 0, "half_written": 0, "lost": 0, "resume_failed": 0}
    finished = 0
    for i in range(KILLS):
        repo = shutil.copytree(base, tmp_path / f"r{i}", symlinks=True)
        marker = f"FAULT-{os.getpid()}-{i}"
        proc, _ = start(repo, tmp_path / f"home{i}", marker)
        time.sleep(rng.uniform(0, duration))
        finished += proc.poll() is not None  # ended before its kill: not a kill mid-work
        proc.kill()
        proc.wait()
        totals["kills"] += 1
        for key, value in check_one(repo, tmp_path / f"home{i}", before, final, marker).items():
            totals[key] += value
        shutil.rmtree(repo, ignore_errors=True)
    print(f"fault injection (seed {SEED}, session {duration:.1f} s, {finished} ended before "
          f"their kill): {totals}")
    assert totals == {"kills": KILLS, "orphans": 0, "half_written": 0, "lost": 0, "resume_failed": 0}


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                           capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, mounts a tmpfs")
@pytest.mark.parametrize("free_kb", [0, 24, 96])
def test_a_full_disk_loses_no_user_byte(tmp_path, monkeypatch, free_kb):
    """The same session on a small filesystem (repo and SPEC_AGENT_HOME both on it) filled
    so that `free_kb` KB are left: writes, snapshots, commits and the saved conversation run
    out of space at different points. No traceback, no half-written file, no process left,
    the conversation loads, and once space is back `spec-agent undo` restores every byte."""
    mnt = tmp_path / "small"
    if not _mount_tmpfs(mnt, "8m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
        base = template(tmp_path)
        before = user_state(base)
        whole = shutil.copytree(base, tmp_path / "whole", symlinks=True)
        proc, _ = start(whole, tmp_path / "home-whole", "FULL-whole")
        assert proc.wait(timeout=120) == 0
        final = files(whole)
        repo, home = shutil.copytree(base, mnt / "repo", symlinks=True), mnt / "home"
        home.mkdir()
        filler = mnt / "filler"
        with open(filler, "wb") as f:  # fill the disk, then give back `free_kb`
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        with open(filler, "r+b") as f:
            f.truncate(max(filler.stat().st_size - free_kb * 1024, 0))
        marker = f"FULL-{os.getpid()}-{free_kb}"
        env = dict(os.environ, SPEC_AGENT_HOME=str(home), PYTHONPATH=str(Path(__file__).parents[1]))
        run = subprocess.run([sys.executable, str(SESSION), str(repo), marker], env=env,
                             capture_output=True, text=True, timeout=180)
        assert "Traceback" not in run.stderr, run.stderr[-2000:]
        filler.unlink()  # space is back for the checks and for undo
        figures = check_one(repo, home, before, final, marker)
        print(f"full disk ({free_kb} KB free, exit {run.returncode}): {figures}")
        assert figures == {"orphans": 0, "half_written": 0, "lost": 0, "resume_failed": 0}
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=10)

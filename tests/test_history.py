"""The conversation history store: JSON lines per conversation under SPEC_AGENT_HOME, per repo."""

from __future__ import annotations

import json
import os

import pytest

from agent.core.history import HistoryError, HistoryStore, repo_key

MSGS = [
    {"role": "system", "content": "you are an agent"},
    {"role": "user", "content": "fix   the bug\nin parser.py " + "x" * 100},
    {"role": "assistant", "content": "done ✓ \udcff"},  # non-ASCII and a lone surrogate
]


@pytest.fixture
def hs(tmp_path, monkeypatch) -> HistoryStore:
    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path / "home"))
    (tmp_path / "repo").mkdir()
    return HistoryStore(tmp_path / "repo")


def save(hs: HistoryStore, conv_id: str, messages: list[dict[str, str]], mtime: float) -> None:
    record = hs.recorder(conv_id)
    for m in messages:
        record(m)
    os.utime(hs.path(conv_id), (mtime, mtime))


def test_round_trip_and_layout(hs, tmp_path):
    save(hs, "20240101-000000-abc123", MSGS, 1000)
    path = hs.path("20240101-000000-abc123")
    assert path.parent.parent == tmp_path / "home" / "conversations"  # SPEC_AGENT_HOME honoured
    assert path.parent.name == repo_key(tmp_path / "repo") and path.parent.name.startswith("repo-")
    header = json.loads(path.read_text().splitlines()[0])
    assert header["type"] == "header" and header["version"] == 1
    assert header["id"] == "20240101-000000-abc123"
    assert header["repo"] == str((tmp_path / "repo").resolve())
    assert HistoryStore(tmp_path / "repo").load("20240101-000000-abc123") == MSGS
    [info] = hs.list()
    assert (info.id, info.messages, info.modified) == ("20240101-000000-abc123", 3, 1000)
    assert info.first_user_message.startswith("fix the bug in parser.py xxx")
    assert len(info.first_user_message) == 80 and "\n" not in info.first_user_message
    assert hs.warnings == []


def test_resume_appends_to_the_same_file(hs):
    save(hs, "a", MSGS[:2], 1000)
    hs.recorder("a")(MSGS[2])
    assert hs.load("a") == MSGS
    assert sum(1 for line in hs.path("a").read_text().splitlines() if '"header"' in line) == 1


def test_latest_skips_a_corrupt_newer_file(hs):
    save(hs, "old", MSGS, 1000)
    save(hs, "mid", MSGS[:2], 2000)
    save(hs, "new", MSGS, 3000)
    path = hs.path("new")
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = "{not json\n"
    path.write_text("".join(lines))
    os.utime(path, (3000, 3000))
    assert hs.latest() == "mid"
    assert hs.warnings == [f"skipped corrupt conversation file {path}: line 3 is not JSON"]
    assert [i.id for i in hs.list()] == ["mid", "old"]
    assert len(hs.warnings) == 1  # the same warning is not repeated
    with pytest.raises(HistoryError, match="line 3 is not JSON") as e:
        hs.load("new")
    assert e.value.exit_code == 2


@pytest.mark.parametrize("line", [
    '{"type": "message", "role": "tool", "content": "x"}',
    '{"type": "message", "role": "user", "content": 5}',
    '{"type": "header", "id": "c", "version": 1, "created": 1}',
    "",
])
def test_bad_message_lines_are_corrupt(hs, line):
    save(hs, "c", MSGS, 1000)
    path = hs.path("c")
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2] + [line] + lines[2:]) + "\n")
    with pytest.raises(HistoryError, match="corrupt"):
        hs.load("c")
    assert hs.latest() is None and hs.list() == []


def test_truncated_last_line_is_tolerated(hs):
    save(hs, "cut", MSGS, 1000)
    path = hs.path("cut")
    text = path.read_text()
    path.write_text(text[: text.rindex("\n", 0, len(text) - 1) + 1] + '{"type": "message", "ro')
    assert hs.load("cut") == MSGS[:2]
    assert len(hs.warnings) == 1 and "cut off" in hs.warnings[0]
    assert hs.latest() == "cut"
    hs.recorder("cut")({"role": "user", "content": "again"})  # resuming drops the cut tail
    assert hs.load("cut") == MSGS[:2] + [{"role": "user", "content": "again"}]


def test_missing_final_newline_keeps_the_message(hs):
    save(hs, "nl", MSGS[:2], 1000)
    path = hs.path("nl")
    path.write_text(path.read_text().rstrip("\n"))
    assert hs.load("nl") == MSGS[:2]
    hs.recorder("nl")(MSGS[2])
    assert hs.load("nl") == MSGS


@pytest.mark.parametrize("bad", ["../../x", "a/b", "", ".", "..", "a b", "x.jsonl", "é"])
def test_bad_ids_are_rejected(hs, bad):
    for call in (hs.path, hs.load, hs.recorder):
        with pytest.raises(HistoryError, match="bad conversation id"):
            call(bad)


def test_missing_conversation(hs):
    with pytest.raises(HistoryError, match="no saved conversation 'nope'"):
        hs.load("nope")
    assert hs.latest() is None and hs.list() == []


def test_bad_message_is_not_written(hs):
    with pytest.raises(HistoryError, match="refusing"):
        hs.recorder("r")({"role": "robot", "content": "hi"})
    assert not hs.path("r").exists()


def test_repos_are_separate(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path / "home"))
    (tmp_path / "one" / "repo").mkdir(parents=True)
    (tmp_path / "two" / "repo").mkdir(parents=True)
    one, two = HistoryStore(tmp_path / "one" / "repo"), HistoryStore(tmp_path / "two" / "repo")
    save(one, "c1", MSGS, 1000)
    assert one.dir != two.dir  # same folder name, different path
    assert two.latest() is None and two.list() == []
    with pytest.raises(HistoryError):
        two.load("c1")
    assert one.latest() == "c1"


def test_explicit_home_overrides_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path / "env-home"))
    hs = HistoryStore(tmp_path, home=tmp_path / "h")
    save(hs, "c", MSGS, 1000)
    assert (tmp_path / "h" / "conversations").is_dir()
    assert not (tmp_path / "env-home").exists()

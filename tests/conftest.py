"""Shared fixtures: a small real BPE tokenizer, tiny random-weight models (llama, qwen2), a
target/draft pair with a shared tokenizer, and the embedded SmolLM2 model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent import store


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    from agent.bench.synthetic import train_tokenizer

    d = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(d, vocab_size=512)
    return d


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory, tokenizer_dir) -> Path:
    from agent.bench.synthetic import random_model_folder

    return random_model_folder(tmp_path_factory.mktemp("llama"), tokenizer_dir, "llama", seed=1)


@pytest.fixture(scope="session")
def qwen2_dir(tmp_path_factory, tokenizer_dir) -> Path:
    from agent.bench.synthetic import random_model_folder

    return random_model_folder(
        tmp_path_factory.mktemp("qwen2"), tokenizer_dir, "qwen2", seed=2, hidden=64
    )


@pytest.fixture(scope="session")
def pair_dirs(tmp_path_factory, tokenizer_dir) -> tuple[Path, Path]:
    """(target, draft) folders: the target contains the draft plus ε-scaled extra layers."""
    from agent.bench.synthetic import controlled_pair

    return controlled_pair(
        tmp_path_factory.mktemp("pair"), tokenizer_dir, hidden=64, draft_layers=1,
        extra_layers=3, eps=0.45, seed=3, embed_scale=1.0,
    )  # varied text and acceptance ≈ 0.7 while generating: every rejection path gets used


@pytest.fixture(scope="session")
def pair(pair_dirs):
    """Loaded (target, draft) `LoadedModel`s sharing one tokenizer."""
    from agent.engine.loading import load_model

    target_dir, draft_dir = pair_dirs
    return load_model(str(target_dir), device="cpu"), load_model(str(draft_dir), device="cpu")


@pytest.fixture(scope="session")
def llama(llama_dir):
    from agent.engine.loading import load_model

    return load_model(str(llama_dir), device="cpu")


@pytest.fixture(scope="session")
def embedded():
    """The embedded SmolLM2 model (f32 on CPU); skipped with a reason when not pulled."""
    if not store.is_present():
        if os.environ.get("SPEC_AGENT_REQUIRE_EMBEDDED"):
            pytest.fail(f"embedded model missing (run: {store.PULL_HINT})")
        pytest.skip(f"embedded model not pulled (run: {store.PULL_HINT})")
    from agent import models

    return models.load(None, device="cpu")

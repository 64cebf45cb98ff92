"""One table of choices and ranges (agent/choices.py): the command line, the config loader and
the sampling parameters all follow it."""

from __future__ import annotations

import pytest

from agent.choices import CHOICES, RANGES
from agent.cli import build_parser
from agent.config import ConfigError, check_value
from agent.engine.sampling import SamplingParams


def _actions(parser):
    for action in parser._actions:
        yield action
        for sub in (action.choices or {}).values() if hasattr(action, "_name_parser_map") else ():
            yield from _actions(sub)


def test_every_flag_offers_the_tables_choices():
    seen = {}
    for action in _actions(build_parser()):
        if action.dest in CHOICES and action.choices is not None:
            seen.setdefault(action.dest, []).append(tuple(action.choices))
    assert set(seen) == set(CHOICES)  # every setting with choices has a flag
    for key, offered in seen.items():
        assert all(c == CHOICES[key] for c in offered), key


@pytest.mark.parametrize("key", sorted(set(RANGES) & {"temperature", "top_p", "top_k", "min_p",
                                                      "repetition_penalty"}))
def test_sampling_parameters_refuse_what_the_config_refuses(key):
    kind = int if key == "top_k" else float
    for value in (-1, 0, 0.5, 1, 11, 1e9, float("nan")):
        if kind is int and value != value:
            continue
        try:
            check_value(key, kind(value), "test")
            config_ok = True
        except ConfigError:
            config_ok = False
        try:
            SamplingParams(**{key: kind(value)})
            sampling_ok = True
        except ValueError:
            sampling_ok = False
        assert config_ok == sampling_ok, (key, value)

"""Env server settings: defaults the issue names, and the cross-check."""

from __future__ import annotations

import pytest

from fathom.config import ConfigError, load_config
from fathom.env_server.server.episodes import resolve_limits
from fathom.protocol import EpisodeLimits


def test_defaults_match_training_and_demo_depths():
    es = load_config().env_server
    assert (es.port, es.max_turns, es.max_depth, es.demo_max_depth) == (8200, 8, 2, 4)
    assert es.max_concurrent_envs == 64


def test_nested_turns_may_not_exceed_root_turns():
    with pytest.raises(ConfigError, match="sub_rlm_max_turns"):
        load_config(None, ["--env_server.max_turns", "2", "--env_server.sub_rlm_max_turns", "3"])


def test_request_limits_override_config_defaults():
    es = load_config().env_server
    lim = resolve_limits(es, EpisodeLimits(max_depth=4, max_subcalls=0))
    assert (lim.max_turns, lim.max_depth, lim.max_subcalls, lim.max_tokens) == (8, 4, 0, es.max_tokens)

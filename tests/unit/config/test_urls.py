"""Each server's URL comes from the config: its own address, or the override the config gives a client."""

from __future__ import annotations

from fathom.config import load_config


def test_urls_are_each_servers_address_reached_from_this_machine():
    cfg = load_config(None, ["--policy_server.port", "9000", "--capture_proxy.host", "0.0.0.0", "--env_server.host",
                             "10.0.0.5", "--env_server.port", "9200"])
    assert cfg.policy_url == cfg.policy_server.url == "http://127.0.0.1:9000"
    assert cfg.proxy_url == cfg.capture_proxy.url == "http://127.0.0.1:8100"  # a wildcard bind is reached on loopback
    assert cfg.env_url == cfg.env_server.url == "http://10.0.0.5:9200"


def test_a_clients_override_wins_over_the_servers_own_address():
    cfg = load_config(None, ["--capture_proxy.upstream_url", "http://gpu:8000", "--env_server.proxy_url",
                             "http://proxy:8100"])
    assert cfg.policy_url == "http://gpu:8000" and cfg.policy_server.url == "http://127.0.0.1:8000"
    assert cfg.proxy_url == "http://proxy:8100" and cfg.capture_proxy.url == "http://127.0.0.1:8100"

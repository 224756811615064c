"""Two real env servers behind one capture proxy: the rollout worker's factory uses both, and no episode fails."""

from __future__ import annotations

from tests.integration.env_server_stack import run_factory, short_tasks
from tests.integration.env_server_stack import running_stack


def test_two_env_servers_share_the_episodes(tmp_path):
    with running_stack(tmp_path) as stack:
        second = stack.add_env_server()
        got = run_factory(stack.proxy_url, [stack.env_url, second], short_tasks(12), concurrency=4)
    assert got["failed"] == 0, got
    assert all(c >= 3 for c in got["per_server"]), got  # least in flight, ties in turn: about half each
    assert got["in_flight_left"] == [0, 0]

"""`run_episode`, the one way a whole episode runs (the env server's /episodes, `fathom ask`, `fathom ui`): each way
it can end, as its callers see it. The sandbox is the exec stand-in and the proxy a transport-level fake."""

from __future__ import annotations

import functools

import httpx
import pytest
from fastapi.testclient import TestClient

from fathom.config import load_config
from fathom.env_server.server.app import create_app
from fathom.env_server.server.episode_core import resolve_limits, run_episode
from fathom.protocol import EpisodeLimits, SessionCreate
from fathom.tasks import get_task, load_split, reference_solution
from tests.unit.env_server.fakes import FakePool, FakeProxy, HangsAfterFirstCall

TASK = get_task(load_split("test")[1])
SOLVES = f"```repl\n{reference_solution(TASK.question)}\n```"


@pytest.fixture
def runtime():
    cfg = load_config(None, ["--env_server.prompt_format", "chat"])
    pool = FakePool()
    with TestClient(create_app(cfg, pool_factory=lambda _: pool)) as client:
        rt = client.app.state.runtime

        def run(proxy: FakeProxy, **kw):
            rt.http = proxy.client()
            kw.setdefault("limits", resolve_limits(cfg.env_server, EpisodeLimits()))
            kw.setdefault("turns", [])
            return client.portal.call(functools.partial(run_episode, rt, TASK.question, TASK.context,
                                                        proxy_url="http://proxy", **kw))
        yield run, pool


def test_a_scored_episode_joins_its_session_and_verifies(runtime):
    run, pool = runtime
    proxy, turns = FakeProxy(lambda m: SOLVES), []
    out = run(proxy, session_id="s1", task=TASK, turns=turns)
    assert (out.stop_reason, out.error, out.verdict_error, out.timed_out) == ("final", None, None, False)
    assert out.components is not None and out.components.correct and out.total_tokens == 20 and out.wall_s > 0
    assert proxy.opened == [] and proxy.calls[0]["headers"]["authorization"] == "Bearer s1"
    assert len(turns) == 1 and turns[0].final_answer == out.answer and all(ep.closed for ep in pool.episodes)


def test_without_a_task_it_opens_a_session_and_only_counts_tokens(runtime):
    run, _ = runtime
    proxy, seen = FakeProxy(lambda m: "```repl\nFINAL('x')\n```"), []
    out = run(proxy, create=SessionCreate(trainable=False, model="fathom"), on_session=seen.append)
    assert seen == ["new-1"] and proxy.opened[0]["model"] == "fathom" and not proxy.opened[0]["trainable"]
    assert (out.answer, out.components, out.total_tokens, out.error) == ("x", None, 20, None)


def test_a_session_that_cannot_open_is_unscorable_in_the_callers_words(runtime):
    run, _ = runtime
    proxy = FakeProxy(lambda m: "")
    proxy.handle = lambda req: (_ for _ in ()).throw(httpx.ConnectError("refused", request=req))
    out = run(proxy, create=SessionCreate(), describe=lambda e: f"<{type(e).__name__}>")
    assert out.error == "could not open a capture session: <ProxyCallError>" and out.answer is None
    assert out.components is None and out.stop_reason == "error"


def test_a_proxy_that_fails_mid_episode_is_unscorable_never_zero(runtime):
    run, _ = runtime
    proxy = FakeProxy(lambda m: "```repl\nprint(1)\n```")
    proxy.fail = lambda call: httpx.Response(503, text="engine down")
    out = run(proxy, session_id="s1", task=TASK)
    assert out.error is not None and "503" in out.error and out.components is None and out.answer is None


def test_the_wall_clock_stops_the_loop_from_outside_and_the_answer_is_still_scored(runtime):
    run, _ = runtime
    limits = resolve_limits(load_config(None, []).env_server, EpisodeLimits(wall_clock_s=1.0, max_turns=8))
    out = run(HangsAfterFirstCall(lambda m: "```repl\nprint(1)\n```"), session_id="s1", task=TASK, limits=limits)
    assert out.timed_out and out.stop_reason == "timeout" and out.answer is None
    assert out.components is not None and not out.components.correct and out.error is None

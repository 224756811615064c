"""Version pinning: sessions keep the policy they were opened with; new sessions get the newest one."""

from __future__ import annotations

import time

from fathom.capture_proxy.pinning import newest_adapter

USER = [{"role": "user", "content": "hi"}]


def test_newest_adapter_picks_highest_version_of_this_base():
    cards = [
        {"id": "base", "parent": None},
        {"id": "trl-policy-v2", "parent": "base"},
        {"id": "trl-policy-v10", "parent": "base"},
        {"id": "trl-policy-v99", "parent": "other-base"},
        {"id": "trl-policy-v11-draft", "parent": "base"},
    ]
    pin = newest_adapter(cards, "base", "trl-policy-v")
    assert (pin.model, pin.version) == ("trl-policy-v10", 10)
    assert newest_adapter(cards[:1], "base", "trl-policy-v") is None


def test_sessions_opened_after_an_adapter_sync_use_it_and_earlier_ones_keep_theirs(proxy, engine):
    fake, _ = engine
    before = proxy.open()
    assert (before["model"], before["policy_version"]) == ("fake-base", 0)
    fake.adapters = ["trl-policy-v1"]
    v1 = proxy.open()
    assert (v1["model"], v1["policy_version"]) == ("trl-policy-v1", 1)
    fake.adapters = ["trl-policy-v1", "trl-policy-v2"]
    v2 = proxy.open()
    assert (v2["model"], v2["policy_version"]) == ("trl-policy-v2", 2)
    for info, model in ((before, "fake-base"), (v1, "trl-policy-v1"), (v2, "trl-policy-v2")):
        r = proxy.chat(info["session_id"], USER)
        assert r.status_code == 200 and r.headers["X-Fathom-Policy-Version"] == str(info["policy_version"])
        assert fake.requests[-1]["model"] == model
    trace = proxy.http.get(f"/sessions/{v1['session_id']}/trace").json()
    assert trace["turns"][0]["metadata"]["policy_version"] == 1


def test_merged_sync_uses_base_name_and_reported_count(make_proxy, engine):
    fake, _ = engine
    proxy = make_proxy(weight_sync="merged")
    fake.adapters = ["trl-policy-v5"]  # ignored under merged sync
    first = proxy.open()
    assert (first["model"], first["policy_version"]) == ("fake-base", 0)
    assert proxy.http.post("/policy/version", json={"version": 3}).json() == {"merged_version": 3}
    second = proxy.open()
    assert (second["model"], second["policy_version"]) == ("fake-base", 3)
    assert first["policy_version"] == 0 == proxy.http.get(f"/sessions/{first['session_id']}").json()["policy_version"]
    # A call records the weights' version at call time: merged weights change under open sessions.
    proxy.chat(first["session_id"], USER)
    assert proxy.http.get(f"/sessions/{first['session_id']}/trace").json()["turns"][0]["metadata"]["policy_version"] == 3
    assert proxy.http.post("/policy/version", json={"version": 2}).status_code == 409
    assert proxy.http.post("/policy/version", json={"version": "x"}).status_code == 400
    assert proxy.http.get("/policy").json()["resolved"] == {"model": "fake-base", "version": 3}


def test_a_sync_during_a_call_is_recorded_as_two_versions(make_proxy, engine):
    """Merged weights change under an in-flight call (vLLM keeps it paused through the reload): the turn records
    the version it was sent at and the one it was answered at, so the trainer can tell it spans two policies."""
    import threading

    fake, _ = engine
    proxy = make_proxy(weight_sync="merged")
    info = proxy.open()
    proxy.chat(info["session_id"], USER)  # no sync: one version
    fake.delay_s = 1.0
    answered: list = []
    call = threading.Thread(target=lambda: answered.append(proxy.chat(info["session_id"], USER)))
    call.start()
    deadline = time.monotonic() + 10
    while len(fake.requests) < 2:  # the call has reached the engine
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert proxy.http.post("/policy/version", json={"version": 1}).status_code == 200
    call.join(timeout=30)
    assert answered and answered[0].status_code == 200
    fake.delay_s = 0.0
    proxy.chat(info["session_id"], USER)  # sent after the sync: the new version only
    turns = proxy.http.get(f"/sessions/{info['session_id']}/trace").json()["turns"]
    spans = [(t["metadata"]["policy_version_start"], t["metadata"]["policy_version"]) for t in turns]
    assert spans == [(0, 0), (0, 1), (1, 1)]


def test_policy_version_report_is_refused_under_adapter_sync(proxy):
    r = proxy.http.post("/policy/version", json={"version": 1})
    assert r.status_code == 409 and "adapter" in r.json()["error"]["message"]


def test_session_create_with_engine_down_is_503(make_proxy, engine):
    proxy = make_proxy()
    engine[1].stop()
    r = proxy.http.post("/sessions", json={})
    assert r.status_code == 503 and "policy server" in r.json()["error"]["message"]
    engine[1].start()


def test_wrong_base_model_is_named(make_proxy, engine):
    from tests.integration.capture_proxy.servers import UvicornThread, proxy_app

    with UvicornThread(proxy_app(engine[1].url, base_model="qwen")) as server:
        import httpx

        r = httpx.post(server.url + "/sessions", json={})
        assert r.status_code == 503 and "'qwen'" in r.json()["error"]["message"]


def test_eval_session_pins_the_named_model_not_the_newest(proxy, engine):
    fake, _ = engine
    fake.adapters = ["trl-policy-v1", "trl-policy-v2", "fathom-eval-ckpt-7"]
    base = proxy.open(trainable=False, model="fake-base")
    old = proxy.open(trainable=False, model="trl-policy-v1")
    ckpt = proxy.open(trainable=False, model="fathom-eval-ckpt-7")
    assert (base["model"], old["model"], old["policy_version"]) == ("fake-base", "trl-policy-v1", 1)
    assert ckpt["model"] == "fathom-eval-ckpt-7" and ckpt["trainable"] is False
    for info in (base, old, ckpt):
        assert proxy.chat(info["session_id"], USER).status_code == 200
        assert fake.requests[-1]["model"] == info["model"]


def test_named_pin_is_refused_for_trainable_or_unserved_models(proxy, engine):
    fake, _ = engine
    r = proxy.http.post("/sessions", json={"trainable": True, "model": "fake-base"})
    assert r.status_code == 422 and "trainable=false" in r.json()["error"]["message"]
    r = proxy.http.post("/sessions", json={"trainable": False, "model": "fathom-eval-ckpt-3"})
    assert r.status_code == 404
    msg = r.json()["error"]["message"]
    assert "'fathom-eval-ckpt-3'" in msg and "load_lora_adapter" in msg

"""The official openai client against the proxy, streaming and not (SSE replay of the captured result)."""

from __future__ import annotations

import openai
import pytest

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def client_and_sid(proxy):
    sid = proxy.open()["session_id"]
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=sid, max_retries=0)
    yield client, sid
    client.close()


def test_openai_client_non_streaming(client_and_sid, proxy):
    client, sid = client_and_sid
    out = client.chat.completions.create(model="policy", messages=USER, max_tokens=16)
    assert out.choices[0].message.content == "ok ok ok ok "
    assert out.choices[0].finish_reason == "stop"
    assert proxy.http.get(f"/sessions/{sid}").json()["calls"] == 1


def test_openai_client_streaming(client_and_sid, proxy, engine):
    client, sid = client_and_sid
    stream = client.chat.completions.create(model="policy", messages=USER, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "ok ok ok ok "
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == 4
    assert "stream" not in engine[0].requests[-1]  # upstream is always non-streaming
    trace = proxy.http.get(f"/sessions/{sid}/trace").json()
    assert trace["turns"][0]["completion_token_ids"] == [100, 101, 102, 103]


def test_openai_client_completions_streaming(client_and_sid):
    client, _ = client_and_sid
    chunks = list(client.completions.create(model="policy", prompt="abc", stream=True))
    assert "".join(c.choices[0].text for c in chunks) == "ok ok ok ok "


def test_openai_client_sees_401_for_unknown_session(proxy):
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="not-a-session", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="policy", messages=USER)
    client.close()

"""`fathom ui`'s model list: the base and its LoRA adapters from `/v1/models`, and a clear error when the endpoint is down."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from fathom.config import load_config
from fathom.stack.inproc import serve_in_thread
from fathom.policy_server.served import ServedError, served
from fathom.ui.backend import Backend
from tests.ports import free_port


def _endpoint() -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "base-m", "parent": None},
                                           {"id": "fathom-sft", "parent": "base-m"}]}

    return app


def test_models_lists_adapters_on_their_base():
    with serve_in_thread(_endpoint()) as url:
        b = Backend(load_config(None, []), url)
        try:
            assert b.models() == [("base-m", "base-m"), ("fathom-sft (adapter on base-m)", "fathom-sft")]
        finally:
            b.close()
        assert served(url, "fathom-sft") == ("fathom-sft", "base-m")
        assert served(url, None) == ("fathom-sft", "base-m")  # the last listed: the adapter
        with pytest.raises(ServedError, match="'nope' is not served"):
            served(url, "nope")


def test_an_unreachable_endpoint_says_so():
    b = Backend(load_config(None, []), f"http://127.0.0.1:{free_port()}")
    try:
        with pytest.raises(ServedError, match="no OpenAI-compatible model server"):
            b.models()
    finally:
        b.close()


def test_error_text_never_blank():
    from fathom.ui.errors import error_text

    assert error_text(TimeoutError()) == "TimeoutError (no message)"
    assert error_text(AssertionError("")) == "AssertionError (no message)"
    assert error_text(KeyError("model")) == "KeyError: 'model'"
    assert error_text(ValueError("bad input")) == "bad input"


def _backend_with_start(monkeypatch, start, url: str, timeout_s: float) -> Backend:
    """A Backend whose runtime start is `start` (the env server's Runtime.start replaced in place)."""
    from fathom.env_server.server import runtime

    monkeypatch.setattr(runtime.Runtime, "start", start)
    return Backend(load_config(None, []), url, start_timeout_s=timeout_s)


def test_a_runtime_that_starts_too_slowly_says_so_and_is_not_started_twice(monkeypatch):
    """The reported warning was `could not start the episode runtime for fathom: ` (a TimeoutError, whose str() is
    empty), then the page waited twice that timeout with nothing on it."""
    import asyncio
    import time

    from fathom.ui.backend import RuntimeStartError

    calls = []

    async def slow_start(self):
        calls.append(time.monotonic())
        await asyncio.sleep(1.5)

    with serve_in_thread(_endpoint()) as url:
        b = _backend_with_start(monkeypatch, slow_start, url, 0.3)
        try:
            with pytest.raises(RuntimeStartError, match=r"'base-m' .* did not start within 0 s; it is still starting"):
                b.warm("fathom-sft")
            with pytest.raises(RuntimeStartError, match="did not start within"):
                b.warm("fathom-sft")  # waits on the same start
            b.start_timeout_s = 30
            b.warm("fathom-sft")  # the same start, waited on to its end: nothing started again
            assert len(calls) == 1
        finally:
            b.close()


def test_a_runtime_start_that_fails_with_an_empty_message_names_the_exception_and_is_retried(monkeypatch):
    from fathom.ui.backend import RuntimeStartError

    calls = []

    async def failing_start(self):
        calls.append(1)
        raise TimeoutError()

    with serve_in_thread(_endpoint()) as url:
        b = _backend_with_start(monkeypatch, failing_start, url, 5)
        try:
            with pytest.raises(RuntimeStartError, match=r"could not start the episode runtime for 'base-m': "
                                                        r"TimeoutError \(no message\)$"):
                b.warm("base-m")
            with pytest.raises(RuntimeStartError, match="TimeoutError"):
                b.warm("fathom-sft")
            assert len(calls) == 2  # a failed start is tried again on the next run
        finally:
            b.close()

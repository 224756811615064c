"""`fathom ui`'s model list: the base and its LoRA adapters from `/v1/models`, and a clear error when the endpoint is down."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from fathom.config import load_config
from fathom.entrypoints.common import serve_in_thread
from fathom.entrypoints.served import ServedError, served
from fathom.entrypoints.ui_backend import Backend
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

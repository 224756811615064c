"""A fake vLLM for tests and benchmarks: the scripted policies (fathom.env_server.scripted) plus what a test needs
to drive a real stack through failures.

- `POST /scripted/policy {"policy": ...}` switches the policy at run time.
- `POST /scripted/fault` injects faults at run time: `delay_s` per completion, `drop_logprobs`.
- vLLM's weight-sync dev routes (`/pause`, `/resume`, `/reset_prefix_cache`, `/collective_rpc` reload_weights),
  enough for DiskMergedSync and the supervisor's restart hook; `GET /scripted/weights` tells the last weights path
  it was given, so a supervisor's re-applied weights can be checked (tests/integration/faults.py).

`fathom env scripted` serves it as a process.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, HTTPException, Request

from fathom.env_server.scripted import POLICIES, create_scripted_app


def create_fake_vllm(policy: str = "reference", model: str = "fathom-base", max_model_len: int = 32768,
                     tokenizer_dir: str | None = None, fix_fraction: float = 0.25, delay_s: float = 0.0) -> FastAPI:
    app = create_scripted_app(policy, model, max_model_len, tokenizer_dir, fix_fraction, delay_s)
    app.title = "FATHOM fake vLLM (scripted policies, faults, weight-sync routes)"
    app.state.fault = {"delay_s": 0.0, "drop_logprobs": False}
    app.state.weights = {"weights_path": None, "reloads": 0}

    async def inject(resp: dict[str, Any]) -> None:
        if app.state.fault["delay_s"] > 0:
            await asyncio.sleep(app.state.fault["delay_s"])
        if app.state.fault["drop_logprobs"]:
            for choice in resp["choices"]:
                choice["logprobs"] = None

    app.state.reply_hooks.append(inject)

    @app.post("/scripted/policy")
    async def set_policy(request: Request) -> dict[str, str]:
        name = (await request.json()).get("policy")
        if name not in POLICIES:
            raise HTTPException(422, f"policy: unknown {name!r}; choose one of {', '.join(POLICIES)}")
        app.state.policy = name
        return {"policy": name}

    @app.post("/scripted/fault")
    async def set_fault(request: Request) -> dict[str, Any]:
        body = await request.json()
        unknown = set(body) - set(app.state.fault) if isinstance(body, dict) else {"(not an object)"}
        if unknown:
            raise HTTPException(422, f"unknown faults {sorted(unknown)}; known: {sorted(app.state.fault)}")
        app.state.fault.update(body)
        return app.state.fault

    @app.post("/pause")
    @app.post("/resume")
    async def pause_resume() -> dict[str, Any]:
        return {}

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> dict[str, bool]:
        return {"success": True}

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> dict[str, Any]:
        body = await request.json()
        if body.get("method") != "reload_weights":
            raise HTTPException(400, f"method {body.get('method')!r}: only reload_weights is scripted")
        app.state.weights = {"weights_path": body["kwargs"]["weights_path"], "reloads": app.state.weights["reloads"] + 1}
        return {"results": [None]}

    @app.get("/scripted/weights")
    async def weights() -> dict[str, Any]:
        return app.state.weights

    return app

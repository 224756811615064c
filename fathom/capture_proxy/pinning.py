"""Which policy version a new session is pinned to.

Adapter sync: the trainer loads `trl-policy-vN` adapters into vLLM, which lists them in
GET /v1/models with `parent` = the base served name. The newest loaded one is the policy; a
session keeps that adapter name for all its calls, so a sync mid-episode cannot switch the
weights under a running rollout (OpenEnv's capture server rewrites to the base name and would
sample the base model).

Merged sync: the trainer overwrites the base weights in place, so there is only one name. The
trainer reports its sync count with POST /policy/version, and that count is the version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from fathom.capture_proxy.upstream import UpstreamClient, UpstreamError


class PinningError(Exception):
    """The policy could not be resolved (engine down, base model missing); the message says which."""


class UnknownModel(PinningError):
    """An eval session named a model the policy server does not serve on top of the base."""


@dataclass(frozen=True, slots=True)
class Pin:
    model: str
    """The upstream model name requests are rewritten to."""
    version: int


def newest_adapter(models: list[dict[str, Any]], base_model: str, prefix: str) -> Pin | None:
    """The highest `{prefix}N` adapter whose parent is `base_model`, or None when none is loaded."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)")
    best: Pin | None = None
    for card in models:
        m = pattern.fullmatch(str(card.get("id", "")))
        if m and card.get("parent") == base_model:
            version = int(m.group(1))
            if best is None or version > best.version:
                best = Pin(card["id"], version)
    return best


class Pinner:
    """Resolves the public name `policy` to a pinned upstream name plus version."""

    def __init__(
        self, upstream: UpstreamClient, *, base_model: str, weight_sync: Literal["adapter", "merged"], adapter_prefix: str
    ) -> None:
        self.upstream = upstream
        self.base_model = base_model
        self.weight_sync = weight_sync
        self.adapter_prefix = adapter_prefix
        self.merged_version = 0
        """Sync count the trainer last reported (merged sync)."""

    def report_version(self, version: int) -> None:
        if version < self.merged_version:
            raise ValueError(
                f"policy version {version} is older than the reported {self.merged_version}; versions only move forward"
            )
        self.merged_version = version

    async def models(self) -> list[dict[str, Any]]:
        try:
            resp = await self.upstream.get("/v1/models", timeout_s=self.upstream.connect_timeout_s + 5.0)
        except UpstreamError as e:
            raise PinningError(f"cannot list the policy server's models to pin a version: {e}") from None
        if resp.status != 200:
            raise PinningError(f"policy server answered GET /v1/models with HTTP {resp.status}: {resp.body[:200]!r}")
        try:
            data = orjson.loads(resp.body)["data"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise PinningError(f"policy server's GET /v1/models is not an OpenAI model list: {resp.body[:200]!r}") from None
        return [card for card in data if isinstance(card, dict)]

    async def resolve(self) -> Pin:
        """Ask the engine what is loaded now; always a fresh look, so a session opened after a sync sees it."""
        models = await self.models()
        if not any(card.get("id") == self.base_model for card in models):
            served = ", ".join(sorted(str(c.get("id")) for c in models)) or "nothing"
            raise PinningError(
                f"policy server does not serve the base model {self.base_model!r} (it serves: {served}); "
                "check policy_server.served_model_name"
            )
        if self.weight_sync == "adapter":
            pin = newest_adapter(models, self.base_model, self.adapter_prefix)
            if pin is not None:
                return pin
        return Pin(self.base_model, self.merged_version)

    async def resolve_named(self, name: str) -> Pin:
        """Pin an eval session to `name`: the base, or an adapter loaded on top of it."""
        models = await self.models()
        card = next((c for c in models if c.get("id") == name), None)
        if card is None or (name != self.base_model and card.get("parent") != self.base_model):
            served = ", ".join(sorted(str(c.get("id")) for c in models)) or "nothing"
            raise UnknownModel(
                f"model {name!r} is not served on top of the base {self.base_model!r} (the policy server serves: "
                f"{served}); load the adapter first (POST /v1/load_lora_adapter) or name a served one"
            )
        m = re.fullmatch(re.escape(self.adapter_prefix) + r"(\d+)", name)
        return Pin(name, int(m.group(1)) if m else (self.merged_version if name == self.base_model else 0))

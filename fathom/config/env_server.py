"""Settings of the OpenEnv env server and its episode runner (owned by the env_server component)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fathom.config.base import FathomModel, local_url


class EnvServerConfig(FathomModel):
    host: str = "127.0.0.1"
    """Interface the env server binds to."""

    port: int = 8200
    """Port of the env server."""

    @property
    def url(self) -> str:
        """The env server's base URL as a client on this machine reaches it."""
        return local_url(self.host, self.port)

    max_concurrent_envs: int = Field(64, ge=1)
    """Concurrent OpenEnv sessions and episodes the server accepts."""

    max_turns: int = Field(8, ge=1)
    """Root turns per episode before it stops with reason `max_turns`."""

    max_depth: int = Field(2, ge=0)
    """Deepest `llm()` recursion: 2 in training, 4 at demo time. Root turns are depth 0, `llm()` from
    the root REPL is depth 1; a sub-call at a depth below this may itself run as an RLM episode."""

    demo_max_depth: int = Field(4, ge=0)
    """Recursion depth for demo and eval episodes, which send it as `limits.max_depth`; training uses `max_depth`."""

    max_subcalls: int = Field(64, ge=0)
    """`llm()` prompts one episode may send (the whole recursion tree together); past it `llm()` raises in the REPL."""

    max_tokens: int = Field(65536, ge=1)
    """Tokens (prompt + completion, every call of the episode) before the episode stops with reason `max_tokens`."""

    wall_clock_s: float = Field(600.0, gt=0)
    """Wall-clock limit of one episode; past it the episode stops with reason `timeout`."""

    llm_batch_concurrency: int = Field(8, ge=1)
    """Sub-calls of one `llm_batch()` that run at once."""

    preview_chars: int = Field(300, ge=0)
    """Characters of the context's start shown in the first user message (the context itself never is)."""

    sub_rlm_min_chars: int = Field(8000, ge=1)
    """A sub-call prompt longer than this, at a depth below `max_depth`, runs as a nested RLM episode
    with the prompt as its `context` instead of one plain model call."""

    sub_rlm_max_turns: int = Field(4, ge=1)
    """Turn limit of a nested RLM episode."""

    task_cache_chars: int = Field(128 * 2**20, ge=0)
    """Total context characters of recently used tasks kept in memory (a GRPO group reruns one task); 0 disables."""

    prompt_format: Literal["tokens", "chat"] = "tokens"
    """How turns reach the model. `tokens` (default, required for training): each turn's prompt is the last
    turn's prompt + completion ids as sampled + the served template's tokens for the new user message, sent as
    a token-id prompt to `/v1/completions`. `chat`: chat text to `/v1/chat/completions`, for API-only servers
    that take no token prompts; the engine re-tokenizes earlier replies, so turns may not extend each other."""

    tokenizer: str = ""
    """Directory of the served model's tokenizer and chat template (token path); empty means the directory
    `fathom env serve` resolves from `server_model` or `model`. Checked against the engine's /tokenize."""

    proxy_url: str = ""
    """Default capture proxy base URL for episodes that name none; empty means http://{capture_proxy.host}:{capture_proxy.port}."""

    max_body_bytes: int = Field(4 * 2**20, gt=0)
    """Largest HTTP request body accepted (episode requests, OpenEnv reset/step); larger ones get 413 before parsing.
    WebSocket messages have their own 64 MiB cap."""

    urls: list[str] = []
    """Env server roots the trainer's rollout worker spreads episodes over, fewest in flight first (env servers on
    other hosts: set `shared_token` on all of them). Empty means the one at http://{host}:{port}."""

    proxy_timeout_s: float = Field(300.0, gt=0)
    """Timeout of one model call through the proxy (vLLM on CPU can take minutes for a long turn)."""

    result_retention_s: float = Field(3600.0, gt=0)
    """How long a finished episode's result stays readable at `GET /episodes/{id}`."""

    http_episode_idle_s: float = Field(600.0, gt=0)
    """An episode started through stateless HTTP `/reset` is closed after this long without a `/step`."""

    @model_validator(mode="after")
    def _check(self) -> "EnvServerConfig":
        if self.sub_rlm_max_turns > self.max_turns:
            raise ValueError(
                f"env_server.sub_rlm_max_turns ({self.sub_rlm_max_turns}) exceeds env_server.max_turns "
                f"({self.max_turns}); a nested episode may not outlive its root: lower sub_rlm_max_turns"
            )
        return self

"""What an OpenAI-compatible endpoint serves (`/v1/models`) and whether it takes token prompts (`/tokenize`):
shared by `fathom ask` and `fathom ui`."""

from __future__ import annotations


class ServedError(Exception):
    """The endpoint is unreachable, serves nothing, or not the model asked for; the message says which."""


def list_models(base_url: str) -> list[dict]:
    """The endpoint's model cards; vLLM lists the base first and LoRA adapters after it (`parent` = the base)."""
    import httpx

    try:
        return httpx.get(f"{base_url.rstrip('/')}/v1/models", timeout=10).raise_for_status().json()["data"]
    except (httpx.HTTPError, ValueError, KeyError) as e:
        raise ServedError(f"no OpenAI-compatible model server at {base_url} ({e}); start one (`vllm serve ...`) "
                          "or fix --base-url") from None


def served(base_url: str, model: str | None) -> tuple[str, str]:
    """(model to pin, the base it is served on): an adapter's `parent` is its base."""
    cards = list_models(base_url)
    names = {c["id"]: c for c in cards}
    if model is None:
        if not cards:
            raise ServedError(f"{base_url} serves no model")
        model = cards[-1]["id"]
    if model not in names:
        raise ServedError(f"--model {model!r} is not served at {base_url}; it serves: {', '.join(names)}")
    return model, names[model].get("parent") or model


def token_path(base_url: str, base: str, tokenizer: str | None) -> tuple[str | None, str]:
    """(tokenizer directory or None for the chat path, why). The token path needs the server's `/tokenize`
    and the served model's own tokenizer: `tokenizer`, or the base model's name resolved on this machine."""
    import httpx

    from fathom.config.model import ModelConfig
    from fathom.policy_server.models import ModelError, resolve_model

    probe = {"model": base, "messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}
    try:
        takes_tokens = httpx.post(f"{base_url.rstrip('/')}/tokenize", json=probe, timeout=10).status_code == 200
    except httpx.HTTPError:
        takes_tokens = False
    if not takes_tokens:
        return None, "chat path: the server has no /tokenize"
    if tokenizer:
        return tokenizer, f"token path, tokenizer {tokenizer}"
    try:
        return str(resolve_model(ModelConfig(name=base), local_only=True)), f"token path, tokenizer of {base}"
    except ModelError:
        return None, f"chat path: no local tokenizer for {base!r} (pass --tokenizer DIR for the token path)"

"""Token-space prompts: the served model's chat template, applied only to text the environment wrote.

Turn 0 of a conversation is the template's rendering of the initial messages with the generation
prompt. Turn k+1 is turn k's prompt ids + its completion ids exactly as sampled (+ the end-of-turn
token when the completion lacks it, e.g. cut by the length limit) + the template's tokens for the new
user message and the next generation prompt. The model's own tokens are never decoded and re-encoded,
so every turn extends the previous one exactly and TRL chains a conversation into one training row.

The suffix text comes from the template itself (the difference of two renderings), never from
hand-built `<|im_start|>` strings. `check_against` compares one rendering with the engine's own
`/tokenize` so a tokenizer or template that differs from the served one is refused at start-up.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

# A conversation that exercises every part of the template the harness uses: system, user,
# assistant (its end-of-turn), a follow-up user message and the generation prompt.
PROBE = [
    {"role": "system", "content": "You are a probe."},
    {"role": "user", "content": "Question: what is 2+3?"},
    {"role": "assistant", "content": "```repl\nprint(2 + 3)\n```"},
    {"role": "user", "content": "REPL output:\n```\n5\n```"},
]
_PLACEHOLDER = "\x00fathom-assistant\x00"


class TemplateError(ValueError):
    """The tokenizer/template cannot build token-space turns, or differs from the served model's."""


class ChatTokens:
    """One model's tokenizer and chat template, used to build token-space prompts."""

    def __init__(self, tokenizer: Any, name: str):
        self.tok = tokenizer
        self.name = name
        eot = tokenizer.eos_token
        if not eot or tokenizer.chat_template is None:
            raise TemplateError(f"tokenizer of {name!r} has no chat template or eos token; token-space prompts need "
                                "both: use a chat model, or set env_server.prompt_format = 'chat'")
        self.eot_text: str = eot
        ids = tokenizer.encode(eot, add_special_tokens=False)
        if len(ids) != 1:
            raise TemplateError(f"eos token {eot!r} of {name!r} is not a single token; "
                                "set env_server.prompt_format = 'chat'")
        self.eot_id: int = ids[0]
        # Where an assistant turn's text ends and the template's own text after it begins.
        base = self._render(PROBE[:2] + [{"role": "assistant", "content": _PLACEHOLDER}], generation=False)
        at = base.find(_PLACEHOLDER)
        end = base.find(self.eot_text, at) if at >= 0 else -1
        if end < 0 or base[at + len(_PLACEHOLDER): end]:
            raise TemplateError(f"the chat template of {name!r} does not end an assistant message with its eos token "
                                f"{eot!r} right after the content; set env_server.prompt_format = 'chat'")
        self._after_eot = base[end + len(self.eot_text):]
        self._head = PROBE[:2] + [{"role": "assistant", "content": _PLACEHOLDER}]
        self._base = base

    @classmethod
    def load(cls, directory: str | Path) -> "ChatTokens":
        from transformers import AutoTokenizer

        d = Path(directory)
        try:
            tok = AutoTokenizer.from_pretrained(str(d))
        except (OSError, ValueError) as e:
            raise TemplateError(f"cannot load a tokenizer from {str(d)!r} ({e}); point env_server.tokenizer at "
                                "the served model's directory") from None
        return cls(tok, d.name)

    def _render(self, messages: list[dict[str, str]], generation: bool) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)

    def encode(self, text: str) -> list[int]:
        """Text the environment wrote (special tokens in it are the template's) as ids."""
        return self.tok.encode(text, add_special_tokens=False)

    def initial(self, messages: list[dict[str, str]]) -> list[int]:
        """Turn 0: the template's rendering of `messages` with the generation prompt."""
        return self.encode(self._render(messages, generation=True))

    def user_suffix(self, user: str) -> list[int]:
        """What follows an assistant's end-of-turn token: the new user message and the generation prompt."""
        full = self._render(self._head + [{"role": "user", "content": user}], generation=True)
        base = self._base
        if not full.startswith(base):
            raise TemplateError(f"the chat template of {self.name!r} re-renders earlier turns when a user message is "
                                "added, so turns cannot extend each other; set env_server.prompt_format = 'chat'")
        return self.encode(self._after_eot + full[len(base):])

    def next_prompt(self, prompt: list[int], completion: list[int], user: str) -> list[int]:
        """Turn k+1 from turn k's prompt and completion ids as sampled, plus the new user message."""
        closed = completion if completion and completion[-1] == self.eot_id else [*completion, self.eot_id]
        return [*prompt, *closed, *self.user_suffix(user)]

    def check_against(self, served: list[int]) -> None:
        """Refuse when the engine's tokenization of PROBE differs from ours (another tokenizer or template)."""
        ours = self.initial(PROBE)
        if served != ours:
            n = min(len(ours), len(served))
            at = next((i for i in range(n) if ours[i] != served[i]), n)
            raise TemplateError(
                f"the served model's chat template or tokenizer differs from {self.name!r}'s: the engine renders a "
                f"probe conversation as {len(served)} tokens, this env server as {len(ours)}, first difference at "
                f"token {at}; point env_server.tokenizer at the directory the policy server serves"
            )


class TokenPath:
    """The env server's token-space prompt builder, checked once per capture proxy against the engine it fronts."""

    def __init__(self, chat: ChatTokens):
        self.chat = chat
        self.max_model_len: dict[str, int] = {}
        """Per proxy base URL, once verified: the engine's context length (prompts past it never reach it)."""
        self._locks: dict[str, Any] = {}

    async def ensure(self, proxy: Any) -> int:
        """Check the template against `proxy`'s engine (once per URL); return its max_model_len or raise."""
        url = proxy.base_url
        if url in self.max_model_len:
            return self.max_model_len[url]
        lock = self._locks.setdefault(url, asyncio.Lock())
        async with lock:
            if url not in self.max_model_len:
                served, max_len = await proxy.tokenize_chat(PROBE)
                self.chat.check_against(served)
                self.max_model_len[url] = max_len
        return self.max_model_len[url]

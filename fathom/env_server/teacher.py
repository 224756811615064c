"""The scripted teacher on the token path: the reference policies, spoken in the served model's own tokens.

`fathom sft` records its training data by running real episodes (env server, sandbox, capture
proxy) against this server instead of vLLM. It answers vLLM's `/v1/completions` with a
token-id prompt, `/tokenize` and `/v1/models`, using the real tokenizer of the model being
trained, so every recorded example has exactly the template, message layout and token
boundaries the policy sees in GRPO. Its replies are the task families' reference programs;
a share of episodes first makes a wrong attempt (a typo that raises, or a look at the text
without an answer) and fixes it on the next turn, so the model also learns to read REPL output.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from typing import Any

from fastapi import FastAPI, HTTPException, Request

from fathom.env_server.scripted import scripted_reply

_FIRST_CONTEXT = re.compile(r"\bcontext\b(?=\.)")


def split_messages(text: str, start: str, end: str) -> list[dict[str, str]]:
    """Chat messages of a rendered prompt (`<start>role\\ncontent<end>` segments); the open generation turn is dropped."""
    out = []
    for seg in text.split(start)[1:]:
        body, closed, _ = seg.partition(end)
        role, _, content = body.partition("\n")
        if closed:
            out.append({"role": role.strip(), "content": content})
    return out


def _wants_fix(question: str, fix_fraction: float) -> bool:
    h = int.from_bytes(hashlib.sha256(question.encode()).digest()[:4], "big") / 2**32
    return h < fix_fraction


def wrong_attempt(question: str, reference: str) -> str:
    """A first turn that does not answer: a typo that raises NameError, or a look at the text's size and start."""
    if int(hashlib.sha256(b"kind" + question.encode()).hexdigest(), 16) % 2 and _FIRST_CONTEXT.search(reference):
        body = _FIRST_CONTEXT.sub("contxt", reference, count=1)
        return f"```repl\n{body.rstrip()}\n```"
    return "```repl\nprint(len(context))\nprint(context[:300])\n```"


def teacher_reply(messages: list[dict[str, str]], fix_fraction: float) -> str:
    """The teacher's next assistant message for this conversation."""
    reference = scripted_reply("reference", messages)
    assistants = [m for m in messages if m["role"] == "assistant"]
    user = messages[1]["content"] if len(messages) > 1 else ""
    if assistants or not reference.startswith("```repl") or not _wants_fix(user, fix_fraction):
        return reference
    return wrong_attempt(user, reference[len("```repl\n"):-len("\n```")])


def create_teacher_app(tokenizer: Any, model: str, *, max_model_len: int, fix_fraction: float = 0.25) -> FastAPI:
    """An OpenAI-compatible upstream that answers token-id prompts with the teacher's replies as token ids."""
    app = FastAPI(title="FATHOM scripted teacher (token path)")
    start_tok, end_tok = "<|im_start|>", tokenizer.eos_token
    if start_tok not in tokenizer.get_vocab() or end_tok is None:
        raise ValueError(f"the teacher needs a chat template with {start_tok} turns and an EOS token; "
                         f"tokenizer of {model!r} has neither")
    eos_id = tokenizer.convert_tokens_to_ids(end_tok)
    app.state.calls = 0

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "fathom",
                                             "root": model, "parent": None, "max_model_len": max_model_len}]}

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        body = await request.json()
        if isinstance(body.get("messages"), list):
            ids = tokenizer.apply_chat_template(body["messages"], tokenize=True, return_dict=False,
                                                add_generation_prompt=bool(body.get("add_generation_prompt", True)))
        elif isinstance(body.get("prompt"), str):
            ids = tokenizer(body["prompt"], add_special_tokens=bool(body.get("add_special_tokens", True))).input_ids
        else:
            raise HTTPException(400, "body needs `messages` (a list) or `prompt` (a str)")
        ids = list(ids)
        return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids}

    def reply_ids(messages: list[dict[str, str]], prompt: list[int], body: dict[str, Any]) -> tuple[list[int], str]:
        app.state.calls += 1
        ids = tokenizer(teacher_reply(messages, fix_fraction), add_special_tokens=False).input_ids + [eos_id]
        cap = int(body.get("max_tokens") or 1 << 30)
        finish = "stop"
        if len(ids) > cap:
            ids, finish = ids[:cap], "length"
        if len(prompt) + len(ids) > max_model_len:
            raise HTTPException(400, f"This model's maximum context length is {max_model_len} tokens")
        return ids, finish

    def usage(prompt: list[int], ids: list[int]) -> dict[str, int]:
        return {"prompt_tokens": len(prompt), "completion_tokens": len(ids), "total_tokens": len(prompt) + len(ids)}

    @app.post("/v1/completions")
    async def completions(request: Request) -> dict[str, Any]:
        body = await request.json()
        prompt = body.get("prompt")
        if not (isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt)):
            raise HTTPException(400, "prompt: the teacher takes one list of token ids (the token path)")
        messages = split_messages(tokenizer.decode(prompt, skip_special_tokens=False), start_tok, end_tok)
        ids, finish = reply_ids(messages, prompt, body)
        choice: dict[str, Any] = {"index": 0, "text": tokenizer.decode(ids, skip_special_tokens=True),
                                  "finish_reason": finish, "token_ids": ids, "prompt_token_ids": prompt,
                                  "logprobs": {"token_logprobs": [0.0] * len(ids),
                                               "tokens": tokenizer.convert_ids_to_tokens(ids)}}
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": body.get("model") or model, "choices": [choice], "usage": usage(prompt, ids)}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        """The chat-text path (API-only configs): the teacher renders the messages with the model's template."""
        body = await request.json()
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise HTTPException(400, "messages: a non-empty list is required")
        prompt = list(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False,
                                                    add_generation_prompt=True))
        ids, finish = reply_ids(messages, prompt, body)
        tokens = tokenizer.convert_ids_to_tokens(ids)
        choice = {"index": 0, "finish_reason": finish, "token_ids": ids,
                  "message": {"role": "assistant", "content": tokenizer.decode(ids, skip_special_tokens=True)},
                  "logprobs": {"content": [{"token": t, "logprob": 0.0, "bytes": None, "top_logprobs": []}
                                           for t in tokens]}}
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model") or model, "choices": [choice], "prompt_token_ids": prompt,
                "usage": usage(prompt, ids)}

    return app

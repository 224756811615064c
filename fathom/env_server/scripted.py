"""Scripted reference policies: a small OpenAI-compatible server that plays the model without one.

It reads the RLM scaffold's chat (the question is in the first user message; the context
never is) and answers with code. `reference` writes each task family's working solution
(`fathom.tasks.reference_solution`), which proves every task is solvable with the tools.
`no_tools` answers from the question alone and should score close to 0. `teach` is `reference`
with a wrong first attempt in a share of episodes (a typo that raises, or a look at the text
without an answer), fixed on the next turn: the SFT teacher (`fathom sft`). A sub-call that a reference program
sends (the `bios` family's passages and question) gets the generator's own answer (`fathom.tasks.subcall_answer`),
so the teacher answers its own sub-calls right. The others
exercise the harness: sub-calls and nested episodes, replies without code, crashing code.

Responses are shaped like vLLM's (usage, `prompt_token_ids`, per-choice `token_ids` and
logprobs when asked) so the capture proxy records them like a real engine's. Tokens are
word pieces hashed to ids; each message is tokenized on its own, so every turn's prompt
ids start with the previous turn's prompt + completion ids, as with a real chat template.

Given a real tokenizer (`tokenizer_dir`), it also plays the token path like vLLM: `/tokenize`
renders with that tokenizer's chat template, and `/v1/completions` takes a token-id prompt, reads
the conversation back out of it and samples the reply's ids plus the end-of-turn token.

This module is what the SFT teacher needs. Tests and benchmarks use it through `fathom.testing.fake_vllm`, which
adds run-time policy switching, fault injection and vLLM's weight-sync routes.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
import zlib
from typing import Any

from fastapi import FastAPI, HTTPException, Request

from fathom.env_server.server import prompts

POLICIES = ("reference", "teach", "no_tools", "recursive", "no_code", "crash")
IM_START, IM_END = 0, 1
_PIECE = re.compile(r"\s*\S+|\s+")
_QUESTION = re.compile(r"^Question: (.*?)\n\n`context` holds", re.DOTALL)


def tokenize(text: str) -> list[tuple[int, str]]:
    return [(zlib.crc32(p.encode()) % 100_000 + 2, p) for p in _PIECE.findall(text)]


def render_prompt(messages: list[dict[str, Any]]) -> list[int]:
    ids: list[int] = []
    for m in messages:
        ids += [IM_START] + [i for i, _ in tokenize(f"{m['role']}\n")]
        ids += [i for i, _ in tokenize(str(m.get("content") or ""))] + [IM_END] + [i for i, _ in tokenize("\n")]
    return ids + [IM_START] + [i for i, _ in tokenize("assistant\n")]


def _repl(code: str) -> str:
    return f"```repl\n{code.rstrip()}\n```"


def _no_tools_guess(question: str) -> str:
    quoted = re.findall(r"['\"]([^'\"]{1,40})['\"]", question)
    if quoted:
        return quoted[0]
    words = re.findall(r"[A-Za-z0-9_-]+", question)
    return words[-1] if words else "unknown"


def _share(salt: str, question: str) -> float:
    """A stable number in [0, 1) per question, so a task's episodes all make the same choice."""
    return zlib.crc32(f"{salt}/{question}".encode()) / 2**32


def wrong_attempt(question: str, program: str) -> str:
    """A first turn that does not answer: `program` with a typo that raises NameError, or a look at the text."""
    typo = re.sub(r"\bcontext\b(?=\.)", "contxt", program, count=1)
    if _share("kind", question) < 0.5 and typo != program:
        return _repl(typo)
    return _repl("print(len(context))\nprint(context[:300])")


def scripted_reply(policy: str, messages: list[dict[str, Any]], fix_fraction: float = 0.25) -> str:
    """The policy's next assistant message for this chat (`fix_fraction`: the `teach` policy's share of wrong starts)."""
    from fathom.tasks import reference_solution, subcall_answer

    is_rlm = bool(messages) and messages[0].get("role") == "system" and messages[0].get("content") == prompts.SYSTEM_PROMPT
    if not is_rlm:  # a plain llm() sub-call
        prompt = str(messages[-1].get("content") or "")
        # A reference program's own sub-call (bios: passages + question) gets the generator's answer, so the
        # teacher's sub-call rows teach a short, right reply.
        answer = subcall_answer(prompt)
        if answer is not None:
            return answer
        return f"[scripted reply to a {len(prompt)}-character prompt beginning {prompt[:24]!r}]"
    m = _QUESTION.match(str(messages[1].get("content") or ""))
    question = m.group(1) if m else ""
    turn = sum(1 for x in messages if x.get("role") == "assistant")
    if question == prompts.NESTED_QUESTION:  # a nested RLM episode started by a deep llm()
        return _repl("head = context[:60]\nprint(len(context))\nFINAL(head)")
    if policy == "no_tools":
        return _repl(f"FINAL({_no_tools_guess(question)!r})")
    if policy == "recursive" and turn == 0:
        return _repl(
            "parts = llm_batch([context[:500], context[500:1000]])\n"
            "deep = llm('Summarise this text.\\n' + context[:9000])\n"
            "print(len(parts), deep[:80])"
        )
    if policy == "no_code" and turn == 0:
        return "I think the answer is probably in the document somewhere."
    if policy == "crash" and turn == 0:
        return _repl("def f(n):\n    return f(n + 1)\nf(0)")
    try:
        if policy == "teach" and turn == 0 and _share("fix", question) < fix_fraction:
            return wrong_attempt(question, reference_solution(question))
        return _repl(reference_solution(question))
    except ValueError as e:  # a question no generated task asks: say so instead of failing the call
        return f"I cannot solve this question with a scripted solution ({e})."


def _chat_response(body: dict[str, Any], policy: str, model: str, fix_fraction: float = 0.25) -> dict[str, Any]:
    messages = body.get("messages") or []
    text = scripted_reply(policy, messages, fix_fraction)
    pieces = tokenize(text)
    finish = "stop"
    cap = body.get("max_tokens") or body.get("max_completion_tokens")
    if cap and len(pieces) + 1 > cap:
        pieces, finish = pieces[: max(cap - 1, 0)], "length"
        text = "".join(p for _, p in pieces)
    comp_ids = [i for i, _ in pieces] + ([IM_END] if finish == "stop" else [])
    prompt_ids = render_prompt(messages)
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": finish,
        "logprobs": None,
    }
    if body.get("logprobs"):
        toks = [p for _, p in pieces] + (["<|im_end|>"] if finish == "stop" else [])
        choice["logprobs"] = {
            "content": [
                {"token": t, "logprob": -0.01, "bytes": list(t.encode()), "top_logprobs": []} for t in toks
            ]
        }
    out: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(comp_ids),
            "total_tokens": len(prompt_ids) + len(comp_ids),
        },
    }
    if body.get("return_token_ids"):
        choice["token_ids"] = comp_ids
        out["prompt_token_ids"] = prompt_ids
    return out


class TokenSide:
    """The scripted model on a real tokenizer: token-id prompts in, reply ids + end-of-turn out."""

    def __init__(self, tokenizer_dir: str):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(tokenizer_dir)
        # The template's own turn markers, taken from the tokenizer (its bos/eos are Qwen's im_start/im_end).
        self.start, self.end = self.tok.bos_token, self.tok.eos_token
        self.end_id = self.tok.convert_tokens_to_ids(self.end)
        self._turn = re.compile(re.escape(self.start) + r"(\w+)\n(.*?)" + re.escape(self.end), re.DOTALL)

    def tokenize(self, body: dict[str, Any]) -> list[int]:
        if "messages" in body:
            text = self.tok.apply_chat_template(body["messages"], tokenize=False,
                                                add_generation_prompt=body.get("add_generation_prompt", True))
        else:
            text = str(body.get("prompt") or "")
        return self.tok.encode(text, add_special_tokens=False)

    def messages(self, prompt_ids: list[int]) -> list[dict[str, Any]]:
        text = self.tok.decode(prompt_ids, skip_special_tokens=False)
        return [{"role": m.group(1), "content": m.group(2)} for m in self._turn.finditer(text)]

    def complete(self, body: dict[str, Any], policy: str, model: str, fix_fraction: float = 0.25) -> dict[str, Any]:
        prompt = body["prompt"]
        text = scripted_reply(policy, self.messages(prompt), fix_fraction)
        ids, finish = self.tok.encode(text, add_special_tokens=False) + [self.end_id], "stop"
        cap = body.get("max_tokens")
        if cap and len(ids) > cap:
            ids, finish = ids[:cap], "length"
        text = self.tok.decode(ids, skip_special_tokens=True)
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None,
                                  "token_ids": ids, "prompt_token_ids": prompt}
        if body.get("logprobs") is not None:
            choice["logprobs"] = {"token_logprobs": [-0.01] * len(ids), "tokens": [], "text_offset": [],
                                  "top_logprobs": []}
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": body.get("model") or model, "choices": [choice],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                          "total_tokens": len(prompt) + len(ids)}}


def create_scripted_app(policy: str = "reference", model: str = "fathom-base", max_model_len: int = 32768,
                        tokenizer_dir: str | None = None, fix_fraction: float = 0.25, delay_s: float = 0.0) -> FastAPI:
    """An OpenAI-compatible upstream that plays `policy` (`app.state.policy`) without a model.

    `delay_s` holds each completion that long, like a model that takes its time (a live view then has states
    to show between turns). `app.state.replied_at` holds the time.time() each completion was returned, and every
    coroutine in `app.state.reply_hooks` sees each response before it goes out (fathom.testing.fake_vllm's faults).

    With `tokenizer_dir` it also serves `/tokenize` and token-id prompts on `/v1/completions` (the token path)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown scripted policy {policy!r}; choose one of {', '.join(POLICIES)}")
    app = FastAPI(title="FATHOM scripted policy upstream")
    app.state.policy = policy
    app.state.calls = 0
    app.state.replied_at = []
    app.state.reply_hooks = []

    async def reply(make: Any) -> dict[str, Any]:
        if delay_s > 0:  # the upstream's own pace (--delay)
            await asyncio.sleep(delay_s)
        resp = make()
        for hook in app.state.reply_hooks:
            await hook(resp)
        app.state.replied_at.append(time.time())
        return resp

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": model, "object": "model", "created": 0, "owned_by": "fathom", "root": model,
                "parent": None, "max_model_len": max_model_len}
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            raise HTTPException(400, "messages: a non-empty list is required")
        app.state.calls += 1
        return await reply(lambda: _chat_response(body, app.state.policy, model, fix_fraction))

    if tokenizer_dir:
        side = TokenSide(tokenizer_dir)

        @app.post("/tokenize")
        async def tokenize(request: Request) -> dict[str, Any]:
            ids = side.tokenize(await request.json())
            return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids}

        @app.post("/v1/completions")
        async def completions(request: Request) -> dict[str, Any]:
            body = await request.json()
            prompt = body.get("prompt") if isinstance(body, dict) else None
            if not isinstance(prompt, list) or not prompt or not all(type(t) is int for t in prompt):
                raise HTTPException(400, "prompt: a non-empty list of token ids is required")
            app.state.calls += 1
            return await reply(lambda: side.complete(body, app.state.policy, model, fix_fraction))

    return app

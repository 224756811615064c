"""The harness on the token path: every turn extends the last one exactly, the served template is checked,
and a prompt past the context window stops the episode before it reaches the engine."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest

from fathom.config.env_server import EnvServerConfig
from fathom.env_server.server import prompts
from fathom.env_server.server.harness import Harness, Limits, Tally, Unscorable
from fathom.capture_proxy.client import ProxySession
from fathom.env_server.server.tokens import ChatTokens, TokenPath
from fathom.protocol import Sampling
from tests.unit.env_server.fakes import FakePool, FakeProxy, byte_tokenizer

CONTEXT = "alpha " * 50 + "The secret code is 7781. " + "omega " * 50 + "x" * 9000


@pytest.fixture(scope="module")
def chat() -> ChatTokens:
    return ChatTokens(byte_tokenizer(), "byte-test")


def repl(code: str) -> str:
    return f"```repl\n{code}\n```"


def run(chat, model, *, max_turns=4, max_model_len=100_000, sampling=None, served_probe=None, cfg=None):
    fp = FakeProxy(model, tokens=chat, max_model_len=max_model_len)
    fp.served_probe = served_probe
    lim = Limits(max_turns=max_turns, max_depth=2, max_subcalls=16, max_tokens=10**7, wall_clock_s=30)
    ex = concurrent.futures.ThreadPoolExecutor(8)
    path = TokenPath(chat)

    async def go():
        async with fp.client() as http:
            tally = Tally(limits=lim, deadline=time.monotonic() + lim.wall_clock_s)
            h = Harness(cfg=EnvServerConfig(**(cfg or {})), pool=FakePool(), executor=ex, output_cap=2000,
                        proxy=ProxySession(http, "http://proxy", "sess-1", 30), tally=tally,
                        sampling=sampling or Sampling(max_tokens=64), tokens=path)
            turns = []
            out = await h.run_loop("What is the secret code?", CONTEXT, depth=0, parent=None,
                                   max_turns=max_turns, turns=turns)
            return out, turns

    try:
        out, turns = asyncio.run(go())
    finally:
        ex.shutdown()
    return out, turns, fp


def test_each_turn_is_the_last_prompt_plus_its_sampled_ids_plus_the_new_user_message(chat):
    replies = iter([repl("print(len(context))"), "no code here", repl("FINAL('7781')")])
    out, turns, fp = run(chat, lambda text: next(replies))
    assert out.stop_reason == "final" and len(fp.calls) == 3
    bodies = [c["body"] for c in fp.calls]
    msgs = prompts.initial_messages("What is the secret code?", CONTEXT, EnvServerConfig().preview_chars)
    assert bodies[0]["prompt"] == chat.initial(msgs)
    # What the engine sampled travels back as ids and is never re-encoded.
    for prev, nxt, turn in zip(fp.calls, fp.calls[1:], turns):
        sampled = chat.encode(turn.completion) + [chat.eot_id]
        assert nxt["body"]["prompt"][: len(prev["body"]["prompt"]) + len(sampled)] == prev["body"]["prompt"] + sampled
    assert bodies[2]["prompt"] == bodies[1]["prompt"] + chat.encode("no code here") + [chat.eot_id] + chat.user_suffix(
        prompts.NO_CODE_MESSAGE)
    conv = {c["headers"]["x-fathom-conversation"] for c in fp.calls}
    assert len(conv) == 1 and conv.pop().startswith("root-d0-")
    assert all(b["model"] == "policy" and b["return_token_ids"] for b in bodies)


def test_a_completion_cut_by_the_length_limit_gets_the_end_of_turn_token(chat):
    replies = iter(["y" * 200, repl("FINAL('7781')")])
    out, turns, fp = run(chat, lambda text: next(replies), sampling=Sampling(max_tokens=32))
    assert turns[0].finish_reason == "length"
    first, second = fp.calls[0]["body"]["prompt"], fp.calls[1]["body"]["prompt"]
    assert second == first + chat.encode("y" * 32) + [chat.eot_id] + chat.user_suffix(prompts.NO_CODE_MESSAGE)


def test_prompt_past_the_context_window_stops_before_the_engine(chat):
    # Turn 0 fits (with the 64-token cap), turn 1 with the REPL output would not.
    msgs = prompts.initial_messages("What is the secret code?", CONTEXT, EnvServerConfig().preview_chars)
    n0 = len(chat.initial(msgs))
    out, turns, fp = run(chat, lambda text: repl("print('z' * 300)"), max_model_len=n0 + 64 + 100)
    assert out.stop_reason == "max_tokens" and len(turns) == 1 and len(fp.calls) == 1


def test_engine_with_another_template_is_refused_naming_the_model(chat):
    with pytest.raises(Unscorable, match="byte-test"):
        run(chat, lambda text: repl("FINAL('1')"), served_probe=[1, 2, 3])


def test_nested_episode_is_its_own_token_conversation(chat):
    def model(text: str) -> str:
        if prompts.NESTED_QUESTION in text:
            return repl("FINAL(context[:5])")
        if "REPL output" in text:
            return repl("FINAL('done')")
        return repl("a = llm('Summarise: ' + context[:9000])\nb = llm('tiny')\nprint(a, b)")

    out, turns, fp = run(chat, model, cfg={"sub_rlm_min_chars": 8000}, sampling=Sampling(max_tokens=512))
    assert out.stop_reason == "final"
    by_conv: dict[str | None, list] = {}
    for c in fp.calls:
        by_conv.setdefault(c["headers"].get("x-fathom-conversation"), []).append(c)
    roots = [k for k in by_conv if k and k.startswith("root-")]
    nested = [k for k in by_conv if k and k.startswith("subcall-d1-")]
    assert len(roots) == 1 and len(by_conv[roots[0]]) == 2 and len(nested) == 1
    assert len(by_conv[None]) == 1  # the plain llm('tiny') call declares no conversation
    plain = by_conv[None][0]["body"]["prompt"]
    assert plain == chat.initial([{"role": "user", "content": "tiny"}])
    assert turns[0].subcalls[0].turns and turns[0].subcalls[0].response == "Summa"


def test_token_path_without_a_tokenizer_refuses_to_start():
    from fastapi.testclient import TestClient

    from fathom.config import load_config
    from fathom.env_server.server.app import create_app

    app = create_app(load_config(None, []), pool_factory=lambda _: FakePool())
    with pytest.raises(ValueError, match="env_server.tokenizer"):
        with TestClient(app):
            pass

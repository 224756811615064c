"""The turn loop, stop logic, recursive llm() and the recursion tree, against an exec sandbox and a transport-level proxy."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import httpx
import pytest

from fathom.config.env_server import EnvServerConfig
from fathom.env_server.server import prompts
from fathom.env_server.server.harness import Harness, Limits, Tally, Unscorable
from fathom.capture_proxy.client import ProxySession
from tests.unit.env_server.fakes import FakePool, FakeProxy

CONTEXT = "alpha " * 50 + "The secret code is 7781. " + "omega " * 50


def repl(code: str) -> str:
    return f"```repl\n{code}\n```"


def run(model, *, limits: dict | None = None, cfg: dict | None = None, proxy: FakeProxy | None = None,
        context: str = CONTEXT, on_event=None, turns: list | None = None):
    fp = proxy or FakeProxy(model)
    lim = Limits(**({"max_turns": 4, "max_depth": 2, "max_subcalls": 16, "max_tokens": 10_000, "wall_clock_s": 30}
                    | (limits or {})))
    pool = FakePool()
    ex = concurrent.futures.ThreadPoolExecutor(8)

    async def go():
        async with fp.client() as http:
            tally = Tally(limits=lim, deadline=time.monotonic() + lim.wall_clock_s)
            h = Harness(cfg=EnvServerConfig(**(cfg or {})), pool=pool, executor=ex, output_cap=2000,
                        proxy=ProxySession(http, "http://proxy", "sess-1", 30), tally=tally, on_event=on_event)
            root = [] if turns is None else turns
            out = await h.run_loop("What is the secret code?", context, depth=0, parent=None,
                                   max_turns=lim.max_turns, turns=root)
            return out, root, tally

    try:
        out, turns, tally = asyncio.run(go())
    finally:
        ex.shutdown()
    return out, turns, tally, fp, pool


def test_final_in_code_stops_the_episode():
    out, turns, tally, fp, pool = run(lambda m: repl("import re\nFINAL(re.search(r'code is (\\d+)', context).group(1))"))
    assert (out.answer, out.via_final, out.stop_reason) == ("7781", True, "final")
    assert len(turns) == 1 and turns[0].final_answer == "7781" and turns[0].call_id == "call-1"
    assert tally.final_calls == 1
    assert all(ep.closed for ep in pool.episodes)
    h = fp.calls[0]["headers"]
    assert h["x-fathom-role"] == "root" and h["x-fathom-depth"] == "0" and "x-fathom-parent" not in h
    assert h["authorization"] == "Bearer sess-1" and h["x-api-key"] == "sess-1"
    assert fp.calls[0]["body"]["model"] == "policy"


def test_the_context_never_reaches_the_model():
    secret = "ZZ-unique-marker-" + "q" * 5000
    out, turns, *_ , fp, _ = run(lambda m: repl("print(len(context))"), context=secret + CONTEXT)
    sent = str([c["body"]["messages"] for c in fp.calls])
    assert secret[:300] in sent  # the preview
    assert secret[:1000] not in sent
    assert str(len(secret + CONTEXT)) in turns[0].outputs[0]


def test_reply_without_code_gets_the_corrective_message_and_counts_as_a_turn():
    replies = iter(["The answer is probably 7781.", repl("FINAL('7781')")])
    out, turns, *_ , fp, _ = run(lambda m: next(replies))
    assert out.stop_reason == "final" and len(turns) == 2
    assert turns[0].no_code and not turns[1].no_code
    second = fp.calls[1]["body"]["messages"]
    assert second[-2] == {"role": "assistant", "content": "The answer is probably 7781."}
    assert second[-1] == {"role": "user", "content": prompts.NO_CODE_MESSAGE}


def test_max_turns_stops_without_an_answer():
    out, turns, *_ , fp, _ = run(lambda m: repl("print(context[:10])"), limits={"max_turns": 3})
    assert (out.answer, out.via_final, out.stop_reason) == (None, False, "max_turns")
    assert len(turns) == 3 and len(fp.calls) == 3
    assert "Turns left: 1." in fp.calls[2]["body"]["messages"][-1]["content"]


def test_max_tokens_stops_the_episode():
    out, turns, tally, *_ = run(lambda m: repl("print(1)"), limits={"max_tokens": 50},
                                proxy=FakeProxy(lambda m: repl("print(1)"), usage=20))
    assert out.stop_reason == "max_tokens" and len(turns) == 2 and tally.tokens == 80


def test_crashing_code_is_shown_to_the_model_and_the_episode_goes_on():
    replies = iter([repl("def f(n):\n    return f(n + 1)\nf(0)"), repl("FINAL(1 / 0)"), repl("FINAL('ok')")])
    out, turns, *_ , fp, _ = run(lambda m: next(replies))
    assert out.stop_reason == "final" and len(turns) == 3
    assert "RecursionError" in fp.calls[1]["body"]["messages"][-1]["content"]
    assert "ZeroDivisionError" in turns[1].outputs[0]


def test_final_written_in_text_and_final_var():
    out, *_ = run(lambda m: 'I found it.\nFINAL("7781")')
    assert (out.answer, out.via_final) == ("7781", True)
    replies = iter([repl("ans = context.split('code is ')[1][:4]"), "FINAL_VAR(ans)"])
    out, turns, *_ = run(lambda m: next(replies))
    assert (out.answer, out.stop_reason, len(turns)) == ("7781", "final", 2)


def test_code_after_final_does_not_run():
    out, turns, *_ = run(lambda m: repl("FINAL('a')") + "\n" + repl("print('never')"))
    assert out.answer == "a" and turns[0].outputs == [""] and len(turns[0].code_blocks) == 2


def test_llm_subcalls_carry_role_depth_parent_and_build_the_tree():
    def model(messages):
        if messages[0]["role"] != "system":
            return "sub:" + messages[-1]["content"][:5]
        if len(messages) == 2:
            return repl("r = llm_batch(['aaaaa1', 'bbbbb2', 'ccccc3'])\none = llm('ddddd4')\nprint(r, one)")
        return repl("FINAL('done')")

    fp = FakeProxy(model, delay_s=0.05)
    out, turns, tally, fp, _ = run(model, proxy=fp, cfg={"llm_batch_concurrency": 2})
    assert out.stop_reason == "final" and tally.subcalls == 4
    subs = [c for c in fp.calls if c["headers"]["x-fathom-role"] == "subcall"]
    assert len(subs) == 4
    root_id = turns[0].call_id
    assert {c["headers"]["x-fathom-parent"] for c in subs} == {root_id}
    assert {c["headers"]["x-fathom-depth"] for c in subs} == {"1"}
    assert fp.max_in_flight == 2  # llm_batch bounded by llm_batch_concurrency
    tree = turns[0].subcalls
    assert [n.response for n in tree] == ["sub:aaaaa", "sub:bbbbb", "sub:ccccc", "sub:ddddd"]
    assert all(n.depth == 1 and n.parent_call_id == root_id and n.call_id for n in tree)
    assert "['sub:aaaaa', 'sub:bbbbb', 'sub:ccccc'] sub:ddddd" in turns[0].outputs[0]


def test_long_subcall_prompt_runs_as_a_nested_rlm_episode():
    long_text = "x" * 120 + " needle=42 " + "y" * 200

    def model(messages):
        q = messages[1]["content"] if len(messages) > 1 else ""
        if messages[0]["role"] != "system":
            return "plain"
        if q.startswith(f"Question: {prompts.NESTED_QUESTION}"):
            if len(messages) == 2:
                return repl("print(llm('tiny'))\nFINAL(context[context.index('needle'):][:9])")
        if len(messages) == 2:
            return repl(f"deep = llm({long_text!r})\nprint(deep)")
        return repl("FINAL(deep)")

    out, turns, tally, fp, pool = run(model, cfg={"sub_rlm_min_chars": 100})
    assert out.answer == "needle=42" and out.stop_reason == "final"
    node = turns[0].subcalls[0]
    assert node.depth == 1 and node.call_id is None and node.response == "needle=42"
    assert len(node.turns) == 1 and node.turns[0].depth == 1 and node.turns[0].parent_call_id == turns[0].call_id
    leaf = node.turns[0].subcalls[0]
    assert leaf.depth == 2 and leaf.response == "plain" and leaf.parent_call_id == node.turns[0].call_id
    hdr = {c["id"]: c["headers"] for c in fp.calls}
    assert hdr[node.turns[0].call_id]["x-fathom-role"] == "subcall"
    assert hdr[node.turns[0].call_id]["x-fathom-depth"] == "1"
    assert hdr[leaf.call_id]["x-fathom-depth"] == "2"
    assert len(pool.episodes) == 2 and all(ep.closed for ep in pool.episodes)


def test_events_report_the_tree_as_it_grows():
    """The live view's hook: each event arrives with its node already updated, in the order things happen."""
    long_text = "x" * 150

    def model(messages):
        if messages[0]["role"] != "system":
            return "plain"
        if messages[1]["content"].startswith(f"Question: {prompts.NESTED_QUESTION}"):
            return repl("FINAL(context[:3])")
        if len(messages) == 2:
            return repl(f"print(llm('tiny'), llm({long_text!r}))")
        return repl("FINAL('done')")

    seen = []

    def hook(kind, node):
        if kind in ("turn", "output", "final"):
            seen.append((kind, node.depth, node.index, len(node.code_blocks), len(node.outputs), node.final_answer))
        else:
            seen.append((kind, node.depth, node.response))

    out, turns, *_ = run(model, cfg={"sub_rlm_min_chars": 100}, on_event=hook)
    assert out.answer == "done"
    assert seen == [
        ("turn", 0, 0, 1, 0, None),           # the reply arrived; its code has not run yet
        ("subcall", 1, None), ("subcall_done", 1, "plain"),
        ("subcall", 1, None),                 # the long prompt: a nested episode
        ("turn", 1, 0, 1, 0, None), ("output", 1, 0, 1, 1, None), ("final", 1, 0, 1, 1, "xxx"),
        ("subcall_done", 1, "xxx"),
        ("output", 0, 0, 1, 1, None),
        ("turn", 0, 1, 1, 0, None), ("output", 0, 1, 1, 1, None), ("final", 0, 1, 1, 1, "done"),
    ]


def test_depth_and_subcall_budgets_refuse_inside_the_repl():
    replies = iter([repl("llm('a')"), repl("FINAL('x')")])
    out, turns, *_ = run(lambda m: next(replies), limits={"max_depth": 0})
    assert "exceeds max_depth 0" in turns[0].outputs[0] and out.stop_reason == "final"
    replies = iter([repl("llm_batch(['a', 'b', 'c'])"), repl("FINAL('x')")])
    out, turns, tally, *_ = run(lambda m: next(replies) if m[0]["role"] == "system" else "s",
                                limits={"max_subcalls": 2})
    assert "may send 2 prompts" in turns[0].outputs[0] and tally.subcalls == 0


def test_proxy_refusal_stops_with_budget_and_unreachable_is_unscorable():
    fp = FakeProxy(lambda m: repl("print(1)"))
    fp.fail = lambda call: httpx.Response(429, text="session budget spent")
    out, turns, *_ = run(None, proxy=fp)
    assert out.stop_reason == "budget" and turns == []
    fp = FakeProxy(lambda m: repl("print(1)"))
    fp.fail = lambda call: httpx.ConnectError("refused")
    with pytest.raises(Unscorable, match="unreachable"):
        run(None, proxy=fp)


def test_unreachable_proxy_during_llm_makes_the_episode_unscorable():
    fp = FakeProxy(lambda m: repl("try:\n    llm('a')\nexcept Exception as e:\n    print('caught', e)"))
    fp.fail = lambda call: httpx.ConnectError("down") if call["headers"]["x-fathom-role"] == "subcall" else None
    with pytest.raises(Unscorable, match="unreachable"):
        run(None, proxy=fp)


def test_only_root_final_counts_for_the_reward():
    def model(messages):
        if messages[1]["content"].startswith(f"Question: {prompts.NESTED_QUESTION}"):
            return repl("FINAL('inner')")
        if len(messages) == 2:
            return repl("x = llm('p' * 200)")
        return repl("FINAL(x)")

    out, turns, tally, *_ = run(model, cfg={"sub_rlm_min_chars": 100})
    assert out.answer == "inner" and tally.final_calls == 1


def test_task_cache_reuses_and_evicts_by_size():
    from types import SimpleNamespace

    from fathom.env_server.server.task_cache import TaskCache

    made = []

    def make(n):
        def f():
            made.append(n)
            return SimpleNamespace(context="x" * n)
        return f

    c = TaskCache(max_chars=100)
    a = c.get(("a",), make(60))
    assert c.get(("a",), make(60)) is a and made == [60]
    c.get(("b",), make(50))  # 110 > 100: "a" goes
    c.get(("a",), make(60))
    assert made == [60, 50, 60] and (c.hits, c.misses) == (1, 3)
    c.get(("big",), make(500))  # larger than the whole cache: served, not kept
    c.get(("big",), make(500))
    assert made[-2:] == [500, 500]


def test_nested_runs_use_their_own_thread_pool_so_waiting_parents_cannot_starve_them():
    # One thread per depth: the root run holds depth 0's only thread while its llm() waits on a
    # nested episode, which must still get a thread to run its code.
    pools = {d: concurrent.futures.ThreadPoolExecutor(1) for d in range(3)}

    def model(messages):
        if messages[1]["content"].startswith(f"Question: {prompts.NESTED_QUESTION}"):
            return repl("FINAL(context[:5])")
        if len(messages) == 2:
            return repl("x = llm('q' * 300)")
        return repl("FINAL(x)")

    fp = FakeProxy(model)
    lim = Limits(max_turns=3, max_depth=2, max_subcalls=8, max_tokens=10_000, wall_clock_s=20)

    async def go():
        async with fp.client() as http:
            h = Harness(cfg=EnvServerConfig(sub_rlm_min_chars=100), pool=FakePool(), executor=lambda d: pools[d],
                        output_cap=2000, proxy=ProxySession(http, "http://proxy", "s", 30),
                        tally=Tally(limits=lim, deadline=time.monotonic() + 20))
            return await asyncio.wait_for(h.run_loop("Q?", "ctx", depth=0, parent=None, max_turns=3, turns=[]), 15)

    try:
        out = asyncio.run(go())
    finally:
        for p in pools.values():
            p.shutdown()
    assert out.answer == "qqqqq"

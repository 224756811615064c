"""The RLM turn loop and recursive `llm()`.

One `Harness` serves one episode tree: the root loop (depth 0) and every nested loop a
deep `llm()` sub-call starts. They share a `Tally` (sub-call count, tokens, deadline) so
the per-episode budget caps the whole tree. Sandbox runs block, so they go to a thread
pool; `llm()` arrives in that thread and is bridged back onto the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from fathom.capture_proxy.client import ChatReply, ProxyCallError, ProxySession
from fathom.config.env_server import EnvServerConfig
from fathom.env_server.server import prompts
from fathom.env_server.server.tokens import TemplateError, TokenPath
from fathom.protocol import Sampling, StopReason, SubCall, TurnStat


class Unscorable(Exception):
    """Infrastructure failed (proxy unreachable, engine or sandbox failure): the episode gets no reward."""


EventKind = Literal["turn", "output", "final", "subcall", "subcall_done"]
EventHook = Callable[[EventKind, Any], None]
"""Called on the event loop as the episode tree grows, with the node that changed (already updated):
`turn` (TurnStat: a reply arrived, its code blocks parsed, nothing run yet), `output` (TurnStat: one
more code block ran), `final` (TurnStat: its `final_answer` ends this loop), `subcall` (SubCall: llm()
sent a prompt) and `subcall_done` (SubCall: answered, or failed with `error`). A live view (`fathom ui`)
renders from these; it must not block, because the episode waits on it."""


@dataclass(frozen=True)
class Limits:
    max_turns: int
    max_depth: int
    max_subcalls: int
    max_tokens: int
    wall_clock_s: float


@dataclass
class Tally:
    """Shared by every loop of one episode tree."""

    limits: Limits
    deadline: float
    subcalls: int = 0
    tokens: int = 0
    final_calls: int = 0
    infra_error: str | None = None

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()


@dataclass
class LoopOutcome:
    answer: str | None
    via_final: bool
    stop_reason: StopReason


@dataclass
class TurnEnd:
    """How one turn's code ended: `answer` when FINAL ended the loop, else the next user message (`feedback`)."""

    answer: str | None
    feedback: str
    last: Any | None = None
    """The last sandbox run's result (None when no code ran)."""


@dataclass
class Current:
    """The turn whose code is running in a sandbox, so `llm()` knows its parent call and where to record."""

    turn: TurnStat = field(default_factory=lambda: TurnStat(index=-1))
    pending: set = field(default_factory=set)
    """This loop's in-flight `llm()` futures, cancelled when the loop ends (a nested loop must not cancel its parent's)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """`pending` is filled from sandbox threads and drained from the event loop."""

    def cancel_pending(self) -> None:
        with self.lock:
            futs = list(self.pending)
        for fut in futs:
            fut.cancel()


def timed_run(ep: Any, code: str) -> tuple[Any, float]:
    """Run in the worker thread, timing only the sandbox call (the thread hand-off counts as server time)."""
    t0 = time.perf_counter()
    res = ep.run(code)
    return res, (time.perf_counter() - t0) * 1000


class Harness:
    def __init__(
        self,
        *,
        cfg: EnvServerConfig,
        pool: Any,
        executor: concurrent.futures.Executor | Callable[[int], concurrent.futures.Executor],
        output_cap: int,
        proxy: ProxySession | None,
        tally: Tally,
        sampling: Sampling | None = None,
        tokens: TokenPath | None = None,
        on_event: EventHook | None = None,
    ):
        self.cfg = cfg
        self.pool = pool
        # Sandbox runs of depth d wait on llm() answered by runs of depth d + 1. One pool per depth means
        # waiting runs can never hold every thread the runs they wait on need (no starvation deadlock).
        self.executor_for: Callable[[int], concurrent.futures.Executor] = (
            executor if callable(executor) and not isinstance(executor, concurrent.futures.Executor)
            else (lambda depth: executor)  # type: ignore[return-value]
        )
        self.executor = self.executor_for(0)
        self.output_cap = output_cap
        self.proxy = proxy
        self.tally = tally
        self.sampling = sampling
        self.tokens = tokens
        """The token path (prompts built in token space); None sends chat text (`prompt_format = chat`)."""
        self.on_event = on_event

    def emit(self, kind: EventKind, node: Any) -> None:
        if self.on_event is not None:
            self.on_event(kind, node)

    # --- llm() bridge ------------------------------------------------------------------

    def llm_handler(self, loop: asyncio.AbstractEventLoop, depth: int, cur: Current) -> Callable[[list[str]], list[str]]:
        """The sandbox's `llm_handler`: called in the sandbox's host thread, answered on the event loop."""

        def handler(prompts_: list[str]) -> list[str]:
            fut = asyncio.run_coroutine_threadsafe(self.subcalls(list(prompts_), depth, cur), loop)
            with cur.lock:
                cur.pending.add(fut)
            try:
                return fut.result()
            except concurrent.futures.CancelledError:
                raise RuntimeError("llm() was cancelled: the episode stopped") from None
            finally:
                with cur.lock:
                    cur.pending.discard(fut)

        return handler

    async def subcalls(self, prompts_: list[str], depth: int, cur: Current) -> list[str]:
        lim, t = self.tally.limits, self.tally
        d = depth + 1
        if not all(isinstance(p, str) for p in prompts_):
            raise TypeError("llm() takes a str prompt (llm_batch() a list of str)")
        if d > lim.max_depth:
            raise RuntimeError(f"llm() is not available here: depth {d} exceeds max_depth {lim.max_depth}")
        if self.proxy is None:
            raise RuntimeError(
                "llm() has no model: this episode has no capture-proxy session (reset with proxy_url and session_id)"
            )
        if t.subcalls + len(prompts_) > lim.max_subcalls:
            raise RuntimeError(
                f"llm() refused: the episode may send {lim.max_subcalls} prompts and has sent {t.subcalls}"
            )
        if t.tokens >= lim.max_tokens:
            raise RuntimeError(f"llm() refused: the episode's {lim.max_tokens}-token budget is spent")
        t.subcalls += len(prompts_)
        sem = asyncio.Semaphore(self.cfg.llm_batch_concurrency)
        nodes = [
            SubCall(depth=d, parent_call_id=cur.turn.call_id, prompt_chars=len(p), prompt_preview=p[:200])
            for p in prompts_
        ]
        cur.turn.subcalls.extend(nodes)
        for n in nodes:
            self.emit("subcall", n)

        async def one(p: str, node: SubCall) -> str:
            async with sem:
                try:
                    return await self._subcall(p, node, cur)
                finally:
                    self.emit("subcall_done", node)

        results = await asyncio.gather(*(one(p, n) for p, n in zip(prompts_, nodes)), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return list(results)  # type: ignore[arg-type]

    async def _subcall(self, prompt: str, node: SubCall, cur: Current) -> str:
        assert self.proxy is not None
        t0 = time.perf_counter()
        if node.depth < self.tally.limits.max_depth and len(prompt) > self.cfg.sub_rlm_min_chars:
            # Deep recursion: the sub-call is itself an RLM episode with the prompt as its context.
            try:
                out = await self.run_loop(
                    prompts.NESTED_QUESTION, prompt, depth=node.depth, parent=cur.turn.call_id,
                    max_turns=self.cfg.sub_rlm_max_turns, turns=node.turns,
                )
            except Unscorable as e:
                node.error = str(e)
                self.tally.infra_error = str(e)
                raise RuntimeError(f"llm() failed: {e}") from None
            node.latency_ms = (time.perf_counter() - t0) * 1000
            node.prompt_tokens = sum(x.prompt_tokens for x in node.turns)
            node.completion_tokens = sum(x.completion_tokens for x in node.turns)
            if out.answer is None:
                node.error = f"nested episode stopped without an answer ({out.stop_reason})"
                return f"(no answer: the sub-call stopped at {out.stop_reason})"
            node.response = out.answer
            return out.answer
        try:
            reply = await self._call(
                [{"role": "user", "content": prompt}], None, role="subcall", depth=node.depth,
                parent=cur.turn.call_id, conversation=None,
            )
            if reply is None:
                raise ProxyCallError("too_long", "the llm() prompt does not fit the model's context with its output cap; "
                                             "send a smaller piece")
        except ProxyCallError as e:
            node.error = str(e)
            if e.kind == "unreachable":
                self.tally.infra_error = str(e)
            raise RuntimeError(f"llm() failed: {e}") from None
        self.tally.tokens += reply.prompt_tokens + reply.completion_tokens
        node.call_id, node.response = reply.call_id, reply.text
        node.prompt_tokens, node.completion_tokens = reply.prompt_tokens, reply.completion_tokens
        node.latency_ms = reply.latency_ms
        return reply.text

    # --- model calls -------------------------------------------------------------------

    async def _start_tokens(self, messages: list[dict[str, str]]) -> list[int] | None:
        """Turn 0's prompt ids on the token path (None on the chat path); checks the template first."""
        if self.tokens is None:
            return None
        assert self.proxy is not None
        try:
            await self.tokens.ensure(self.proxy)
        except (ProxyCallError, TemplateError) as e:
            raise Unscorable(f"token-space prompts are unavailable: {e}") from None
        return self.tokens.chat.initial(messages)

    async def _call(
        self, messages: list[dict[str, str]], prompt_ids: list[int] | None, *, role: str, depth: int,
        parent: str | None, conversation: str | None,
    ) -> ChatReply | None:
        """One model call: token ids on the token path, chat text otherwise. None: the prompt plus the output cap
        would pass the engine's context, so it was not sent (vLLM would reject it)."""
        assert self.proxy is not None
        timeout = max(self.tally.remaining_s(), 0.001)
        if self.tokens is None:
            return await self.proxy.chat(messages, role=role, depth=depth, parent=parent, sampling=self.sampling,
                                         timeout_s=timeout, conversation=conversation)
        if prompt_ids is None:
            prompt_ids = await self._start_tokens(messages)
            assert prompt_ids is not None
        cap = self.sampling.max_tokens if self.sampling is not None else await self.proxy.output_cap()
        if len(prompt_ids) + cap > self.tokens.max_model_len[self.proxy.base_url]:
            return None
        return await self.proxy.complete(prompt_ids, role=role, depth=depth, parent=parent, sampling=self.sampling,
                                         timeout_s=timeout, conversation=conversation)

    # --- sandbox helpers -----------------------------------------------------------------

    async def new_sandbox(self, context: str, question: str, depth: int, cur: Current) -> Any:
        """A fresh REPL holding `context` and `question` (the system prompt lists both)."""
        loop = asyncio.get_running_loop()
        handler = self.llm_handler(loop, depth, cur)
        try:
            return await loop.run_in_executor(self.executor_for(depth), self.pool.new_episode, context, handler,
                                              {"question": question})
        except Exception as e:
            raise Unscorable(f"the sandbox could not start an episode: {e}") from e

    async def run_code(self, ep: Any, code: str, turn: TurnStat) -> Any:
        loop = asyncio.get_running_loop()
        try:
            res, ms = await loop.run_in_executor(self.executor_for(turn.depth), timed_run, ep, code)
        except Exception as e:
            raise Unscorable(f"the sandbox failed to run code: {e!r}") from e
        turn.sandbox_ms += ms
        turn.outputs.append(res.output(self.output_cap))
        self.emit("output", turn)
        if self.tally.infra_error:
            raise Unscorable(self.tally.infra_error)
        return res

    # --- the turn loop -------------------------------------------------------------------

    async def run_loop(
        self, question: str, context: str, *, depth: int, parent: str | None, max_turns: int, turns: list[TurnStat]
    ) -> LoopOutcome:
        """Chat, run the reply's code, feed back the output; until FINAL or a limit. Appends to `turns`."""
        assert self.proxy is not None
        cur = Current()
        ep = await self.new_sandbox(context, question, depth, cur)
        role = "root" if depth == 0 else "subcall"
        messages = prompts.initial_messages(question, context, self.cfg.preview_chars)
        # The proxy checks that every turn of this conversation extends the one before.
        conversation = f"{role}-d{depth}-{uuid.uuid4().hex[:12]}"
        try:
            prompt_ids = await self._start_tokens(messages)
            for i in range(max_turns):
                if self.tally.remaining_s() <= 0:
                    return LoopOutcome(None, False, "timeout")
                if self.tally.tokens >= self.tally.limits.max_tokens:
                    return LoopOutcome(None, False, "max_tokens")
                t0 = time.perf_counter()
                try:
                    reply = await self._call(messages, prompt_ids, role=role, depth=depth, parent=parent,
                                             conversation=conversation)
                except ProxyCallError as e:
                    if e.kind == "refused":
                        return LoopOutcome(None, False, "budget")
                    if e.kind == "too_long":
                        return LoopOutcome(None, False, "max_tokens")
                    raise Unscorable(str(e)) from None
                if reply is None:
                    return LoopOutcome(None, False, "max_tokens")
                self.tally.tokens += reply.prompt_tokens + reply.completion_tokens
                turn = TurnStat(
                    index=i, depth=depth, call_id=reply.call_id, parent_call_id=parent, completion=reply.text,
                    finish_reason=reply.finish_reason, prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens, model_ms=reply.latency_ms,
                )
                turn.code_blocks = prompts.code_blocks(turn.completion)
                turns.append(turn)
                cur.turn = turn
                self.emit("turn", turn)
                end = await self.take_turn(ep, turn, max_turns - i - 1)
                turn.server_ms = max((time.perf_counter() - t0) * 1000 - turn.model_ms - turn.sandbox_ms, 0.0)
                if end.answer is not None:
                    return LoopOutcome(end.answer, True, "final")
                if prompt_ids is not None:
                    assert reply.completion_ids is not None
                    prompt_ids = self.tokens.chat.next_prompt(prompt_ids, reply.completion_ids, end.feedback)  # type: ignore[union-attr]
                else:
                    messages = messages + [
                        {"role": "assistant", "content": reply.text},
                        {"role": "user", "content": end.feedback},
                    ]
            return LoopOutcome(None, False, "max_turns")
        finally:
            cur.cancel_pending()
            # close() is an IPC round trip to the zygote: off the event loop, and not awaited so a
            # cancelled (timed-out) loop still releases its worker.
            asyncio.get_running_loop().run_in_executor(self.executor_for(depth), ep.close)

    async def take_turn(self, ep: Any, turn: TurnStat, turns_left: int) -> TurnEnd:
        """One turn in the episode's sandbox `ep`: run `turn.code_blocks` in order (none: the reply's text FINAL)
        until one answers with FINAL, which ends the loop. The root loop and step mode both take turns here."""
        end = await self._run_reply(ep, turn, turns_left)
        if end.answer is not None:
            turn.final_answer = end.answer
            self.emit("final", turn)
            if turn.depth == 0:  # a nested episode's FINAL answers its llm(), not the task
                self.tally.final_calls += 1
        return end

    async def _run_reply(self, ep: Any, turn: TurnStat, turns_left: int) -> TurnEnd:
        if not turn.code_blocks:
            tf = prompts.text_final(turn.completion)
            if tf is None:
                turn.no_code = True
                return TurnEnd(None, prompts.NO_CODE_MESSAGE)
            if tf.var is None:
                return TurnEnd(tf.answer, "")
            res = await self.run_code(ep, f"FINAL_VAR({tf.var!r})", turn)
            if res.final_answer is not None:
                return TurnEnd(res.final_answer, "", res)
            return TurnEnd(None, prompts.repl_feedback(turn.outputs, turns_left), res)
        res = None
        for code in turn.code_blocks:
            res = await self.run_code(ep, code, turn)
            if res.final_answer is not None:
                return TurnEnd(res.final_answer, "", res)
        return TurnEnd(None, prompts.repl_feedback(turn.outputs, turns_left), res)

"""The episode tree as HTML: root turns, each with its code, REPL output and `llm()` sub-calls nested by depth.

A pure function of the harness's own records (`TurnStat`/`SubCall`), which the harness fills in place as the
episode runs; so the same renderer draws a tree that is still growing (a turn whose code is running, an
`llm()` waiting on the model) and a finished one. Every node carries `data-*` attributes that the browser
test and the latency benchmark select on.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from fathom.protocol import RewardComponents, SubCall, TurnStat

PREVIEW_CHARS = 4000
"""Longer code, output or responses are cut in the page (the harness already caps REPL output)."""

CSS = """
.fathom-tree { font-size: 14px; }
.fathom-tree details { border-left: 3px solid #cbd5e1; margin: 4px 0 4px 6px; padding: 2px 0 2px 10px; }
.fathom-tree details.subcall { border-left-color: #f59e0b; }
.fathom-tree summary { cursor: pointer; }
.fathom-tree pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0; padding: 6px 8px; border-radius: 4px;
                   max-height: 24em; overflow: auto; font-size: 12px; }
.fathom-tree pre.code { background: #0f172a; color: #e2e8f0; }
.fathom-tree pre.output { background: #f1f5f9; color: #0f172a; }
.fathom-tree .final { color: #15803d; font-weight: 600; }
.fathom-tree .error { color: #b91c1c; }
.fathom-tree .pending { color: #b45309; font-style: italic; }
.fathom-tree .meta { color: #64748b; font-weight: normal; }
.fathom-result table { border-collapse: collapse; }
.fathom-result td, .fathom-result th { padding: 2px 10px; border-bottom: 1px solid #e2e8f0; text-align: left; }
"""


def _cut(text: str, n: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= n else f"{text[:n]}\n… ({len(text) - n:,} more characters)"


def _pre(cls: str, text: str) -> str:
    return f'<pre class="{cls}">{escape(_cut(text))}</pre>'


def _turn(t: TurnStat) -> str:
    running = t.final_answer is None and len(t.outputs) < len(t.code_blocks)
    state = ' <span class="pending">running code…</span>' if running else ""
    head = (f'<summary><b>depth {t.depth} · turn {t.index + 1}</b> <span class="meta">{t.prompt_tokens:,} + '
            f'{t.completion_tokens:,} tokens · model {t.model_ms / 1000:.2f} s</span>{state}</summary>')
    body = []
    if not t.code_blocks:
        body.append(_pre("output", t.completion) if t.completion.strip() else "")
        if t.no_code:
            body.append('<div class="error">no code block: the model was told to write one</div>')
    for k, code in enumerate(t.code_blocks):
        body.append(_pre("code", code))
        if k < len(t.outputs):
            body.append(_pre("output", t.outputs[k] or "(no output)"))
    body += [_subcall(s) for s in t.subcalls]
    if t.final_answer is not None:
        body.append(f'<div class="final">FINAL: {escape(_cut(t.final_answer))}</div>')
    return (f'<details open class="turn" data-kind="turn" data-depth="{t.depth}" data-index="{t.index}">'
            f'{head}{"".join(body)}</details>')


def _subcall(s: SubCall) -> str:
    if s.error is not None:
        status, cls = f'<span class="error">failed: {escape(s.error[:300])}</span>', "error"
    elif s.response is None:
        status, cls = '<span class="pending">waiting for the model…</span>', "pending"
    else:
        status, cls = f'<span class="meta">{s.prompt_tokens:,} + {s.completion_tokens:,} tokens</span>', "done"
    kind = "nested episode" if s.turns else "llm()"
    head = (f'<summary><b>{kind} · depth {s.depth}</b> <span class="meta">{s.prompt_chars:,}-character prompt'
            f'</span> {status}</summary>')
    body = [_pre("output", s.prompt_preview + ("…" if s.prompt_chars > len(s.prompt_preview) else ""))]
    body += [_turn(t) for t in s.turns]
    if s.response is not None:
        body.append(f'<div class="final">→ {escape(_cut(s.response))}</div>')
    return (f'<details open class="subcall" data-kind="subcall" data-depth="{s.depth}" data-state="{cls}">'
            f'{head}{"".join(body)}</details>')


def render_tree(turns: list[TurnStat], *, running: bool = False) -> str:
    """The tree of one episode so far; `running` adds a line saying the root waits on the model or its code."""
    parts = [_turn(t) for t in turns]
    if running and (not turns or turns[-1].final_answer is None and len(turns[-1].outputs) >= len(turns[-1].code_blocks)):
        parts.append('<div class="pending" data-kind="waiting">waiting for the model…</div>')
    if not parts:
        parts.append('<div class="meta">Ask a question to start an episode.</div>')
    return f'<div class="fathom-tree" data-turns="{len(turns)}">{"".join(parts)}</div>'


def walk(turns: list[TurnStat]) -> tuple[int, int, int]:
    """(model calls, prompt tokens, completion tokens) over the whole tree, nested episodes included."""
    calls = ptok = ctok = 0
    for t in turns:
        calls, ptok, ctok = calls + 1, ptok + t.prompt_tokens, ctok + t.completion_tokens
        for s in t.subcalls:
            if s.turns:
                c, p, k = walk(s.turns)
                calls, ptok, ctok = calls + c, ptok + p, ctok + k
            elif s.call_id is not None:
                calls, ptok, ctok = calls + 1, ptok + s.prompt_tokens, ctok + s.completion_tokens
    return calls, ptok, ctok


@dataclass
class Outcome:
    """What the page shows when the episode ends."""

    answer: str | None
    stop_reason: str
    wall_s: float
    llm_calls: int
    total_tokens: int
    """The capture session's count (every call of the tree), or the harness's tally when unreadable."""
    reward: RewardComponents | None = None
    reward_note: str = ""
    """Why there is no reward (no gold answer given, or the verifier failed)."""
    error: str | None = None
    """The episode failed (proxy, engine or sandbox): what happened."""


def render_result(out: Outcome, turns: list[TurnStat]) -> str:
    calls, ptok, ctok = walk(turns)
    rows = []
    if out.error is not None:
        rows.append(f'<p class="error" data-kind="error">The episode failed: {escape(out.error)}</p>')
    answer = escape(out.answer) if out.answer is not None else "<i>none: the model did not call FINAL</i>"
    rows.append(f'<p data-kind="answer"><b>Answer:</b> {answer}</p>')
    rows.append(f"<p><b>Stop:</b> {escape(out.stop_reason)} · {out.wall_s:.1f} s · {calls} model calls "
                f"({out.llm_calls} llm() prompts) · {out.total_tokens:,} tokens ({ptok:,} prompt + {ctok:,} "
                f"completion)</p>")
    if out.reward is not None:
        r = out.reward
        cells = "".join(f"<tr><td>{k}</td><td>{v:+.3f}</td></tr>" for k, v in
                        (("correctness", r.correctness), ("format", r.format), ("token budget", r.token_budget),
                         ("recursion", r.recursion), ("tool bonus", r.tool_bonus)))
        verdict = "correct" if r.correct else "wrong"
        rows.append(f'<table data-kind="reward"><tr><th>reward</th><th>{r.total:+.3f} ({verdict})</th></tr>'
                    f"{cells}</table>")
    elif out.reward_note:
        rows.append(f'<p class="meta">No reward: {escape(out.reward_note)}</p>')
    return f'<div class="fathom-result">{"".join(rows)}</div>'

"""`fathom ask`: one RLM episode over your own document, against any served model.

    fathom ask --document big.txt --question "Who signed the 1887 lease?" --base-url http://127.0.0.1:8000 --model fathom

The document goes into a local sandbox as `context` (any size: the model only sees what its code
prints). Model calls go through a capture proxy started for this one episode (an eval session pinned
to `--model`), so the harness runs exactly as in training and evaluation: on the token path when the
server tokenizes (vLLM's `/tokenize`) and the model's tokenizer is at hand, on the chat path otherwise.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

from fathom.entrypoints.common import CONFIG_OPTION, config_from, die, eprint


def _served(base_url: str, model: str | None) -> tuple[str, str]:
    from fathom.policy_server.served import ServedError, served

    try:
        return served(base_url, model)
    except ServedError as e:
        die(str(e))


def _tree(turns, node) -> None:
    for t in turns:
        code = " | ".join(c.strip().splitlines()[0][:60] for c in t.code_blocks if c.strip()) or "(no code)"
        branch = node.add(f"[bold]depth {t.depth} turn {t.index}[/] {t.prompt_tokens}+{t.completion_tokens} tokens: {code}")
        for out in t.outputs:
            branch.add(f"[dim]output:[/] {out.strip()[:120]!r}")
        for s in t.subcalls:
            sub = branch.add(f"[yellow]llm() depth {s.depth}[/] {s.prompt_chars} chars -> "
                             f"{(s.response or s.error or '')[:80]!r}")
            _tree(s.turns, sub)
        if t.final_answer is not None:
            branch.add(f"[green]FINAL[/] {t.final_answer[:200]!r}")


async def _episode(cfg, proxy_url: str, model: str, question: str, document: str, max_turns: int):
    from fathom.env_server.server.episode_core import resolve_limits, run_episode
    from fathom.env_server.server.runtime import Runtime
    from fathom.protocol import EpisodeLimits, Sampling, SessionCreate
    from fathom.ui.errors import error_text

    rt = Runtime(cfg)
    await rt.start()
    try:
        es = cfg.env_server
        limits = resolve_limits(es, EpisodeLimits(max_depth=es.demo_max_depth, max_turns=max_turns))
        sampling = Sampling(temperature=cfg.eval.temperature, max_tokens=cfg.trainer.max_completion_tokens)
        turns: list = []
        run = await run_episode(rt, question, document, limits=limits, turns=turns, proxy_url=proxy_url,
                                create=SessionCreate(trainable=False, sampling=sampling, model=model),
                                sampling=sampling, describe=error_text)
        return run, turns
    finally:
        await rt.stop()


def ask(
    ctx: typer.Context,
    document: Path = typer.Option(..., help="Plain-text file of any size; it becomes the REPL's `context`."),
    question: str = typer.Option(..., help="What to ask about the document."),
    base_url: str = typer.Option("http://127.0.0.1:8000", help="OpenAI-compatible server (vLLM) root, without /v1."),
    model: str = typer.Option(None, help="Served model name, e.g. `fathom` from --lora-modules (default: the last listed)."),
    max_turns: int = typer.Option(None, help="Root turns (default: env_server.max_turns)."),
    tokenizer: str = typer.Option(None, help="Directory of the served model's tokenizer (token path); default: the "
                                             "base model's name resolved locally, else the chat path."),
    config: str = CONFIG_OPTION,
) -> None:
    """Run one RLM episode over DOCUMENT and print the answer and the recursion tree."""
    cfg = config_from(ctx, config)
    if not document.is_file():
        die(f"--document {str(document)!r} is not a file; pass a plain-text file")
    text = document.read_bytes().decode("utf-8", errors="replace")
    name, base = _served(base_url, model)
    from rich.console import Console
    from rich.tree import Tree

    from fathom.stack.inproc import capture_in_process

    console = Console()
    try:
        with capture_in_process(cfg, base_url, base, tokenizer) as (cfg, proxy_url, path_note):
            eprint(f"asking {name} (on {base} at {base_url}, {path_note}) about {document} ({len(text):,} characters)")
            run, turns = asyncio.run(_episode(cfg, proxy_url, name, question, text,
                                              max_turns or cfg.env_server.max_turns))
    except Exception as e:  # noqa: BLE001 - proxy, engine or sandbox failure: say which and stop
        from fathom.ui.errors import error_text

        die(f"the episode failed: {error_text(e)}")
    if run.timed_out:
        die(f"the episode ran past env_server.wall_clock_s ({cfg.env_server.wall_clock_s:g} s)")
    if run.error is not None:
        die(f"the episode failed: {run.error}")
    tree = Tree(f"[bold]{question}[/]")
    _tree(turns, tree)
    console.print(tree)
    console.print(f"stop: {run.stop_reason}; {run.total_tokens} tokens; {run.llm_calls} llm() calls")
    if run.answer is None:
        console.print("[red]no answer[/] (the model did not call FINAL)")
        raise typer.Exit(1)
    print(run.answer)

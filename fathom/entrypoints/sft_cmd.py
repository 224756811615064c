"""`fathom sft`: record scripted-teacher episodes through the real harness and proxy, then LoRA SFT on them.

The teacher (the scripted `teach` policy on the model's own tokenizer, `fathom.env_server.scripted`)
and a capture proxy in front of it run in this process on free loopback ports; the episodes run on the env server named by the config (the
one `fathom launch` started), so they use the same sandbox, harness and token path as GRPO.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import typer

from fathom.entrypoints.common import (CONFIG_OPTION, OVERRIDE_SETTINGS, config_from, die, progress_line,
                                       serve_in_thread)


def check_phrasings(sft: Any) -> None:
    """ValueError naming a `sft.question_phrasings` entry that names no choosable phrasing."""
    from fathom.tasks.generate import FAMILIES, question_phrasings

    for fam, keep in sft.question_phrasings.items():
        n = len(question_phrasings(fam))
        if not n:
            worded = ", ".join(f for f in FAMILIES if question_phrasings(f))
            raise ValueError(f"sft.question_phrasings names {fam!r}, whose questions have no train phrasings to "
                             f"choose from (only {worded} have). Remove that entry.")
        bad = [i for i in keep if not 0 <= i < n]
        if not keep or bad:
            raise ValueError(f"sft.question_phrasings[{fam!r}] = {keep}: give one or more indices from 0 to {n - 1} "
                             f"(the {n} train phrasings of {fam}).")


def sft_task_ids(sft: Any) -> list[str]:
    """The SFT data's tasks: families and lengths round-robin, slot i on seed `sft.seed + i` in the train block.

    A slot whose family `sft.question_phrasings` narrows, and whose question is worded in a phrasing left out,
    moves on by whole strides of `n_tasks` seeds (`sft.seed + i + k * n_tasks`) until one is kept. Each slot keeps
    to its own seeds, so narrowing one family's phrasings leaves every other family's tasks as they were.

    ValueError names a bad `sft.question_phrasings` entry, or settings that would run past the train block."""
    from fathom.tasks.generate import generate, question_phrasing
    from fathom.tasks.record import SEED_BLOCK, make_id

    check_phrasings(sft)
    fams, lens, n = sft.families, sft.lengths, sft.n_tasks
    ids = []
    for i in range(n):
        fam, length = fams[i % len(fams)], lens[(i // len(fams)) % len(lens)]
        keep = sft.question_phrasings.get(fam)
        seed = sft.seed + i
        while seed < SEED_BLOCK and keep is not None and question_phrasing(generate(fam, seed, length)) not in keep:
            seed += n
        if seed >= SEED_BLOCK:
            raise ValueError(f"sft.seed = {sft.seed} with sft.n_tasks = {n}: SFT task {i} ({fam}) ran past the train "
                             f"seed block (seeds below {SEED_BLOCK}). Lower sft.seed or sft.n_tasks, or keep more "
                             f"of {fam}'s phrasings in sft.question_phrasings.")
        ids.append(make_id(fam, seed, length))
    return ids


def record_episode(factory: Any, task_id: str, max_length: int) -> tuple[list[dict], dict[str, Any]]:
    """One teacher episode: its training rows (empty unless it was solved with no cut turn), each tagged with the
    task's family (for `trainer.sft_anchor_families`), and a summary."""
    from fathom.tasks.record import parse_id
    from fathom.trainer.sft import rows_from_trace

    session = factory.create(task_id)
    try:
        session.wait_for_completion()
        trace = session.fetch_training_trace()
        verdict = session.verify([])
    finally:
        session.close()
    res = session.result
    cut = any(t.metadata.get("finish_reason") == "length" for t in trace.turns)
    correct = bool(res and res.reward_components and res.reward_components.correct)
    family = parse_id(task_id)[0]
    rows = [{**r, "family": family} for r in rows_from_trace(trace)] if correct and not cut else []
    too_long = [r for r in rows if len(r["input_ids"]) > max_length]
    summary = {"task_id": task_id, "reward": verdict.env_reward, "correct": correct, "cut": cut,
               "turns": len(res.turns) if res else 0, "stop_reason": res.stop_reason if res else None,
               "rows": 0 if too_long else len(rows), "tokens": sum(len(r["input_ids"]) for r in rows)}
    return ([] if too_long else rows), summary


def sft(
    ctx: typer.Context,
    config: str = CONFIG_OPTION,
    out: str = typer.Option("", help="Output directory; default <run_dir>/sft."),
    workers: int = typer.Option(8, help="Episodes recorded at once."),
) -> None:
    """Record teacher episodes on the running env server, then train the LoRA warm start (`<out>/adapter`)."""
    # No passive_omp() here, unlike `fathom train`: SFT trains after the recording, while vLLM sits idle, so
    # nothing needs the cores its OpenMP threads spin on. Passive threads made it slower: 24 demo rows in 136
    # against 110 s with the default wait policy, an idle vLLM up (docs/trainer.md).
    cfg = config_from(ctx, config)
    try:
        task_ids = sft_task_ids(cfg.sft)
    except ValueError as e:
        die(str(e))
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
    from fathom.capture_proxy.app import create_app
    from fathom.entrypoints.launch_cmd import server_urls
    from fathom.env_server.scripted import create_scripted_app
    from fathom.policy_server.models import ModelError, resolve_model
    from fathom.rollout_worker.session import FathomSessionFactory
    from fathom.trainer.sft import train_sft

    console = Console(stderr=True)
    out_dir = Path(out) if out else cfg.run_dir / "sft"
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        model_dir = resolve_model(cfg.model)
    except ModelError as e:
        die(str(e))
    rows: list[dict] = []
    summaries: list[dict] = []
    cols = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[info]}"), TimeRemainingColumn())
    if cfg.sft.demonstrations:  # checked before any episode is recorded: a bad line fails in seconds
        from fathom.env_server.server.demos import DemoError, rows_from_demonstrations
        from fathom.env_server.server.tokens import ChatTokens, TemplateError

        try:
            demos = rows_from_demonstrations(cfg.sft.demonstrations, ChatTokens.load(model_dir), cfg.sft.max_length)
        except (DemoError, TemplateError) as e:
            die(str(e))
        console.print(f"{len(demos)} demonstrations from {cfg.sft.demonstrations}")
    else:
        demos = []
    if cfg.sft.teacher:
        name = cfg.policy_server.served_model_name
        teacher = create_scripted_app("teach", name, cfg.model.max_model_len, tokenizer_dir=str(model_dir),
                                      fix_fraction=cfg.sft.fix_fraction)
        env_url = server_urls(cfg)["env"]
        with serve_in_thread(teacher) as teacher_url, \
                serve_in_thread(create_app(cfg.capture_proxy, upstream_url=teacher_url, base_model=name,
                                           weight_sync="merged")) as proxy_url:
            factory = FathomSessionFactory(proxy_url=proxy_url, env_url=env_url,
                                           max_tokens=cfg.trainer.max_completion_tokens,
                                           max_turns=cfg.env_server.max_turns)
            with Progress(*cols, console=console) as bar, ThreadPoolExecutor(workers) as pool:
                job = bar.add_task("recording teacher episodes", total=len(task_ids), info="")
                futures = [pool.submit(record_episode, factory, t, cfg.sft.max_length) for t in task_ids]
                for fut in futures:
                    try:
                        got, summary = fut.result()
                    except Exception as e:  # noqa: BLE001 - one failed recording is reported, the rest still count
                        got, summary = [], {"error": str(e)}
                    rows += got
                    summaries.append(summary)
                    kept = sum(1 for s in summaries if s.get("rows"))
                    bar.update(job, advance=1, info=f"kept {kept}")
                    progress_line(console, "recorded teacher episodes", len(summaries), len(task_ids), f"kept {kept}")
        (out_dir / "episodes.jsonl").write_text("".join(json.dumps(s) + "\n" for s in summaries))
        kept = sum(1 for s in summaries if s.get("rows"))
        console.print(f"recorded {len(summaries)} teacher episodes; {kept} solved without a cut turn -> {len(rows)} rows")
    rows += demos
    (out_dir / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if not rows:
        die(f"no usable teacher episode or demonstration; see {out_dir / 'episodes.jsonl'}", code=1)
    with Progress(*cols, console=console) as bar:
        job = bar.add_task("SFT", total=None, info="")
        def on_step(step: int, total: int, loss: float) -> None:
            bar.update(job, completed=step, total=total, info=f"loss {loss:.3f}")
            progress_line(console, "SFT step", step, total, f"loss {loss:.3f}")

        metrics = train_sft(model_dir, rows, out_dir, sft=cfg.sft, lora=cfg.trainer.lora, on_step=on_step)
    frac = metrics.get("flop_fraction_of_peak")
    console.print(f"SFT: {metrics.get('tokens_per_s')} tok/s fwd+bwd, "
                  + (f"{frac:.1%} of this machine's measured {metrics['matmul_dtype']} matmul peak" if frac is not None
                     else "no FLOP fraction (no wall time)"))
    console.print(f"SFT done: {json.dumps(metrics)}; adapter in {out_dir / 'adapter'}")


__all__ = ["OVERRIDE_SETTINGS", "check_phrasings", "record_episode", "sft", "sft_task_ids"]

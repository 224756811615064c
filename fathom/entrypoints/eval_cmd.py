"""`fathom eval` and `fathom eval watch`: held-out evaluation through the env server and proxy.

    fathom eval --adapter runs/smoke/checkpoints/checkpoint-10     # base vs adapter on the test split
    fathom eval --start --eval.n_tasks 20                          # start vLLM + proxy + env server too
    fathom eval watch --checkpoints runs/smoke --start             # score each checkpoint as it appears
"""

from __future__ import annotations

from pathlib import Path

import click
import typer
from typer.core import TyperGroup

from fathom.entrypoints.common import CONFIG_OPTION, OVERRIDE_SETTINGS, START_OPTION, config_from, die


class _EvalGroup(TyperGroup):
    """`fathom eval [OPTIONS] [OVERRIDES]` runs an eval; `fathom eval watch ...` is the one subcommand.

    A plain group would read the first override (`--eval.split test`) as a subcommand name.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] in self.commands:
            return super().parse_args(ctx, args)
        return click.Command.parse_args(self, ctx, args)


app = typer.Typer(cls=_EvalGroup, invoke_without_command=True, context_settings=OVERRIDE_SETTINGS,
                  help="Evaluate a model, or base against adapter, on a task split.")


def _adapter_specs(specs: list[str]) -> list[tuple[str, str]]:
    """`--adapter PATH` (label `adapter`) or `--adapter LABEL=PATH`, repeatable (e.g. sft=..., grpo=...)."""
    out = []
    for i, spec in enumerate(specs):
        label, sep, path = spec.partition("=")
        if not sep:
            label, path = ("adapter" if len(specs) == 1 else f"adapter{i + 1}"), spec
        if not label or not path or label == "base" or label in (x for x, _ in out):
            die(f"--adapter {spec!r}: give PATH or LABEL=PATH with a unique LABEL other than 'base'")
        out.append((label, path))
    return out


def _print(results: dict, paths: dict) -> None:
    for label, m in results["models"].items():
        p = m["summary"]["pass@1"]
        rate = "n/a" if p["pass@1"] is None else f"{p['pass@1']:.3f} [{p['ci'][0]:.3f}, {p['ci'][1]:.3f}]"
        print(f"{label}: pass@1 {rate} over {p['n']} scorable ({m['summary']['unscorable']} unscorable); "
              f"{m['summary']['tokens']['mean_total'] or 0:.0f} tokens/episode")
        for fam, sel in (m["summary"].get("selectivity") or {}).get("by_family", {}).items():
            w, wo = sel["with_subcalls"], sel["without_subcalls"]
            print(f"  {fam}: llm() in {sel['called_share']:.0%} of {sel['episodes']} episodes, "
                  f"{sel['llm_calls_per_episode']:.2f} calls and {sel['sub_tokens_per_episode']:.0f} sub-call tokens "
                  f"an episode; right {w['correct']}/{w['n']} with sub-calls, {wo['correct']}/{wo['n']} without")
        routed = [f"{fam} {r['own']}/{r['n']}" + (" (" + ", ".join(f"{k} {v}" for k, v in r["wrote"].items()) + ")"
                                                  if r["wrote"] else "")
                  for fam, r in (m["summary"].get("routing") or {}).items()]
        if routed:
            print("  wrote its family's program: " + "; ".join(routed))
    for c in results["comparisons"]:
        if c["delta"] is not None:
            print(f"{c['adapter']} vs {c['base']}: both {c['both']}, only {c['base']} {c['only_base']}, only "
                  f"{c['adapter']} {c['only_adapter']}, neither {c['neither']}; delta {c['delta']:+.3f} "
                  f"[{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]")
    for k, p in paths.items():
        print(f"{k}: {p}")


@app.callback()
def eval_(
    ctx: typer.Context,
    config: str = CONFIG_OPTION,
    adapter: list[str] = typer.Option(None, help="LoRA adapter: checkpoint dir, run dir (newest checkpoint) or Hub "
                                                 "repo id; LABEL=PATH to name it; repeat to compare several."),
    model: str = typer.Option(None, help="Evaluate this already-served model name alone (base or loaded adapter)."),
    base: bool = typer.Option(True, "--base/--no-base", help="With --adapter, also score the base (paired comparison)."),
    split: str = typer.Option(None, help="Task split (default: eval.split)."),
    n: int = typer.Option(None, "--n", help="First N tasks of the split's first block, plus later families in proportion (default: eval.n_tasks, else all)."),
    tasks: str = typer.Option(None, help="Comma-separated task ids instead of a split."),
    out: Path = typer.Option(None, help="Output directory (default: {run_dir}/eval/{split})."),
    start: bool = START_OPTION,
) -> None:
    """Score pass@1 (bootstrap interval), by family and context length; write results.json, pareto.png, report.html."""
    if ctx.invoked_subcommand is not None:
        return
    cfg = config_from(ctx, config)
    if split:
        cfg.eval.split = split
    from fathom.eval.run import EvalInputError, resolve_adapter, run_eval, task_ids
    from fathom.eval.runner import EvalError
    from fathom.policy_server.client import PolicyClientError
    from fathom.stack.stack import started

    try:
        ids = task_ids(cfg, tasks, n)
        adapters = [(label, resolve_adapter(p, cfg.run_dir / "eval" / "adapters"))
                    for label, p in _adapter_specs(adapter or [])]
    except EvalInputError as e:
        die(str(e))
    out = out or cfg.run_dir / "eval" / (cfg.eval.split if not tasks else "tasks")
    with started(cfg, config, list(ctx.args), start):
        try:
            results, paths = run_eval(cfg, ids, out, urls=(cfg.policy_url, cfg.proxy_url, cfg.env_url),
                                      adapters=adapters, model=model, base=base,
                                      split=cfg.eval.split if not tasks else "tasks")
        except (EvalError, PolicyClientError) as e:
            die(str(e))
    _print(results, paths)

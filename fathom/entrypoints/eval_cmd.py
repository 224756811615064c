"""`fathom eval` and `fathom eval watch`: held-out evaluation through the env server and proxy.

    fathom eval --adapter runs/smoke/checkpoints/checkpoint-10     # base vs adapter on the test split
    fathom eval --start --eval.n_tasks 20                          # start vLLM + proxy + env server too
    fathom eval watch --checkpoints runs/smoke --start             # score each checkpoint as it appears
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import click
import typer
from typer.core import TyperGroup

from fathom.entrypoints.common import CONFIG_OPTION, OVERRIDE_SETTINGS, config_from, die, eprint


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

START_OPTION = typer.Option(False, "--start", help="Start vLLM, the capture proxy and the env server from the config.")


def _urls(cfg, stack):
    from fathom.entrypoints.launch_cmd import server_urls

    urls = server_urls(cfg)
    return urls["policy"], urls["proxy"], urls["env"]


def _stack(ctx: typer.Context, cfg, config: str, start: bool):
    if not start:
        return contextlib.nullcontext(None)
    from fathom.entrypoints.stack import Stack

    return Stack(cfg, config, list(ctx.args))


def _task_ids(cfg, tasks: str | None, n: int | None) -> list[str]:
    from fathom import tasks as T
    from fathom.tasks.splits import ManifestError, rounds

    T.configure(cfg.tasks)
    if tasks:
        ids = [t.strip() for t in tasks.split(",") if t.strip()]
        for t in ids:
            try:  # a generated id (needle-64k-s1) or an imported one (mydocs-3), checked without reading a context
                T.describe(t)
            except KeyError as e:
                die(f"--tasks: {e.args[0]}")
            except ManifestError as e:
                die(f"--tasks: {e}")
        return ids
    src = cfg.tasks.source(cfg.eval.split)
    if src is not None and "eval" not in src.roles:
        die(f"eval.split {cfg.eval.split!r} is a task source with roles {src.roles}; add \"eval\" to its roles in "
            "[[tasks.sources]] to evaluate on it")
    try:
        ids = T.load_split(cfg.eval.split)
    except ManifestError as e:
        die(str(e))
    return rounds(cfg.eval.split, ids, n or cfg.eval.n_tasks)


def resolve_adapter(spec: str, cache: Path) -> Path:
    """A checkpoint directory, a run directory (its newest complete checkpoint) or a Hub repo id."""
    from fathom.eval.checkpoints import DirSource, HubSource, adapter_complete

    p = Path(spec).expanduser()
    if p.is_dir():
        if adapter_complete(p):
            return p
        found = DirSource(p).complete()
        if found:
            return found[max(found)]
        die(f"--adapter {spec!r} holds no complete adapter (adapter_config.json + adapter_model.safetensors) and no "
            "complete checkpoint-N/ under it; point it at a checkpoint directory or a run directory")
    if spec.count("/") == 1 and not p.exists():
        from huggingface_hub import snapshot_download

        local = Path(snapshot_download(spec, local_dir=cache / spec.replace("/", "--"),
                                       allow_patterns=["adapter_config.json", "adapter_model.safetensors"]))
        if adapter_complete(local):
            return local
        hub = HubSource(spec, cache / spec.replace("/", "--"))
        for step in reversed(hub.steps()):  # the newest checkpoint that downloads complete
            got = hub.fetch(step)
            if got is not None:
                return got
        die(f"Hub repo {spec!r} has no adapter at its root and no complete checkpoint-N/ folder")
    die(f"--adapter {spec!r} is neither a directory nor a Hub repo id (owner/name)")


def _header(targets, n: int, name: str | None = None) -> str:
    """The line before an evaluation: what is scored on how many tasks. A main-job stage (`name`) runs under the
    one served model name, so the line names the stage and says which name serves it."""
    if name:
        return f"evaluating {name} (served as {', '.join(t.model or t.label for t in targets)}) on {n} tasks"
    return f"evaluating {', '.join(t.label for t in targets)} on {n} tasks"


def _progress(n: int, name: str | None = None):
    """A line per finished episode, prefixed with the target's label, or `name` when one is given."""
    counts: dict[str, list[int]] = {}

    def on_result(label, res) -> None:
        label = name or label
        c = counts.setdefault(label, [0, 0, 0])
        c[0] += 1
        if res.status != "done":
            c[2] += 1
        elif res.reward_components is not None and res.reward_components.correct:
            c[1] += 1
        eprint(f"[{label}] {c[0]}/{n} {res.task_id}: {res.status} stop={res.stop_reason} "
               f"reward={res.reward} (correct so far {c[1]}, unscorable {c[2]})")

    return on_result


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
    from fathom.eval.runner import EvalError
    from fathom.policy_server.client import PolicyClientError

    ids = _task_ids(cfg, tasks, n)
    out = out or cfg.run_dir / "eval" / (cfg.eval.split if not tasks else "tasks")
    adapters = [(label, resolve_adapter(p, cfg.run_dir / "eval" / "adapters")) for label, p in _adapter_specs(adapter or [])]
    with _stack(ctx, cfg, config, start) as stack:
        try:
            results, paths = run_eval(cfg, ids, out, urls=_urls(cfg, stack), adapters=adapters, model=model, base=base,
                                      split=cfg.eval.split if not tasks else "tasks")
        except (EvalError, PolicyClientError) as e:
            die(str(e))
    _print(results, paths)


def eval_plan(cfg, env_url: str, proxy_url: str, *, adapters=(), model: str | None = None, base: bool = True,
              label: str | None = None):
    """(target, adapter dir or None) in the order they are scored; see `run_eval`."""
    from fathom.eval.runner import EvalTarget

    stamp = int(time.time())
    plan: list[tuple[EvalTarget, Path | None]] = []
    if model:
        plan.append((EvalTarget(env_url, proxy_url, model, label=label or model), None))
    if not model and (base or not adapters):
        plan.append((EvalTarget(env_url, proxy_url, cfg.policy_server.served_model_name, label="base"), None))
    plan += [(EvalTarget(env_url, proxy_url, f"{cfg.eval.adapter_name_prefix}{name}-{stamp}", label=name), Path(path))
             for name, path in adapters]
    return plan


def run_eval(cfg, task_ids: list[str], out: Path, *, urls: tuple[str, str, str], adapters: list[tuple[str, Path]] = (),
             model: str | None = None, base: bool = True, split: str | None = None, quiet: bool = False,
             progress_label: str | None = None, label: str | None = None):
    """Score the base (unless `base` is False or `model` names one served model) and each (label, adapter dir)
    on `task_ids` against a running stack (`urls` = policy, proxy, env); writes the outputs under `out`.
    `progress_label` prefixes the progress lines instead of the served name (the main job's stage label).
    `label` names the results of `model` (default: the served name); the served name stays beside it as `model`.

    The main job calls this in-process for its final base/SFT/GRPO numbers. Returns (results, paths).
    Raises `EvalError` or `PolicyClientError` when a server is down or an adapter cannot be loaded.
    """
    from fathom.eval.evaluate import build_results, run_models
    from fathom.eval.report import write_outputs
    from fathom.policy_server.client import PolicyClient
    from fathom.protocol import EpisodeLimits, Sampling

    ids = task_ids
    policy_url, proxy_url, env_url = urls
    sampling = Sampling(temperature=cfg.eval.temperature, max_tokens=cfg.trainer.max_completion_tokens)
    limits = EpisodeLimits(max_depth=cfg.eval.max_depth if cfg.eval.max_depth is not None else cfg.env_server.demo_max_depth)
    plan = eval_plan(cfg, env_url, proxy_url, adapters=adapters, model=model, base=base, label=label)
    if not quiet:
        eprint(_header([t for t, _ in plan], len(ids), progress_label))
    t0, episodes = time.monotonic(), {}
    with PolicyClient(policy_url) as pc:
        for target, path in plan:  # one model at a time, and one LoRA slot at a time
            if path is not None:
                pc.load_adapter(target.model, str(path))
            try:
                on_result = None if quiet else _progress(len(ids), progress_label)
                episodes |= run_models([target], ids, sampling=sampling, limits=limits, concurrency=cfg.eval.concurrency,
                                       timeout_s=cfg.eval.episode_timeout_s, on_result=on_result)
            finally:
                if path is not None:
                    pc.unload_adapter(target.model)
    results = build_results(episodes, targets=[t for t, _ in plan], split=split or cfg.eval.split, task_ids=ids,
                            sampling=sampling, limits=limits, max_model_len=cfg.model.max_model_len,
                            bootstrap=cfg.eval.bootstrap, confidence=cfg.eval.confidence, seed=cfg.eval.seed)
    results["wall_s"] = time.monotonic() - t0
    for t, path in plan:
        if path is not None:
            results["models"][t.label]["adapter_path"] = str(path)
    return results, write_outputs(results, episodes, out, report_episodes=cfg.eval.report_episodes)

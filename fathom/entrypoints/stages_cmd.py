"""`fathom eval stages`: the main job's final evaluation, base then SFT then GRPO on the same held-out tasks.

Each stage's weights are put on the running vLLM in turn: reloaded from disk as merged weights
when the server runs in dev mode (merged weight sync, no LoRA needed), else hot-loaded as a LoRA.
Every stage is scored by `run_eval` on the same tasks, then consecutive stages are compared with
a paired bootstrap. Writes `<out>/<stage>/` (results, report) and `<out>/summary.json`.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import typer

from fathom.entrypoints.common import CONFIG_OPTION, OVERRIDE_SETTINGS, config_from, die
from fathom.stack.threads import passive_omp


def parse_stages(specs: list[str]) -> list[tuple[str, str | None]]:
    """`base` (the base weights) or `LABEL=ADAPTER`, in order; labels unique."""
    out: list[tuple[str, str | None]] = []
    for spec in specs:
        label, sep, path = spec.partition("=")
        if (sep and not path) or not label or label in (x for x, _ in out) or (not sep and label != "base"):
            die(f"--stage {spec!r}: give `base` or LABEL=ADAPTER_DIR with a unique LABEL")
        out.append((label, path or None))
    return out


def stages(
    ctx: typer.Context,
    config: str = CONFIG_OPTION,
    stage: list[str] = typer.Option(..., help="`base`, or LABEL=ADAPTER_DIR; repeat, in order (base, sft=..., grpo=...)."),
    out: Path = typer.Option(None, help="Output directory (default: {run_dir}/eval)."),
    split: str = typer.Option(None, help="Built-in or imported split (default: eval.split)."),
) -> None:
    """Score each stage's weights on the same held-out tasks; pass@1 with intervals and paired stage-to-stage deltas."""
    passive_omp()
    cfg = config_from(ctx, config)
    if split:
        cfg.eval.split = split
    plan = parse_stages(stage)
    from fathom.eval.metrics import CHARS_PER_TOKEN
    from fathom.eval.run import EvalInputError, task_ids
    from fathom.eval.stages import stage_tasks, summarize_stages
    from fathom.policy_server.launch import dev_mode
    from fathom.policy_server.models import ModelError, resolve_model
    from fathom.tasks import describe

    out = out or cfg.run_dir / "eval"
    try:
        ids = task_ids(cfg, None, None)
    except EvalInputError as e:
        die(str(e))
    try:
        model_dir = resolve_model(cfg.model)
    except ModelError as e:
        die(str(e))
    reload = dev_mode(cfg.policy_server)
    t0 = time.monotonic()
    per_stage: dict[str, dict[str, bool]] = {}
    summaries: dict[str, dict] = {}
    cached: dict = {}
    for label, adapter in plan:
        stage_ids = stage_tasks(ids, adapter, cfg.eval.base_n_tasks)
        cache = base_cache_entry(cfg, model_dir, stage_ids, reload=reload) if adapter is None else None
        if cache is not None and (results := cache.restore(out / label)) is not None:
            typer.echo(f"stage {label}: results reused from {cache.path} (same model, tasks, episode code and "
                       "settings; --eval.base_cache false scores it again)")
            summary, cached = results["models"][label], {"key": cache.key, "hit": True, "path": str(cache.path)}
        else:
            summary = _score(cfg, label, adapter, stage_ids, out, model_dir=model_dir, reload=reload)
            if cache is not None:
                cached = {"key": cache.key, "hit": False, "path": str(cache.store(out / label))}
        summaries[label] = summary["summary"]
        per_stage[label] = {r["task_id"]: bool(r["correct"]) for r in summary["rows"] if r["scorable"]}
    # The length is in the task id or the imported manifest: no (up to 10M-character) context is read to measure it.
    beyond = sum(1 for t in ids if describe(t)[1] / CHARS_PER_TOKEN > cfg.model.max_model_len) / len(ids)
    boot = {"n": cfg.eval.bootstrap, "confidence": cfg.eval.confidence, "seed": cfg.eval.seed}
    summary = summarize_stages(per_stage, summaries, boot=boot, beyond_fraction=beyond, wall_s=time.monotonic() - t0)
    summary |= {"split": cfg.eval.split, "n_tasks": len(ids), "max_completion_tokens": cfg.trainer.max_completion_tokens,
                "max_turns": cfg.env_server.max_turns} | ({"base_cache": cached} if cached else {})
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    _print_summary(summary, beyond, cfg.model.max_model_len, out)


def _score(cfg, label: str, adapter: str | None, stage_ids: list[str], out: Path, *, model_dir: str,
           reload: bool) -> dict:
    """Score one stage's weights on `stage_ids` and return its results' model entry (summary and rows); a stage
    that cannot be scored ends the command with a message naming it."""
    from fathom.eval.run import EvalInputError, resolve_adapter, run_eval
    from fathom.eval.runner import EvalError
    from fathom.policy_server.client import PolicyClientError
    from fathom.trainer.adapters import AdapterError, serve_merged
    from fathom.trainer.build import policy_state_path
    from fathom.trainer.weight_sync import WeightSyncError

    urls = (cfg.policy_url, cfg.proxy_url, cfg.env_url)
    try:
        if reload:
            # One directory per stage: vLLM reads the current stage's files, the previous stage's go.
            v = serve_merged(model_dir, adapter, vllm_url=cfg.policy_url, proxy_url=cfg.proxy_url,
                             directory=out / "weights" / label, timeout_s=cfg.trainer.weight_sync_timeout_s,
                             state_path=policy_state_path(cfg.run_dir))
            for old in (out / "weights").iterdir():
                if old.name != label:
                    shutil.rmtree(old, ignore_errors=True)
            typer.echo(f"stage {label}: vLLM reloaded with {'base' if not adapter else adapter} (policy version {v})")
            # Every stage is served under the one base name: its results are labelled by stage, the served
            # name beside it, so the report and the model card never call the GRPO weights `fathom-base`.
            results, _ = run_eval(cfg, stage_ids, out / label, urls=urls, model=cfg.policy_server.served_model_name,
                                  label=label, progress_label=label)
            return results["models"][label]
        adapters = [(label, resolve_adapter(adapter, out / "adapters"))] if adapter else []
        results, _ = run_eval(cfg, stage_ids, out / label, urls=urls, adapters=adapters, base=not adapter)
        return results["models"]["base" if not adapter else label]
    except EvalInputError as e:
        die(str(e))
    except (EvalError, PolicyClientError, AdapterError, WeightSyncError, OSError) as e:
        die(f"stage {label}: {e}", code=1)


def base_cache_entry(cfg, model_dir: str, ids: list[str], *, reload: bool):
    """The base stage's cache entry (`fathom.eval.base_cache`), or None when `eval.base_cache` is off or a task is
    an imported one. The key holds the dtype and device vLLM serves with, resolved as `fathom policy serve` does,
    and whether the base is served as weights reloaded from disk (`reload`) or as the model vLLM started with."""
    if not cfg.eval.base_cache:
        return None
    from fathom.eval.base_cache import BaseCache
    from fathom.policy_server.launch import detect_device, serving_dtype

    device = detect_device(cfg.policy_server.device)
    return BaseCache.for_stage(cfg, Path(model_dir), ids, device=device, reload=reload,
                               served_dtype=serving_dtype(cfg.policy_server, cfg.model, device))


def _print_summary(summary: dict, beyond: float, max_model_len: int, out: Path) -> None:
    for label, s in summary["stages"].items():
        p = s["pass@1"]
        rate = "n/a" if p["pass@1"] is None else f"{p['pass@1']:.3f} [{p['ci'][0]:.3f}, {p['ci'][1]:.3f}]"
        typer.echo(f"{label:>5}: pass@1 {rate} over {p['n']} tasks ({s['unscorable']} unscorable)")
    for key, c in summary["paired"].items():
        if c["delta"] is not None:
            typer.echo(f"{key}: {c['delta']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}] (paired bootstrap, "
                       f"{c['n']} tasks)")
    typer.echo(f"{beyond:.0%} of the tasks are longer than the model's {max_model_len}-token window; "
               f"summary in {out / 'summary.json'}, reports in {out}/<stage>/report.html")


__all__ = ["OVERRIDE_SETTINGS", "base_cache_entry", "parse_stages", "stages"]

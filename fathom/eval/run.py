"""One evaluation against a running stack: the tasks it scores, the adapters it loads, and the run itself
(`fathom eval`, `fathom eval watch` and the main job's `fathom eval stages` all call these)."""

from __future__ import annotations

import sys
import time
from pathlib import Path


class EvalInputError(ValueError):
    """A task list, split or adapter given to an evaluation names nothing usable; the message says which and how
    to fix it."""


def task_ids(cfg, tasks: str | None, n: int | None) -> list[str]:
    from fathom import tasks as T
    from fathom.tasks.splits import ManifestError, rounds

    T.configure(cfg.tasks)
    if tasks:
        ids = [t.strip() for t in tasks.split(",") if t.strip()]
        for t in ids:
            try:  # a generated id (needle-64k-s1) or an imported one (mydocs-3), checked without reading a context
                T.describe(t)
            except KeyError as e:
                raise EvalInputError(f"--tasks: {e.args[0]}") from None
            except ManifestError as e:
                raise EvalInputError(f"--tasks: {e}") from None
        return ids
    src = cfg.tasks.source(cfg.eval.split)
    if src is not None and "eval" not in src.roles:
        raise EvalInputError(f"eval.split {cfg.eval.split!r} is a task source with roles {src.roles}; add \"eval\" "
                             "to its roles in [[tasks.sources]] to evaluate on it")
    try:
        ids = T.load_split(cfg.eval.split)
    except ManifestError as e:
        raise EvalInputError(str(e)) from None
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
        raise EvalInputError(f"--adapter {spec!r} holds no complete adapter (adapter_config.json + "
                             "adapter_model.safetensors) and no complete checkpoint-N/ under it; point it at a "
                             "checkpoint directory or a run directory")
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
        raise EvalInputError(f"Hub repo {spec!r} has no adapter at its root and no complete checkpoint-N/ folder")
    raise EvalInputError(f"--adapter {spec!r} is neither a directory nor a Hub repo id (owner/name)")


def header(targets, n: int, name: str | None = None) -> str:
    """The line before an evaluation: what is scored on how many tasks. A main-job stage (`name`) runs under the
    one served model name, so the line names the stage and says which name serves it."""
    if name:
        return f"evaluating {name} (served as {', '.join(t.model or t.label for t in targets)}) on {n} tasks"
    return f"evaluating {', '.join(t.label for t in targets)} on {n} tasks"


def progress(n: int, name: str | None = None):
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
        print(f"[{label}] {c[0]}/{n} {res.task_id}: {res.status} stop={res.stop_reason} "
              f"reward={res.reward} (correct so far {c[1]}, unscorable {c[2]})", file=sys.stderr)

    return on_result


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

    ids = task_ids
    policy_url, proxy_url, env_url = urls
    sampling, limits = settings(cfg)
    plan = eval_plan(cfg, env_url, proxy_url, adapters=adapters, model=model, base=base, label=label)
    if not quiet:
        print(header([t for t, _ in plan], len(ids), progress_label), file=sys.stderr)
    t0, episodes = time.monotonic(), {}
    with PolicyClient(policy_url) as pc:
        for target, path in plan:  # one model at a time, and one LoRA slot at a time
            if path is not None:
                pc.load_adapter(target.model, str(path))
            try:
                on_result = None if quiet else progress(len(ids), progress_label)
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


def settings(cfg):
    """(Sampling, EpisodeLimits) of every evaluation under `cfg`: the eval temperature, the trainer's output cap,
    and `eval.max_depth` (default: the env server's demo depth)."""
    from fathom.protocol import EpisodeLimits, Sampling

    sampling = Sampling(temperature=cfg.eval.temperature, max_tokens=cfg.trainer.max_completion_tokens)
    depth = cfg.eval.max_depth if cfg.eval.max_depth is not None else cfg.env_server.demo_max_depth
    return sampling, EpisodeLimits(max_depth=depth)


def watch(cfg, source, ids: list[str], out: Path, *, stop_at_step: int | None, idle_exit_s: float | None) -> dict:
    """Score each new complete checkpoint of `source` once on `ids`, hot-loaded as a LoRA into the running vLLM,
    until `stop_at_step` is scored or `idle_exit_s` passes with no new one; writes `<out>/<label>/` per checkpoint
    and returns the watcher's summary. Raises `EvalError` or `PolicyClientError` when a server is down."""
    from fathom.eval.evaluate import build_results
    from fathom.eval.report import write_outputs
    from fathom.eval.runner import EvalRunner, EvalTarget
    from fathom.eval.watch import Watcher
    from fathom.policy_server.client import PolicyClient

    sampling, limits = settings(cfg)

    def evaluate(model: str | None, label: str) -> dict:
        target = EvalTarget(cfg.env_url, cfg.proxy_url, model or cfg.policy_server.served_model_name, label=label)
        runner = EvalRunner(target, sampling=sampling, limits=limits, concurrency=cfg.eval.concurrency,
                            timeout_s=cfg.eval.episode_timeout_s)
        episodes = {label: runner.run(ids)}
        res = build_results(episodes, targets=[target], split=cfg.eval.split, task_ids=ids, sampling=sampling,
                            limits=limits, max_model_len=cfg.model.max_model_len, bootstrap=cfg.eval.bootstrap,
                            confidence=cfg.eval.confidence, seed=cfg.eval.seed)
        write_outputs(res, episodes, out / label, report_episodes=cfg.eval.report_episodes)
        m = res["models"][label]
        return {**{k: res[k] for k in ("split", "n_tasks", "created", "sampling")}, "model": m["model"],
                "summary": m["summary"], "rows": m["rows"]}

    with PolicyClient(cfg.policy_url) as pc:
        w = Watcher(source, out, evaluate=evaluate, load=pc.load_adapter, unload=pc.unload_adapter,
                    loaded=lambda: [m["id"] for m in pc.models() if m.get("parent")],
                    adapter_prefix=cfg.eval.adapter_name_prefix, poll_s=cfg.eval.watch_poll_s)
        return w.run(stop_at_step=stop_at_step, idle_exit_s=idle_exit_s)

"""The main job as a plan: the steps `fathom launch` runs, computed from the config alone.

Servers are `fathom ... serve` children kept up and health-checked, stages are `fathom` subcommands run to
completion, and a restart replaces a running server with new arguments (the evaluation's own policy cores).
`--dry-run` prints the plan, so what runs is what the plan says; see docs/main_job.md.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from fathom.trainer.anchor import missing_rows, rows_path

FATHOM = [sys.executable, "-m", "fathom.entrypoints.cli"]
"""How a step runs a `fathom` command: this interpreter, so a child sees the same installation."""


@dataclass(frozen=True)
class Step:
    kind: str
    """`server` (kept up, health-checked), `restart` (a running server stopped and started again with new
    arguments) or `stage` (run to completion)."""
    name: str
    argv: list[str]
    health_url: str | None = None


def server_steps(cfg, config_path: str, overrides: list[str]) -> list[Step]:
    """vLLM, then the capture proxy, then the env server, each a `fathom ... serve` child with its health URL."""
    fathom = FATHOM
    common = ["-c", config_path, *overrides]
    return [
        Step("server", "policy", [*fathom, "policy", "serve", *common], f"{cfg.policy_server.url}/health"),
        Step("server", "proxy", [*fathom, "proxy", "serve", *common], f"{cfg.capture_proxy.url}/healthz"),
        Step("server", "env", [*fathom, "env", "serve", *common], f"{cfg.env_server.url}/health"),
    ]


class PlanError(ValueError):
    """The config asks for a main job whose steps cannot all be given what they need."""


def sft_adapter_dir(cfg) -> Path:
    return cfg.run_dir / "sft" / "adapter"


def slow_cpu_note(cfg, cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The line a CPU run starts with where the CPU has no native bf16: `"auto"` then serves and trains in fp32,
    and the job takes about twice as long (`make demo` on 2 cores: 67.6-69.8 minutes on an AVX2-only EPYC against
    34-40 with AVX512-BF16 or AMX; docs/main_job.md, "Where the time goes"). None on a GPU or such a CPU."""
    from fathom.policy_server.launch import cpu_without_native_bf16

    if not cpu_without_native_bf16(cfg.policy_server.device, cpuinfo):
        return None
    return (f"this CPU has no native bf16 (no avx512_bf16 or amx_bf16 in {cpuinfo}): with the `auto` settings "
            "vLLM and the trainer run in fp32, and the job takes about twice as long as on a CPU with it "
            "(docs/main_job.md, \"Where the time goes\"; measured runs in docs/results.md)")


def check_split(cfg) -> None:
    """PlanError unless `eval.split` names a pinned split, so a typo stops the job before SFT and GRPO, not after."""
    from fathom import tasks as T
    from fathom.tasks.splits import ManifestError

    T.configure(cfg.tasks)
    try:
        T.load_split(cfg.eval.split, verify_sha=False)
    except ManifestError as e:
        raise PlanError(f"eval.split (--split): {e}") from None


def plan(cfg, config_path: str, overrides: list[str]) -> list[Step]:
    """Every step of the main job, in order."""
    if "eval" in cfg.launch.stages or cfg.launch.eval_watch:
        check_split(cfg)
    fathom = FATHOM
    common = ["-c", config_path, *overrides]
    steps = server_steps(cfg, config_path, overrides)
    t = cfg.trainer
    start, start_label, anchor = t.init_adapter, "init", rows_path(t.sft_anchor_data, t.init_adapter)
    if "sft" in cfg.launch.stages and not start:
        from fathom.tasks.sft_tasks import check_phrasings

        try:
            check_phrasings(cfg.sft)
        except ValueError as e:
            raise PlanError(str(e)) from None
        steps.append(Step("stage", "sft", [*fathom, "sft", *common]))
        start, start_label = str(sft_adapter_dir(cfg)), "sft"
        anchor = anchor or str(sft_adapter_dir(cfg).parent / "data.jsonl")  # `fathom sft` writes it there
    if "grpo" in cfg.launch.stages:
        if cfg.launch.eval_watch:
            steps.append(Step("server", "eval-watch", [*fathom, "eval", "watch", *common]))
        init = ["--trainer.init_adapter", start] if start else []
        if t.sft_anchor_coef > 0:
            if not anchor:
                raise PlanError(str(missing_rows(t.sft_anchor_coef, start)))
            init += ["--trainer.sft_anchor_data", anchor]
        # The launcher, not the trainer, removes the tmpfs merged weights: its eval-stage vLLM restart reloads them.
        steps.append(Step("stage", "grpo", [*fathom, "train", *common, *init, "--keep-merged"]))
    if "eval" in cfg.launch.stages:
        cores = cfg.launch.eval_policy_cores
        if cores and cores != cfg.policy_server.cpu_cores:
            # No trainer runs beside the evaluation, so its cores are free for vLLM (the overlap check between
            # the two settings is for runs where both share the machine).
            policy = server_steps(cfg, config_path, [*overrides, "--policy_server.cpu_cores", cores,
                                                     "--trainer.cpu_cores="])[0]
            if any(s.kind == "stage" for s in steps):
                steps.append(Step("restart", policy.name, policy.argv, policy.health_url))
            else:
                steps[0] = policy
        stages = ["--stage", "base"] if cfg.launch.eval_base else []
        if start:
            stages += ["--stage", f"{start_label}={start}"]
        if "grpo" in cfg.launch.stages:
            stages += ["--stage", f"grpo={cfg.run_dir / 'final'}"]
        if not stages:
            raise PlanError("the evaluation has no stage to score: launch.eval_base is off and there is no adapter; "
                            "turn launch.eval_base on, or add the sft or grpo stage, or set trainer.init_adapter")
        steps.append(Step("stage", "eval", [*fathom, "eval", "stages", *common, *stages]))
    return steps


def split_use(split: str) -> str:
    """What a score on `split` may be used for, under the selection protocol of docs/main_job.md."""
    return {"test": "for choosing a recipe", "heldout": "for reporting a chosen recipe; never choose on it",
            "train": "the tasks GRPO trains on: not an estimate of anything new"}.get(split, "an imported task set")


def sync_line(cfg) -> str:
    """How the trainer's weights reach vLLM under this config: the dry run's first line."""
    from fathom.config import merged_backend

    ps, t = cfg.policy_server, cfg.trainer
    where = (f"trainer on cuda:{t.cuda_device}, vLLM on cuda:{ps.cuda_device}" if ps.device != "cpu"
             else "trainer and vLLM on CPU")
    backend = merged_backend(cfg)
    if backend is None:
        how = f"adapter (a LoRA adapter per version through /v1/load_lora_adapter, {ps.max_loras} slots)"
    elif backend == "nccl":
        how = "merged over NCCL (TRL's weight transfer, vLLM --weight-transfer-config nccl)"
    else:
        from fathom.trainer.merged_dir import AUTO, disk_dir, tmpfs_dir

        where_dir = disk_dir(ps.merged_dir, cfg.run_dir)
        if ps.merged_dir == AUTO:
            where_dir = f"{tmpfs_dir(cfg.run_dir, cfg.run_name)} when tmpfs has room for two copies, else {where_dir}"
        how = (f"merged by disk reload (safetensors under {where_dir}, "
               "vLLM reload_weights through /collective_rpc)")
    return f"weight sync: {how}; {where}"

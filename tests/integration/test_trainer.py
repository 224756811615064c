"""Two real training steps on the tiny model: TRL's AsyncGRPOTrainer + LoRA, its HarnessRolloutWorker driving
episodes on the real env server through the real capture proxy and vLLM-CPU, merged weights synced by disk.

One run (module fixture) backs the checks the issue lists; a bad task id in the dataset is the failed-episode
fault: its rollouts are unscorable and training goes on.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch

from fathom.config import load_config
from fathom.rollout_worker.dataset import training_task_ids
from fathom.trainer import merged_dir
from fathom.trainer.merged_dir import remove_tmpfs
from tests.integration.train_stack import hf_logprobs, merged_stack, served_logprobs

BAD_TASK = "nosuchfamily-1k-s1"  # the env server refuses it (404), so every rollout of its group fails


def train_config(model_dir: Path, stack, run_dir: Path, **over: object):
    args = ["--model.name", str(model_dir), "--model.max_model_len", "4096",
            "--policy_server.served_model_name", stack.served_model, "--policy_server.weight_sync", "merged",
            "--env_server.max_turns", "2", "--env_server.sub_rlm_max_turns", "2",
            "--trainer.num_generations", "4", "--trainer.max_staleness", "0", "--trainer.max_steps", "2",
            "--trainer.max_completion_tokens", "32", "--trainer.token_budget", "2048",
            "--trainer.learning_rate", "1e-3", "--trainer.save_steps", "1", "--trainer.watchdog_s", "900",
            "--trainer.lora.rank", "8", "--trainer.lora.alpha", "16", "--trainer.episode_timeout_s", "300",
            "--trainer.balance_lengths", "true",
            "--output_dir", str(run_dir.parent), "--run_name", run_dir.name]
    for k, v in over.items():
        args += [f"--{k}", str(v)]
    return load_config(None, args)


@pytest.fixture(scope="module")
def servers(train_vllm, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    with merged_stack(tmp, train_vllm.base_url, "fathom-base", tokenizer=train_vllm.model_dir) as stack:
        yield train_vllm.model_dir, stack, tmp


@pytest.fixture(scope="module")
def trained(servers):
    from fathom.trainer.build import Endpoints, build_trainer

    model_dir, stack, tmp = servers
    anchor = tmp / "anchor.jsonl"  # SFT anchor rows: 40 token ids, the last 20 trained
    anchor.write_text("".join(json.dumps({"input_ids": list(range(100 + i, 140 + i)),
                                          "labels": [-100] * 20 + list(range(120 + i, 140 + i))}) + "\n"
                              for i in range(3)))
    cfg = train_config(model_dir, stack, tmp / "runs" / "two-steps",
                       **{"trainer.sft_anchor_coef": 0.5, "trainer.sft_anchor_data": anchor})
    run = build_trainer(cfg, model_path=str(model_dir), progress=False,
                        endpoints=Endpoints(stack.vllm_url, stack.proxy_url, stack.env_url),
                        task_ids=[BAD_TASK] + training_task_ids(64, 1024))
    run.trainer.record_trained_path = str(run.run_dir / "trained_tokens.jsonl")
    old_session = httpx.post(f"{stack.proxy_url}/sessions", json={}, timeout=30).json()
    before = {k: v.detach().clone() for k, v in run.trainer.model.named_parameters()}
    try:
        run.trainer.train()
        after = {k: v.detach().clone() for k, v in run.trainer.model.named_parameters()}
        merged = run.trainer.model.merge_and_unload()
        yield {"run": run, "stack": stack, "before": before, "after": after, "old_session": old_session,
               "served": served_logprobs(stack.vllm_url, stack.served_model), "merged_lp": hf_logprobs(merged),
               "base_lp": hf_logprobs(_load(model_dir)), "cfg": cfg}
    finally:  # what `fathom train` does when it stops: the default merged_dir "auto" wrote to tmpfs
        remove_tmpfs(cfg.policy_server.merged_dir, cfg.run_dir, cfg.run_name)


def _load(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def _metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]


def _rollouts(run) -> list[dict]:
    return [json.loads(line) for line in run.rollouts_path.read_text().splitlines()]


def test_two_steps_ran_and_checkpointed(trained):
    run = trained["run"]
    assert run.trainer.state.global_step == 2
    assert (run.run_dir / "checkpoint-2" / "adapter_model.safetensors").is_file()
    assert not (run.run_dir / ".staging").exists()


def test_lora_changed_and_base_did_not(trained):
    before, after = trained["before"], trained["after"]
    lora_b = [k for k in before if "lora_B" in k]
    assert lora_b and any(not torch.equal(before[k], after[k]) for k in lora_b)
    base = [k for k in before if "lora_" not in k]
    # merge/unmerge for each sync round-trips the base through W + BA - BA: equal up to fp32 rounding
    assert max((before[k] - after[k]).abs().max().item() for k in base) < 1e-5


def test_merged_sync_changed_served_logprobs(trained):
    served, merged, base = trained["served"], trained["merged_lp"], trained["base_lp"]
    assert max(abs(a - b) for a, b in zip(served, merged)) < 1e-3
    assert max(abs(a - b) for a, b in zip(served, base)) > 1e-4


def test_merged_weights_went_to_tmpfs_and_only_the_served_copy_is_kept(trained):
    cfg, run = trained["cfg"], trained["run"]
    if not merged_dir.SHM.is_dir():
        pytest.skip(f"no {merged_dir.SHM} here: the run dir fallback is covered by tests/unit/trainer/test_merged_dir.py")
    folder = merged_dir.tmpfs_dir(cfg.run_dir, cfg.run_name)
    served = json.loads((run.run_dir / "policy_state.json").read_text())["weights_path"]
    assert Path(served).parent == folder and [p.name for p in folder.iterdir()] == [Path(served).name]
    assert not (run.run_dir / "merged").exists()


def test_each_sync_moved_the_served_logprobs_beyond_their_noise(trained):
    # the trainer's own probe (weight_sync.ServedProbe): step 2's line carries the probe of step 1's sync
    rows = [row for row in _metrics(trained["run"]) if "kl" in row]
    assert len(rows) == 2 and "sync/served_logprob_shift" not in rows[0]
    assert rows[1]["sync/served_logprob_shift"] > max(rows[1]["sync/served_logprob_noise"], 1e-4)


def test_new_sessions_pin_the_new_version_old_ones_keep_theirs(trained):
    run, stack = trained["run"], trained["stack"]
    version = run.trainer.model_version
    assert version == 3  # cold sync + one per step
    assert httpx.get(f"{stack.proxy_url}/policy", timeout=30).json()["merged_version"] == version
    new = httpx.post(f"{stack.proxy_url}/sessions", json={}, timeout=30).json()
    assert new["policy_version"] == version
    old = httpx.get(f"{stack.proxy_url}/sessions/{trained['old_session']['session_id']}", timeout=30).json()
    assert old["policy_version"] == trained["old_session"]["policy_version"] < version


def test_every_trained_token_came_from_a_capture(trained):
    run, stack = trained["run"], trained["stack"]
    captured: list[list[int]] = []
    for rec in _rollouts(run):
        if rec.get("session_id"):
            trace = httpx.get(f"{stack.proxy_url}/sessions/{rec['session_id']}/trace", timeout=30).json()
            captured += [t["completion_token_ids"] for t in trace["turns"]]
    runs = [r for line in (run.run_dir / "trained_tokens.jsonl").read_text().splitlines()
            for r in json.loads(line)["runs"]]
    assert runs
    for r in runs:
        assert any(r == c for c in captured), f"trained run of {len(r)} tokens matches no captured completion"


def test_reward_components_and_metrics_logged(trained):
    run = trained["run"]
    rollouts = _rollouts(run)
    scored = [r for r in rollouts if not r["unscorable"]]
    assert scored and all(r["reward/total"] == r["reward"] for r in scored)
    for k in ("reward/correctness", "reward/format", "reward/token_budget", "reward/recursion", "reward/tool_bonus"):
        assert all(k in r for r in scored)
    rows = [row for row in _metrics(run) if "kl" in row]  # step rows; the last line is the run summary
    assert len(rows) == 2 and all("reward/token_budget" in row for row in rows)
    assert all(k in row for row in rows for k in ("loss", "entropy", "perf/weight_sync_s", "rollout/fork_frac"))
    # our loop ran in TRL's spawned child, with the switches it was given
    assert any("rollout/flat_group_frac" in row for row in rows)
    assert any("episode/turns_mean" in row and "episode/subcalls_mean" in row for row in rows)


def test_learning_dynamics_logged_each_step(trained):
    """The per-step metrics that tell a falling training curve's causes apart reach metrics.jsonl from the real
    trainer and its spawned rollout child."""
    rows = [row for row in _metrics(trained["run"]) if "kl" in row]
    assert len(rows) == 2
    # drift from the starting adapter: a real step moves the LoRA weights, and the second moves them further
    assert 0 < rows[0]["drift/lora_delta_norm"] <= rows[1]["drift/lora_delta_norm"]
    assert all(0 < row["is_ratio/min"] <= row["ratio"] <= row["is_ratio/max"] for row in rows)
    assert all(k in row for row in rows for k in ("sample/staleness_mean", "sample/staleness_max"))
    # pushed by the rollout child for every scored group, flat or not
    assert any("rollout/group_reward_std" in row for row in rows)
    assert any(row.get("rollout/sampled_nll", 0) > 0 for row in rows)
    fams = {k for row in rows for k in row if k.startswith("train_success/")}
    assert fams and all(0 <= row[k] <= 1 for row in rows for k in fams if k in row)
    assert all("train/context_chars_mean" in row for row in rows if any(k in row for k in fams))


def test_sft_anchor_loss_logged_each_step(trained):
    rows = [row for row in _metrics(trained["run"]) if "kl" in row]
    # a random-init model on arbitrary ids: about ln(49152) = 10.8 nats a token
    assert len(rows) == 2 and all(5 < row["sft_anchor/nll"] < 20 for row in rows)


def test_mismatch_below_1e_3_in_fp32(trained):
    rows = [row for row in _metrics(trained["run"]) if "kl" in row]
    values = [row["mismatch/abs_ratio_minus_1"] for row in rows if "mismatch/abs_ratio_minus_1" in row]
    # on-policy tokens only; step 1 always has them (batches after it are formed one step ahead, see grpo.py)
    assert values and max(values) < 1e-3
    assert rows[0]["mismatch/on_policy_token_frac"] == 1.0
    # ... with each row's shared prompt forwarded once (trainer.share_prefix, on by default on CPU)
    assert any(row.get("batch/shared_prefix_frac", 0) > 0 for row in rows)
    # every sample carries whether its turns span a weight sync (those never count on-policy)
    assert all(0.0 <= row["sample/policy_versions_mixed"] <= 1.0 for row in rows)


def test_failed_episode_is_unscorable_and_training_went_on(trained):
    run = trained["run"]
    bad = [r for r in _rollouts(run) if r.get("task_id") == BAD_TASK]
    assert bad and all(r["unscorable"] and r["reward"] is None for r in bad)
    assert run.trainer.state.global_step == 2


def test_rollout_child_exited_on_its_own_with_its_episodes_cancelled(trained):
    """At the end of training TRL stops the rollout child; its live sessions cancel their episodes, so it exits
    (code 0) instead of being terminated after TRL's 15 s join. A cancelled rollout is unscorable, never 0."""
    run = trained["run"]
    assert run.trainer.rollout_worker.exitcode == 0
    cancelled = [r for r in _rollouts(run) if r.get("stop_reason") == "cancelled"]
    assert all(r["reward"] is None and r["unscorable"] for r in cancelled)


@pytest.mark.slow  # two more trainer processes: about 3.5 minutes on 2 cores
def test_resume_after_kill_continues_step_count_adapter_and_optimizer(servers, trained):
    """`fathom train` killed (whole process group, like a lost machine) after its first checkpoint; `--resume`
    picks up that checkpoint and finishes. Runs after the two-step run, on the same servers."""
    import os
    import signal
    import time

    from fathom.stack.supervisor import tail
    from tests.integration.env_server_stack import FATHOM, supervisor

    model_dir, stack, tmp = servers
    run_dir = tmp / "runs" / "resume"
    cfg = tmp / "resume.toml"
    cfg.write_text(
        f'run_name = "resume"\noutput_dir = "{run_dir.parent}"\n[model]\nname = "{model_dir}"\n'
        f'[policy_server]\nweight_sync = "merged"\nenable_lora = false\n[env_server]\nmax_turns = 2\n'
        f'sub_rlm_max_turns = 2\n[trainer]\nnum_generations = 4\nmax_staleness = 1\nmax_steps = 3\n'
        f'max_completion_tokens = 32\nlearning_rate = 1e-3\nsave_steps = 1\nsave_total_limit = 5\n'
        f'train_split_size = 64\ntrain_max_length = 1024\n[trainer.lora]\nrank = 8\nalpha = 16\n')
    args = [FATHOM, "train", "--config", str(cfg), "--vllm-url", stack.vllm_url, "--proxy-url", stack.proxy_url,
            "--env-url", stack.env_url, "--no-progress"]
    with supervisor(tmp / "trainers") as sup:
        first = sup.spawn("train1", args)
        deadline = time.monotonic() + 600
        while not (run_dir / "checkpoint-1").exists():
            assert first.alive(), tail(first.log_path, 40)
            assert time.monotonic() < deadline, "no checkpoint-1 within 600 s"
            time.sleep(0.5)
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait(timeout=30)
        sup.stop("train1")
        done_before = sorted(int(p.name.split("-")[1]) for p in run_dir.glob("checkpoint-*"))
        second = sup.spawn("train2", args + ["--resume"])
        assert second.proc.wait(timeout=900) == 0, tail(second.log_path, 40)
    log2 = second.log_path.read_text()
    state = json.loads((run_dir / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    resumed_from = done_before[-1]
    assert f"checkpoint-{resumed_from}" in log2
    steps2 = [json.loads(x)["step"] for x in (tmp / "runs" / "resume" / "metrics.jsonl").read_text().splitlines()]
    # the second process logged only the steps after its checkpoint: nothing before it was redone
    assert steps2[-1] == 3 and steps2.count(1) == 1
    ckpt = run_dir / f"checkpoint-{resumed_from}"
    assert (ckpt / "optimizer.pt").is_file() and (ckpt / "adapter_model.safetensors").is_file()
    rollout_state = json.loads((ckpt / "rollout_state.json").read_text())
    assert rollout_state["model_version"] >= 1

"""run_eval_watch.sh: its dry run prints the command and the watcher's plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "run_eval_watch.sh"


def dry_run(**env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("CHECKPOINTS", "EVAL_OUT", "STOP_AT_STEP")}
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120,
                          env=base | {"DRY_RUN": "1", "FATHOM_PYTHON": sys.executable,
                                      "PYTHONPATH": str(ROOT)} | env)


def test_dry_run_prints_the_command_and_plan_and_starts_nothing(tmp_path):
    r = dry_run(FATHOM_CONFIG="configs/eval/qwen1.5b-a100.toml", EVAL_TASKS="50", STOP_AT_STEP="500",
                IDLE_EXIT_S="3600", EVAL_OUT=str(tmp_path / "ev"), FATHOM_OVERRIDES="--eval.watch_poll_s 5")
    assert r.returncode == 0, r.stderr
    install, first, rest = r.stdout.split("\n", 2)
    assert install == "+ make setup-gpu"  # the pinned install, never pip into the image's Python
    assert first.startswith("+ ") and "eval watch --config configs/eval/qwen1.5b-a100.toml" in first
    assert "--checkpoints /data/runs/qwen1.5b-a100" in first and "--start" in first
    assert "--stop-at-step 500" in first and "--eval.watch_poll_s 5" in first
    plan = json.loads(rest)
    assert plan == plan | {"source": "/data/runs/qwen1.5b-a100", "out": str(tmp_path / "ev"), "split": "heldout",
                           "tasks": 60, "poll_s": 5.0, "start_stack": True, "stop_at_step": 500, "idle_exit_s": 3600.0}
    assert not (tmp_path / "ev").exists()


def test_dry_run_hub_source_and_bad_config_fails_loudly():
    r = dry_run(FATHOM_CONFIG="configs/eval/smoke.toml", CHECKPOINTS="hf://someone/fathom-adapters")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.split("\n", 2)[2])["source"] == "hf://someone/fathom-adapters"
    r = dry_run(FATHOM_CONFIG="configs/eval/missing.toml", CHECKPOINTS="runs/x")
    assert r.returncode != 0 and "configs/eval/missing.toml" in r.stderr

#!/usr/bin/env bash
# GPU check on one GPU machine: install, 3 GRPO steps of the production config (merged NCCL sync), then one JSON
# object: merged sync seconds, step time, trainer/sampler mismatch, and whether the served logprobs moved.
#   bash bench/gpu_smoke.sh            # STEPS=3 RUN_NAME=gpu-smoke CONFIG=configs/qwen1.5b-a100.toml
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-3}
RUN_NAME=${RUN_NAME:-gpu-smoke}
CONFIG=${CONFIG:-configs/qwen1.5b-a100.toml}

make setup-gpu >&2
# SFT and eval are skipped: this checks GRPO steps and the NCCL sync only.
.venv/bin/python -m fathom.entrypoints.cli launch "$CONFIG" --launch.stages '["grpo"]' \
  --trainer.max_steps "$STEPS" --trainer.save_steps "$STEPS" --run_name "$RUN_NAME" --output_dir runs >&2
.venv/bin/python bench/gpu_smoke_report.py "runs/$RUN_NAME"

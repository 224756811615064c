#!/usr/bin/env bash
# HF Jobs entrypoint (a100-large): install, then the main job, then push the adapter and eval results.
#
# `fathom launch` starts vLLM, then the capture proxy and env server, then the trainer with its
# stall watchdog, and stops them all on exit. Settings come from the environment:
#   CONFIG          config file                          (configs/qwen1.5b-a100.toml)
#   MAX_STEPS       GRPO optimizer steps                 (the config's trainer.max_steps)
#   ADAPTER_REPO    Hub model repo for the final adapter (empty: no push)
#   CHECKPOINT_DIR  mounted bucket the run is copied to  (the config's launch.bucket_dir); the run itself stays
#                   on local disk (output_dir) and the bucket gets complete files, checkpoints as they are saved
#   RUN_NAME        run name                             (the config's run_name)
#   DRY_RUN=1       print the plan, run nothing
# HF_TOKEN comes in as a job secret and is never printed.
set -euo pipefail
cd "$(dirname "$0")"

CONFIG=${CONFIG:-configs/qwen1.5b-a100.toml}
MAX_STEPS=${MAX_STEPS:-}
ADAPTER_REPO=${ADAPTER_REPO:-}
CHECKPOINT_DIR=${CHECKPOINT_DIR:-}
RUN_NAME=${RUN_NAME:-}
DRY_RUN=${DRY_RUN:-0}
PY=${PY:-.venv/bin/python}

overrides=()
[[ -n "$MAX_STEPS" ]] && overrides+=(--trainer.max_steps "$MAX_STEPS")
[[ -n "$CHECKPOINT_DIR" ]] && overrides+=(--launch.bucket_dir "$CHECKPOINT_DIR")
[[ -n "$RUN_NAME" ]] && overrides+=(--run_name "$RUN_NAME")

run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

echo "== 1. install (the trainer's GPU install path; its first step checks the driver)"
run make setup-gpu

echo "== 1b. fathom doctor --gpu: driver, CUDA build, both venvs, vLLM, the weight sync's needs, sandbox, disk"
run "$PY" -m fathom.entrypoints.cli doctor --gpu -c "$CONFIG" "${overrides[@]}"

echo "== 2-5. fathom launch: vLLM, then the proxy and env server, then GRPO with its stall watchdog, then eval"
if [[ "$DRY_RUN" == 1 && -x "$PY" ]]; then
  "$PY" -m fathom.entrypoints.cli launch "$CONFIG" --dry-run "${overrides[@]}" | sed 's/^/    /'
fi
run "$PY" -m fathom.entrypoints.cli launch "$CONFIG" "${overrides[@]}"

echo "== 6. push the final adapter and eval results"
if [[ -z "$ADAPTER_REPO" ]]; then
  echo "ADAPTER_REPO is empty: nothing is pushed"
else
  run_dir="<output_dir>/<run_name>"  # a dry run on a fresh checkout has no venv to resolve it
  if [[ -x "$PY" ]]; then
    run_dir=$("$PY" -m fathom.entrypoints.cli config show -c "$CONFIG" "${overrides[@]}" |
      "$PY" -c 'import json, sys; c = json.load(sys.stdin); print(c["output_dir"] + "/" + c["run_name"])')
  fi
  run "$PY" -m fathom.entrypoints.cli export "$run_dir" --push "$ADAPTER_REPO"
fi

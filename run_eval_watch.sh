#!/usr/bin/env bash
# HF Jobs entrypoint of the per-checkpoint eval job that runs beside training:
# install, then one `fathom eval watch --start`, which starts vLLM (LoRA on), the capture proxy and
# the env server, and scores each new checkpoint-N of the run as it appears.
#
# Settings (environment):
#   FATHOM_CONFIG   config file               (default configs/eval/qwen1.5b-a100.toml)
#   CHECKPOINTS     run dir, checkpoints dir or hf://owner/repo   (default: the config's run dir)
#   EVAL_OUT        output dir                (default: {run_dir}/eval)
#   EVAL_TASKS      fixed subset size         (default: eval.watch_tasks of the config, 100)
#   STOP_AT_STEP    exit once this step is scored          (default: run forever)
#   IDLE_EXIT_S     exit after this long with no new checkpoint  (default: never)
#   FATHOM_PYTHON   interpreter with fathom installed      (default: .venv/bin/python, which `make setup-gpu` builds)
#   FATHOM_OVERRIDES  extra `--section.key value` overrides, space separated
#   DRY_RUN=1       print what would run and the watcher's plan; start nothing
set -euo pipefail
cd "$(dirname "$0")"

FATHOM_CONFIG="${FATHOM_CONFIG:-configs/eval/qwen1.5b-a100.toml}"
CHECKPOINTS="${CHECKPOINTS:-}"
EVAL_OUT="${EVAL_OUT:-}"
EVAL_TASKS="${EVAL_TASKS:-}"
STOP_AT_STEP="${STOP_AT_STEP:-}"
IDLE_EXIT_S="${IDLE_EXIT_S:-}"
FATHOM_PYTHON="${FATHOM_PYTHON:-.venv/bin/python}"
FATHOM_OVERRIDES="${FATHOM_OVERRIDES:-}"
DRY_RUN="${DRY_RUN:-0}"

run() {
  if [[ "$DRY_RUN" == "1" ]]; then
    printf '+'; printf ' %q' "$@"; printf '\n'
  else
    "$@"
  fi
}

# Install as run_job.sh does: the driver check, then both venvs on one pinned CUDA build. Never into the image's own
# Python, whose torch, transformers and mcp are the image's choice (Makefile, setup-gpu).
run make setup-gpu

if [[ -z "$CHECKPOINTS" ]]; then
  CHECKPOINTS="$("$FATHOM_PYTHON" -c "import sys; from fathom.config import load_config; print(load_config(sys.argv[1]).run_dir)" "$FATHOM_CONFIG")"
fi

args=(eval watch --config "$FATHOM_CONFIG" --checkpoints "$CHECKPOINTS")
[[ -n "$EVAL_OUT" ]] && args+=(--out "$EVAL_OUT")
[[ -n "$EVAL_TASKS" ]] && args+=(--n "$EVAL_TASKS")
[[ -n "$STOP_AT_STEP" ]] && args+=(--stop-at-step "$STOP_AT_STEP")
[[ -n "$IDLE_EXIT_S" ]] && args+=(--idle-exit-s "$IDLE_EXIT_S")
read -r -a overrides <<< "$FATHOM_OVERRIDES"

if [[ "$DRY_RUN" == "1" ]]; then
  run "$FATHOM_PYTHON" -m fathom.entrypoints.cli "${args[@]}" --start "${overrides[@]}"
  # The watcher's own plan (config, source, subset, URLs) without starting or contacting anything.
  exec "$FATHOM_PYTHON" -m fathom.entrypoints.cli "${args[@]}" --start --dry-run "${overrides[@]}"
fi
exec "$FATHOM_PYTHON" -m fathom.entrypoints.cli "${args[@]}" --start "${overrides[@]}"

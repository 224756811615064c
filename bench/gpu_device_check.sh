#!/usr/bin/env bash
# GPU check for a machine with one GPU, torch, transformers and peft, but no vLLM, no TRL and no network (a lent
# device box; at most 64 MiB come with the tree). In a few minutes it checks what such a machine can of the one-GPU
# GRPO path (bench/gpu_device_check.py): TRL's AsyncGRPOTrainer taking bf16 LoRA steps on the GPU, the disk weight
# sync between two processes on the one GPU, bit for bit, and the attention fallback. Prints one JSON with targets.
#
#   make device-check-wheels          # here, with the package index: TRL's pure-Python wheel into bench/wheels/
#   bash bench/gpu_device_check.sh    # there; STEPS=3 DEVICE=cuda PY=python3
#   DRY_RUN=1 bash bench/gpu_device_check.sh   # print what would run
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
STEPS=${STEPS:-3}
DEVICE=${DEVICE:-cuda}
DRY_RUN=${DRY_RUN:-0}
TRL_WHEEL=${TRL_WHEEL:-bench/wheels/trl-1.15.0-py3-none-any.whl}

if [[ ! -f "$TRL_WHEEL" ]]; then
  echo "{\"error\": \"$TRL_WHEEL is missing: run \`make device-check-wheels\` where the package index is reachable, and bring bench/wheels along\", \"targets\": []}"
  exit 1
fi
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
# A wheel is a zip: unpacked, TRL imports from there without pip, network or an install into the machine's Python.
run() {
  if [[ "$DRY_RUN" == 1 ]]; then printf '+'; printf ' %q' "$@"; printf '\n'; else "$@"; fi
}
run "$PY" -m zipfile -e "$TRL_WHEEL" "$site"
# Packages TRL imports at module level that such a machine may lack and that cannot come with the tree (datasets
# needs pyarrow): an import stand-in each, named in the report, from bench/device_shims.
shims=()
for mod in datasets aiohttp; do
  if [[ "$DRY_RUN" != 1 ]] && ! "$PY" -c "import $mod" 2>/dev/null; then
    shims+=("$mod")
    mkdir -p "$site/device_shims"
    cp -r "bench/device_shims/$mod" "$site/device_shims/"
  fi
done
# The weight sync's HTTP client: from the machine when it has httpx (transformers 5 brings it), else the wheels.
extra=""
if [[ "$DRY_RUN" != 1 ]] && ! "$PY" -c "import httpx" 2>/dev/null; then
  for w in bench/wheels/httpx/*.whl; do "$PY" -m zipfile -e "$w" "$site/httpx"; done
  extra=":$site/httpx"
  echo "httpx from bench/wheels/httpx" >&2
fi
export PYTHONPATH="$PWD:$site:$site/device_shims$extra${PYTHONPATH:+:$PYTHONPATH}"
# No network: the Hub kernel lookup must fail at once (the fallback under test), not retry for a minute.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRL_EXPERIMENTAL_SILENCE=1
[[ ${#shims[@]} -gt 0 ]] && echo "import stand-ins for what this machine lacks: ${shims[*]}" >&2
run timeout 480 "$PY" bench/gpu_device_check.py --device "$DEVICE" --steps "$STEPS"

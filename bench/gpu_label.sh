#!/usr/bin/env bash
# GPU check for the agent loop (issue 18): the nano policy (trained here from scratch, ~1 min)
# through vLLM on the GPU, asynchronous episodes against turn-by-turn, and the loop against bare
# generate. Run on a GPU machine from the repo root:  bash bench/gpu_label.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
nvidia-smi --query-gpu=name,memory.total --format=csv || true
$PY bench/agent_loop.py --backend vllm --questions 128 --k 8 --tool-seconds 0.3 --tool-workers 64 --repeats 2

#!/usr/bin/env bash
# GPU check for labelling: a random-weight model of a realistic size (Qwen3-0.6B-like config,
# built locally, no download) through the agent loop with vLLM where it is installed, else
# transformers. Run on a GPU machine from the repo root:  bash bench/gpu_label.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-/tmp/gpu-label}
mkdir -p "$OUT"
$PY - "$OUT" <<'PY'
import sys, torch
from pathlib import Path
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
from pipeline.rollout.tiny_model import build_tiny_model
out = Path(sys.argv[1]) / "qwen-0.6b-random"
if not (out / "config.json").exists():
    build_tiny_model(out)  # tokenizer + template; the weights are replaced below
    tok = AutoTokenizer.from_pretrained(out)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                      num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=8192,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    Qwen2ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)
print(out)
PY
nvidia-smi --query-gpu=name,memory.total --format=csv || true
$PY bench/label.py --model "$OUT/qwen-0.6b-random" --backend auto --questions 128 --k 8 --max-tokens 256 --sandbox-calls 40

#!/usr/bin/env bash
# GPU check for training: a random-weight model of about 0.5 B parameters (Qwen2.5-0.5B-like
# dimensions, built locally, no download), GRPO-TCR steps with rollout and update timings,
# tokens/s and peak memory. Run on a GPU machine from the repo root:  bash bench/gpu_train.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-/tmp/gpu-train}
mkdir -p "$OUT"
$PY - "$OUT" <<'PY'
import sys, time, torch
from pathlib import Path
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
from pipeline.rollout.agent import AgentConfig
from pipeline.rollout.tiny_model import build_tiny_model
from trainer.train import TrainConfig, train
out = Path(sys.argv[1])
model_dir = out / "qwen-0.5b-random"
if not (model_dir / "config.json").exists():
    build_tiny_model(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                      num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=8192,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    m = Qwen2ForCausalLM(cfg)
    print(f"parameters: {sum(p.numel() for p in m.parameters()) / 1e9:.2f} B")
    m.save_pretrained(model_dir)
prompts = [{"question_id": f"q{i}", "question": f"What is {i} times {i + 7}?", "ground_truth": str(i * (i + 7)), "answer_type": "integer"} for i in range(512)]
torch.cuda.reset_peak_memory_stats()
t0 = time.time()
hist = train(TrainConfig(model=str(model_dir), out=str(out / "run"), steps=10, prompts_per_step=16, group_size=8, lr=1e-6,
                         max_tokens=256, agent=AgentConfig(max_turns=2, max_response_tokens=512), rollout_backend="vllm"), prompts)
for h in hist:
    print({k: round(v, 4) if isinstance(v, float) else v for k, v in h.items() if k in ("step", "step_time", "tokens_per_s", "reward_mean", "entropy")})
print(f"total {time.time() - t0:.1f}s, peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
PY

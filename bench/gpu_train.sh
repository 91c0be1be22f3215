#!/usr/bin/env bash
# GPU check for training: a random-weight model of about 0.5 B parameters (Qwen2.5-0.5B-like
# dimensions, built locally, no download), GRPO-TCR steps with multi-turn tool rollouts on a
# colocated vLLM engine per rank, TIS, tokens/s, step time and peak memory; on 1 GPU, then on N
# (torchrun, one rank per GPU) when the machine has more than one. From the repo root:
#   bash bench/gpu_train.sh              # NGPU defaults to every GPU nvidia-smi lists
#   NGPU=1 STEPS=5 bash bench/gpu_train.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-/tmp/gpu-train}
STEPS=${STEPS:-10}
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}
mkdir -p "$OUT"
cat > "$OUT/gpu_train.py" <<'PY'
import json, os, sys, time, torch
from pathlib import Path
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
from pipeline.rollout.tiny_model import build_tiny_model
from trainer.train import TrainConfig, agent_config, train
out, steps = Path(sys.argv[1]), int(sys.argv[2])
rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
model_dir = out / "qwen-0.5b-random"
if rank == 0 and not (model_dir / "config.json").exists():
    build_tiny_model(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                      num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=8192,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    m = Qwen2ForCausalLM(cfg)
    print(f"parameters: {sum(p.numel() for p in m.parameters()) / 1e9:.2f} B", flush=True)
    m.save_pretrained(model_dir)
while not (model_dir / "model.safetensors").exists():
    time.sleep(1)
prompts = [{"question_id": f"q{i}", "question": f"What is {i} times {i + 7}?", "ground_truth": str(i * (i + 7)), "answer_type": "integer"} for i in range(512)]
torch.cuda.reset_peak_memory_stats()
t0 = time.time()
cfg = TrainConfig(model=str(model_dir), out=str(out / f"run-{world}gpu"), steps=steps, prompts_per_step=16,
                  group_size=8, lr=1e-6, max_tokens=256, agent=agent_config(None, max_turns=2),
                  rollout_backend="vllm", vllm_gpu_memory=0.4)
hist = train(cfg, prompts)
keys = ("step", "step_time", "tokens_per_s", "reward_mean", "entropy", "logp_mismatch_mean", "logp_mismatch_max", "tis_weight_mean", "tool_calls")
if rank == 0:
    for h in hist:
        print(json.dumps({k: round(h[k], 4) if isinstance(h.get(k), float) else h.get(k) for k in keys}), flush=True)
print(f"rank {rank}/{world}: total {time.time() - t0:.1f}s, peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
PY
echo "== 1 GPU"
$PY "$OUT/gpu_train.py" "$OUT" "$STEPS"
if [ "$NGPU" -gt 1 ]; then
  echo "== $NGPU GPUs (torchrun)"
  $PY -m torch.distributed.run --nproc_per_node "$NGPU" "$OUT/gpu_train.py" "$OUT" "$STEPS"
fi

"""The trainer's behaviour, fingerprinted: a few seeded GRPO-TCR steps on a tiny model (dynamic
sampling and dual clip on, two mini-batches) print their metrics (less the timings) and a hash
of the weights. Run before and after a change of the trainer's code: equal lines, equal
behaviour.

    python bench/train_equality.py [--steps 3] > before.txt   # ... change ...
    python bench/train_equality.py [--steps 3] > after.txt && diff before.txt after.txt
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TIMINGS = {"step_time", "tokens_per_s"}


def main() -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from pipeline.demo.tiny_model import build_tiny_model
    from pipeline.rollout.agent import AgentConfig
    from trainer.train import TrainConfig, train

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="train-eq-"))
    model = build_tiny_model(work / "m", hidden=64, heads=2, kv_heads=1)
    half = len(AutoTokenizer.from_pretrained(model)) // 2

    def reward(e, q):  # dense: the share of tokens from the lower half of the vocabulary
        pol = [t for t, m in zip(e.response_ids, e.mask, strict=True) if m]
        return sum(t < half for t in pol) / max(1, len(pol))

    prompts = [{"question_id": f"q{i}", "question": f"Say something about {i}."} for i in range(16)]
    agent = AgentConfig(max_turns=1, max_response_tokens=16, sandbox_workers=0)
    cfg = TrainConfig(
        model=str(model), out=str(work / "run"), agent=agent, use_overlong=False,
        rollout_backend="transformers", steps=args.steps, prompts_per_step=4, group_size=4,
        lr=3e-3, max_tokens=16, minibatches=2, dynamic_sampling=True, dual_clip=3.0,
        dynamic_sampling_on="reward",
    )  # fmt: skip
    for m in train(cfg, prompts, reward):
        print(json.dumps({k: v for k, v in m.items() if k not in TIMINGS}, sort_keys=True))
    weights = load_file(str(work / "run" / "checkpoint-latest" / "model.safetensors"))
    h = hashlib.sha256()
    for k in sorted(weights):
        h.update(k.encode() + weights[k].numpy().tobytes())
    print("weights", h.hexdigest())


if __name__ == "__main__":
    main()

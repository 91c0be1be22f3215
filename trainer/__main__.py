"""``torchrun --nproc_per_node N -m trainer --dataset D --model M --out O [...]``: the same
GRPO-TCR loop on N processes (DDP; gloo on CPU, nccl on GPU)."""

from __future__ import annotations

import argparse
import os

# torch's C++ warnings (NUMA binding at every vLLM CPU engine start): before torch loads
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from trainer.train import ROLLOUT_BACKENDS, TOOLS, TrainConfig, agent_config, train


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m trainer")
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--rollout-backend", default="auto", choices=list(ROLLOUT_BACKENDS))
    ap.add_argument("--max-turns", type=int, default=4, help="agent turns (tool calls) per episode")
    ap.add_argument("--tools", default="python", choices=list(TOOLS))
    ap.add_argument(
        "--adaptive",
        action="store_true",
        help="adaptive difficulty: retire mastered questions, back off failing ones (each rank "
        "tracks its share of the questions)",
    )
    a = ap.parse_args()
    train(
        TrainConfig(
            model=a.model,
            dataset=a.dataset,
            out=a.out,
            steps=a.steps,
            prompts_per_step=a.prompts_per_step,
            group_size=a.group_size,
            lr=a.lr,
            max_tokens=a.max_tokens,
            rollout_backend=a.rollout_backend,
            agent=agent_config(a.dataset, a.max_turns, a.tools),
            adaptive=a.adaptive,
        )
    )


if __name__ == "__main__":
    main()

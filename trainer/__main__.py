"""``torchrun --nproc_per_node N -m trainer --dataset D --model M --out O [...]``: the same
GRPO-TCR loop on N processes (DDP; gloo on CPU, nccl on GPU)."""

from __future__ import annotations

import argparse
import os

# torch's C++ warnings (NUMA binding at every vLLM CPU engine start): before torch loads
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from pipeline.rollout.policy_loop import turn_tokens  # noqa: E402
from trainer.train import ROLLOUT_BACKENDS, TOOLS, TrainConfig, agent_config, train  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m trainer")
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument(
        "--max-tokens", type=int, help="tokens per turn (default: the policy's own, else 256)"
    )
    ap.add_argument("--rollout-backend", default="auto", choices=list(ROLLOUT_BACKENDS))
    ap.add_argument(
        "--max-turns",
        type=int,
        help="agent turns (tool calls) per episode (default: the loop the policy was trained "
        "with, its agent_loop.json, else 4)",
    )
    ap.add_argument("--tools", choices=list(TOOLS), help="default: the policy's own, else python")
    ap.add_argument("--minibatches", type=int, default=TrainConfig.minibatches)
    ap.add_argument("--ppo-epochs", type=int, default=TrainConfig.ppo_epochs)
    ap.add_argument("--seed", type=int, default=TrainConfig.seed)
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
            max_tokens=turn_tokens(a.model, a.max_tokens, 256),
            rollout_backend=a.rollout_backend,
            agent=agent_config(a.dataset, a.max_turns, a.tools, a.model),
            adaptive=a.adaptive,
            minibatches=a.minibatches,
            ppo_epochs=a.ppo_epochs,
            seed=a.seed,
        )
    )


if __name__ == "__main__":
    main()

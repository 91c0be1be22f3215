"""``torchrun --nproc_per_node N -m trainer --dataset D --model M --out O [...]``: the same
GRPO-TCR loop on N processes (DDP; gloo on CPU, nccl on GPU), with ``flow train``'s options,
derived from the same ``TrainConfig`` fields."""

from __future__ import annotations

import os

# torch's C++ warnings (NUMA binding at every vLLM CPU engine start): before torch loads
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

import typer  # noqa: E402

from flows.options import configured  # noqa: E402
from trainer.config import COMMAND_LINE, TrainConfig  # noqa: E402

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
@configured(TrainConfig, *COMMAND_LINE, required=("dataset",))
def main(config: TrainConfig) -> None:
    """GRPO-TCR on a dataset's RL split, on every process torchrun starts (resumes from
    OUT/checkpoint-latest)."""
    from trainer.train import train

    train(config)


if __name__ == "__main__":
    app(prog_name="python -m trainer")

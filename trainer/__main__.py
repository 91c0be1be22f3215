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
    import sys

    from trainer.train import train

    def progress(m: dict) -> None:  # one line a step from rank 0: a long run is never silent
        if os.environ.get("RANK", "0") == "0":
            print(
                f"train step {m['step']}/{config.steps}: reward {m['reward_mean']:.3f}, "
                f"accuracy {m['accuracy']:.3f}, {m['step_time']:.1f} s",
                file=sys.stderr,
                flush=True,
            )

    train(config, on_step=progress)


if __name__ == "__main__":
    app(prog_name="python -m trainer")

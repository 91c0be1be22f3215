"""The ``sft`` flow: supervised fine-tuning on a published dataset's SFT split (the policy that
RL starts from); the loss curve as an artifact."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.local_server import install as install_server_watchdog
from flows.progress import report
from trainer.sft import SFTTrainConfig, sft
from trainer.train import agent_config

install_server_watchdog()  # the local server Prefect starts for this flow dies with us


@task(name="sft", cache_policy=NO_CACHE)
def sft_task(config: SFTTrainConfig) -> list[dict]:
    return sft(config, on_step=lambda m: report("sft", m))


@flow(name="sft")
def sft_flow(
    dataset: str,
    out: str,
    model: str | None = None,
    steps: int = 300,
    batch_size: int = 32,
    lr: float | None = None,
    max_turns: int = 4,
    tools: str = "python",
) -> dict:
    """SFT of ``model`` (None: the nano policy, from scratch) on ``dataset``'s SFT split, with
    the prompt and tool rendering RL will use (the dataset's system prompt, ``max_turns``)."""
    config = SFTTrainConfig(
        out=out,
        model=model,
        dataset=dataset,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        agent=agent_config(dataset, max_turns, tools),
    )
    history = sft_task(config)
    lines = [
        "# SFT",
        "",
        f"dataset `{dataset}`, model `{model or 'nano (from scratch)'}`, {len(history)} steps; "
        f"checkpoint `{out}/checkpoint-latest`",
        "",
        "| step | loss | tokens | lr |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {h['step']} | {h['loss']:.4f} | {h['tokens']} | {h['lr']:.2e} |"
        for h in history[:: max(1, len(history) // 20)]
    ]
    create_markdown_artifact(key="sft", markdown="\n".join(lines), description=f"SFT on {dataset}")
    return {
        "out": out,
        "steps": len(history),
        "first": history[0] if history else None,
        "last": history[-1] if history else None,
    }

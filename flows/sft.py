"""The ``sft`` flow: supervised fine-tuning on a published dataset's SFT split, or straight on
the lake's correct trajectories (the main job's SFT stage, before anything is labelled): the
policy RL starts from; the loss curve as an artifact."""

from __future__ import annotations

from dataclasses import replace

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.local_server import install as install_server_watchdog
from flows.progress import report
from pipeline.build import lake_sft_rows
from trainer.sft import SFTTrainConfig, run_key, sft

install_server_watchdog()  # the local server Prefect starts for this flow dies with us


@task(name="sft", cache_policy=NO_CACHE)
def sft_task(config: SFTTrainConfig, lake: str | None = None) -> dict:
    rows = lake_sft_rows(lake, config.agent.system_prompt) if lake else None
    if rows is not None and not rows:
        raise ValueError(f"no correct, complete trajectory in the lake {lake} to fine-tune on")
    if lake:
        config = replace(config, out=config.out.replace("{key}", run_key(rows, config)))
    history = sft(config, rows, on_step=lambda m: report("sft", {**m, "steps": config.steps}))
    return {"out": config.out, "history": history, "rows": len(rows) if rows else None}


@flow(name="sft")
def sft_flow(config: SFTTrainConfig, lake: str | None = None) -> dict:
    """SFT of ``config.model`` (None: the nano policy, from scratch) on ``config.dataset``'s SFT
    split, or on the lake's correct trajectories (``lake``; ``{key}`` in ``config.out`` becomes
    the data and config's key), with the prompt and tool rendering RL will use."""
    if (config.dataset is None) == (lake is None):
        raise ValueError("give a dataset folder or a lake, not both")
    run = sft_task(config, lake)
    out, history = run["out"], run["history"]
    lines = [
        "# SFT",
        "",
        f"{config.dataset or lake}, model `{config.model or 'nano (from scratch)'}`, {len(history)} steps "
        f"run now; checkpoint `{out}/checkpoint-latest`",
        "",
        "| step | loss | tokens | lr |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {h['step']} | {h['loss']:.4f} | {h['tokens']} | {h['lr']:.2e} |"
        for h in history[:: max(1, len(history) // 20)]
    ]
    create_markdown_artifact(
        key="sft", markdown="\n".join(lines), description=f"SFT on {config.dataset or lake}"
    )
    return {
        "out": out,
        "policy": f"{out}/checkpoint-latest",
        "steps": len(history),
        "state": "Completed" if history else "Cached",
        "first": history[0] if history else None,
        "last": history[-1] if history else None,
        "rows": run["rows"],
    }

"""The ``train`` flow: GRPO-TCR on a published dataset, evaluated before and after on a held-out
question set through the same agent loop; training curves as an artifact."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.local_server import install as install_server_watchdog
from flows.progress import report
from pipeline.evaluate.alarms import alarms
from trainer.train import TrainConfig, train

install_server_watchdog()  # the local server Prefect starts for this flow dies with us


@task(name="grpo-tcr", cache_policy=NO_CACHE)
def train_task(config: TrainConfig, held_out: list[dict] | None = None) -> list[dict]:
    return train(
        config, on_step=lambda m: report("train", {**m, "steps": config.steps}), held_out=held_out
    )


@task(name="evaluate", cache_policy=NO_CACHE)
def eval_task(model: str, questions: list[dict], k: int, config: TrainConfig) -> dict:
    """avg@k of ``model`` through the loop and the sampling the run trains with."""
    from pipeline.evaluate import evaluate
    from pipeline.rollout.engines import Sampling, make_engine

    sampling = Sampling(
        config.temperature, config.top_p, config.max_tokens, config.seed, config.top_k
    )
    return evaluate(
        make_engine(model, "transformers"), questions, k=k, config=config.agent, sampling=sampling
    )


@flow(name="train")
def train_flow(
    config: TrainConfig,
    eval_questions: list[dict] | None = None,
    lake: str | None = None,
    eval_set: str | None = None,
) -> dict:
    """Train ``config.model`` on ``config.dataset``'s RL split; checkpoints and metrics under
    ``config.out``; with held-out ``eval_questions``, average@k / maj@k / pass@k
    (k = ``config.eval_k``) before and after training, kept in ``lake``'s evals table as
    ``eval_set``."""
    model, out, dataset, eval_k = config.model, config.out, config.dataset, config.eval_k
    before = eval_task(model, eval_questions, eval_k, config) if eval_questions else None
    history = train_task(config, eval_questions if config.eval_every else None)
    after = (
        eval_task(f"{out}/checkpoint-latest", eval_questions, eval_k, config)
        if eval_questions
        else None
    )
    if lake and eval_set and before is not None:  # kept in the lake's evals table
        from pipeline.evaluate import record
        from pipeline.lake import Lake

        record(Lake(lake), before, model, "sft", eval_set)
        record(Lake(lake), after, f"{out}/checkpoint-latest", "grpo", eval_set)
    done = [h for h in history if "reward_mean" in h]
    lines = [
        "# Training",
        "",
        f"dataset `{dataset}`, model `{model}`, {len(done)} steps; checkpoint `{out}/checkpoint-latest`",
        "",
        "| step | reward | accuracy | entropy | clip high | kl | tokens/s |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {h['step']} | {h['reward_mean']:.3f} | {h['accuracy']:.3f} | {h['entropy']:.3f} | {h['clip_frac_high']:.3f} | {h['approx_kl']:.4f} | {h['tokens_per_s']:.0f} |"
        for h in done[:: max(1, len(done) // 20)]
    ]
    if before is not None:
        names = [k for k in before if "@" in k and isinstance(before[k], float)]
        lines += ["", "| evaluation | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        lines += [
            f"| {tag} | " + " | ".join(f"{r[k]:.3f}" for k in names) + " |"
            for tag, r in (("before", before), ("after", after))
        ]
    # reward hacking: the reward against held-out accuracy (before and after) and the
    # training accuracy, tool calls and format
    held = None
    if before is not None:
        main = f"average@{before['k']}"
        held = [(0, before[main]), (len(done), after[main])]
    rang = [asdict(a) for a in alarms(done, held)]
    lines += ["", "## Reward-hacking alarms", ""]
    lines += [f"* **{a['name']}**: {a['message']}" for a in rang] or ["none rang"]
    live = [h for h in done if "adaptive_pool" in h]
    if live:  # adaptive difficulty: the pool in play, retired and backed off, as it moved
        lines += ["", "## Adaptive difficulty", "",
                  "| step | easy | medium | hard | retired | backed off | entropy (bits) |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        lines += [
            f"| {h['step']} | " + " | ".join(str(h["adaptive_pool"][b]) for b in ("easy", "medium", "hard"))
            + f" | {h['adaptive_retired']} | {h['adaptive_backed_off']} | {h['adaptive_entropy_bits']:.2f} |"
            for h in live[:: max(1, len(live) // 20)]
        ]  # fmt: skip
    create_markdown_artifact(
        key="training", markdown="\n".join(lines), description=f"GRPO-TCR on {dataset}"
    )
    return {
        "out": out,
        "state": "Completed" if done else "Cached",  # a finished run resumed: nothing to do
        "steps": len(done),
        "last": done[-1] if done else None,
        "stopped": next((h["stopped"] for h in history if "stopped" in h), None),
        "eval_before": before,
        "eval_after": after,
        "alarms": rang,
        "best": _best(out),
    }


def _best(out: str) -> dict | None:
    """The checkpoint kept for its held-out accuracy (``eval_every``), if any."""
    import json
    from pathlib import Path

    record = Path(out) / "checkpoint-best" / "held_out.json"
    return (
        json.loads(record.read_text()) | {"path": str(record.parent)} if record.exists() else None
    )

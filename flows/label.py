"""The ``label`` flow: recorded pass rates by default, live rollouts when a policy is given
(retried when the engine fails to start), with an artifact of the pass-rate histogram.

``config.engines=N`` shards the questions over N engines, one ``label-shard`` task each, mapped over
the flow's task runner (``processes``, ``dask`` or ``ray`` put each engine in its own worker
process; on a GPU machine shard i gets the (i mod n)-th of the flow's n visible GPUs). Each shard checkpoints its own
batches, so a killed run resumes shard by shard.

``config.judge`` then judges the live rollouts with a reasoning reward model (``flows.judge``; only
what this judge has not judged yet) and reports labelling's extra signal beside the pass rates:
the judge's mean score per pass-rate bin (``pipeline.label.judge_signal``)."""

from __future__ import annotations

import os
from dataclasses import replace

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.futures import wait

from flows.caching import CACHED, RETRIES, owned_fingerprint, run_cached
from flows.progress import locked, log_upstream, report
from pipeline.label import (
    Checkpointed,
    LabelConfig,
    judge_signal,
    label,
    pass_rate_histogram,
    planned,
    shards,
)
from pipeline.lake import Lake
from pipeline.terminal import plain

POLL_SECONDS = 5.0
"""How often a sharded run counts its shards' checkpointed episodes for its progress."""


@task(name="label", **CACHED, **RETRIES)
def label_task(root: str, config: LabelConfig, fingerprint: str, code: str) -> dict:
    """Cached on (root, config, fingerprint of the deduplicated tables and the policy's weights,
    stage code). Live labels are checkpointed per batch, so a retry or a rerun resumes."""
    lake = Lake(root)
    stats = label(
        lake, config, on_episode=lambda done, total: report("label", {"done": done, "total": total})
    )
    return stats | {"_owns": owned_fingerprint(lake, "label")}


@task(name="label-shard", **RETRIES)
def label_shard_task(
    root: str, config: LabelConfig, shard: int, question_ids: list[str], gpu: str | None
) -> dict:
    """One engine's share of the plan. ``gpu``: this shard's device on a GPU machine, an id
    from the flow's own visible devices, set before the engine starts (a worker process
    serves one engine: CUDA keeps the device it first started on)."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    return label(Lake(root), config, only=question_ids) | {"shard": shard}


def _sharded(lk: Lake, config: LabelConfig, engines: int) -> tuple[dict, str]:
    """Plan once, label the shards in parallel, add their counts up. Progress: the episodes
    every shard has checkpointed in the lake, counted every ``POLL_SECONDS`` (the shards' engines
    may be in other processes, where no callback reaches the command line)."""
    todo, stats = planned(lk, config)
    stats |= {"labelled_now": 0, "episodes": 0, "engines": engines}
    if not todo:
        return stats, "Cached"  # nothing left to label for this policy and config
    checkpointed = Checkpointed(lk, config)
    before, total = checkpointed.episodes(), len(todo) * config.k
    gpus = _visible_gpus()
    parts = shards(todo, engines)
    futures = [
        label_shard_task.submit(
            lk.root,
            config,
            i,
            [q["question_id"] for q in part],
            gpus[i % len(gpus)] if gpus else None,
        )
        for i, part in enumerate(parts)
        if part
    ]
    pending = futures
    while pending:
        pending = list(wait(pending, timeout=POLL_SECONDS).not_done)
        report("label", {"done": checkpointed.episodes() - before, "total": total})
    for f in futures:
        r = f.result()
        stats["labelled_now"] += r["labelled_now"]
        stats["episodes"] += r["episodes"]
        stats["engine"] = r.get("engine")
    return stats, "Completed"


def _visible_gpus() -> list[str]:
    """The device ids this flow may use: CUDA_VISIBLE_DEVICES as the scheduler set it (Slurm,
    Kubernetes), else every GPU of the machine; none on CPU."""
    try:
        import torch

        count = torch.cuda.device_count()
    except ImportError:
        count = 0
    if not count:
        return []
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return visible[:count] if visible else [str(i) for i in range(count)]


@flow(name="label")
@locked
def label_flow(lake: str | None = None, config: LabelConfig | None = None) -> dict:
    """Pass rates per unique question: recorded, or from K rollouts of the config's policy
    through its agent loop, on ``config.engines`` engines; with ``config.judge``, the judge's
    scores of the rollouts."""
    config = config or LabelConfig()
    lk = Lake(lake)
    report("stage", "label")
    log_upstream(lk, "label")
    if config.engines > 1:
        stats, state = _sharded(lk, config, config.engines)
    else:
        run = run_cached(label_task, "label", lk, config)
        stats, state = {k: v for k, v in run.result.items() if k != "_owns"}, run.state
    judged, signal = None, []
    if config.judge is not None:
        from flows.judge import judge_task

        report("stage", "judge rollouts")
        judged = judge_task(lk.root, replace(config.judge, target="rollouts", limit=None))
        signal = [s for s in judge_signal(lk) if s["judge_revision"] == judged["revision"]]
    hist = pass_rate_histogram(lk)
    lines = [
        "# Pass rates",
        "",
        plain({k.replace("_", " "): v for k, v in stats.items()}),
        "",
        "| source | pass rate | questions |",
        "|---|---|---|",
    ]
    lines += [f"| {h['label_source']} | {h['pass_rate']} | {h['questions']} |" for h in hist]
    if signal:
        lines += ["", f"## Judge scores ({judged['judge']})", "",
                  "| bin | questions | scored | mean score | right | wrong |", "|---|---|---|---|---|---|"]  # fmt: skip
        lines += [
            f"| {s['bin']} | {s['questions']} | {s['scored']} | {s['judge_score']} "
            f"| {s['judge_score_correct']} | {s['judge_score_wrong']} |"
            for s in signal
        ]
    create_markdown_artifact(
        key="pass-rates", markdown="\n".join(lines), description=f"Labels in {lk.root}"
    )
    warnings = stats.pop("warnings", [])  # said by the CLI, the logs and the run report
    for w in warnings:
        get_run_logger().warning(w)
    out = {"lake": lk.root, "state": state, "stats": stats, "histogram": hist, "warnings": warnings}
    return out | ({"judge": judged, "judge_signal": signal} if judged is not None else {})

"""The ``judge`` flow: the reasoning reward model over the lake's trajectories or rollouts, into
``judgements`` (``pipeline.judge.stage``), with a markdown artifact of the parse outcomes."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.caching import RETRIES
from flows.progress import locked, report
from pipeline.judge.config import JudgeConfig
from pipeline.judge.judge import Judge
from pipeline.judge.stage import judge_lake
from pipeline.lake import Lake


@task(name="judge", cache_policy=NO_CACHE, **RETRIES)
def judge_task(root: str, config: JudgeConfig) -> dict:
    judge = Judge(config)
    out = judge_lake(
        Lake(root),
        judge,
        config.target,
        config.limit,
        on_batch=lambda n, total: report("judged", (n, total)),
    )
    return out.as_dict()


@flow(name="judge")
@locked
def judge_flow(config: JudgeConfig, lake: str | None = None) -> dict:
    """Judge what is not judged yet by this judge revision (weights, template, sampling)."""
    out = judge_task(Lake(lake).root, config)
    s = out["status"]
    create_markdown_artifact(
        key="judge",
        markdown="\n".join(
            [
                "| candidates | judged | cached | ok | partial | failed | mean score |",
                "|---|---|---|---|---|---|---|",
                f"| {out['candidates']} | {out['judged']} | {out['cached']} | {s.get('ok', 0)} "
                f"| {s.get('partial', 0)} | {s.get('failed', 0)} | {out['score_mean']} |",
                "",
                out["note"],
            ]
        ),
    )
    return out

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
def judge_task(root: str, config: JudgeConfig, target: str, limit: int | None) -> dict:
    judge = Judge(config)
    out = judge_lake(
        Lake(root), judge, target, limit, on_batch=lambda n, total: report("judged", (n, total))
    )
    return out.as_dict()


@flow(name="judge")
@locked
def judge_flow(
    model: str,
    lake: str | None = None,
    target: str = "trajectories",
    limit: int | None = None,
    backend: str = "auto",
    served_model: str | None = None,
    max_tokens: int = 512,
) -> dict:
    """Judge what is not judged yet by this judge revision (weights, template, sampling)."""
    config = JudgeConfig(model, served_model=served_model, backend=backend, max_tokens=max_tokens)
    out = judge_task(Lake(lake).root, config, target, limit)
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

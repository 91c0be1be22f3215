"""The ``record`` flow: the recorder's log committed into the lake (``pipeline.recorder.stage``),
on demand (``flow record-commit``) or as the pipeline's ``record`` stage in a scheduled
deployment (flows/deployments.toml ``recorded``). Holds the lake's writer lock."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.caching import RETRIES
from flows.progress import locked
from pipeline.lake import Lake
from pipeline.recorder.config import CommitConfig
from pipeline.recorder.stage import commit


@task(name="commit-recorded", cache_policy=NO_CACHE, **RETRIES)
def commit_task(root: str, config: CommitConfig) -> dict:
    return commit(Lake(root), config).as_dict()


@flow(name="record")
@locked
def record_flow(lake: str | None = None, config: CommitConfig | None = None) -> dict:
    """Commit the finished episodes of the recorder's log as the ``recorded`` source."""
    root = Lake(lake).root
    out = commit_task(root, config or CommitConfig())
    ing = out.get("ingest") or {}
    create_markdown_artifact(
        key="record-commit",
        markdown="\n".join(
            [
                "| calls read | committed now | committed before | open | episodes committed | episodes open | quarantined |",
                "|---|---|---|---|---|---|---|",
                f"| {out['calls_read']} | {out['calls_committed']} | {out['calls_committed_before']} "
                f"| {out['calls_open']} | {out['episodes_committed']} | {out['episodes_open']} "
                f"| {ing.get('quarantined', 0)} |",
                "",
                out["note"],
                *(f"\n**warning**: {w}" for w in out["warnings"]),
            ]
        ),
    )
    return out

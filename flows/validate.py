"""The ``validate`` flow: the GX suites over the lake, a markdown artifact of pass/fail counts per
expectation, and the Data Docs site under ROOT/reports/validation."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.progress import report
from pipeline.lake import Lake
from pipeline.validate import ValidateConfig, summary_markdown, validate
from schemas.expectations import Limits


@task(name="validate-tables", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=2)
def validate_task(lake: Lake, config: ValidateConfig) -> dict:
    result = validate(lake, config)
    return {
        "suite_version": result.suite_version,
        "tables": result.tables,
        "rules": result.rule_rows(),
        "docs_index": result.docs_index,
        "markdown": summary_markdown(result),
    }


@flow(name="validate")
def validate_flow(
    lake: str | None = None,
    tables: list[str] | None = None,
    force: bool = False,
    max_messages: int = 400,
    data_docs: bool = True,
) -> dict:
    """Validate every committed part not yet validated with the current suite version."""
    lk = Lake(lake)
    config = ValidateConfig(
        tables=tuple(tables or ("trajectories", "questions", "attempts")),
        force=force,
        data_docs=data_docs,
        limits=Limits(max_messages=max_messages),
    )
    report("stage", "validate")
    out = validate_task(lk, config)
    create_markdown_artifact(
        key="validation", markdown=out["markdown"], description=f"Validation of {lk.root}"
    )
    out["lake"] = lk.root
    out["limits"] = asdict(config.limits)
    return out

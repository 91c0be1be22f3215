"""The ``validate`` flow: the GX suites over the lake, a markdown artifact of pass/fail counts per
expectation, and the Data Docs site under ROOT/reports/validation."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from flows.caching import CACHED, RETRIES, owned_fingerprint, run_cached
from flows.progress import locked, report
from pipeline.lake import Lake
from pipeline.validate import ValidateConfig, summary_markdown, validate


@task(name="validate-tables", **CACHED, **RETRIES)
def validate_task(root: str, config: ValidateConfig, fingerprint: str, code: str) -> dict:
    """Cached on (root, config, fingerprint of the ingested tables, stage code)."""
    lake = Lake(root)
    result = validate(lake, config)
    return {
        "_owns": owned_fingerprint(lake, "validate"),
        "suite_version": result.suite_version,
        "tables": result.tables,
        "rules": result.rule_rows(),
        "docs_index": result.docs_index,
        "markdown": summary_markdown(result),
    }


@flow(name="validate")
@locked
def validate_flow(lake: str | None = None, config: ValidateConfig | None = None) -> dict:
    """Validate every committed part not yet validated with the current suite version."""
    lk = Lake(lake)
    config = config or ValidateConfig()
    report("stage", "validate")
    run = run_cached(validate_task, "validate", lk, config)
    out = run.result | {"state": run.state}
    create_markdown_artifact(
        key="validation", markdown=out["markdown"], description=f"Validation of {lk.root}"
    )
    out["lake"] = lk.root
    out["limits"] = asdict(config.limits)
    return out

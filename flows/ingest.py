"""The ``ingest`` flow: one task per input file (sequential: files may share content hashes),
a table artifact of per-file counts."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows.progress import report
from pipeline.ingest.stage import FileReport, IngestConfig, Registry, discover, ingest_file
from pipeline.lake import Lake


def _as_dict(r: FileReport) -> dict:
    d = asdict(r)
    d["rows"], d["reasons"] = dict(r.rows), dict(r.reasons)
    return d


@task(
    name="ingest-file",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=[1, 5],
    task_run_name="ingest {path}",
)
def ingest_file_task(
    path: str, lake: Lake, config: IngestConfig, registry: Registry, default_source: str | None
) -> dict:
    return _as_dict(ingest_file(path, lake, config, registry, default_source))


@flow(name="ingest", log_prints=False)
def ingest_flow(
    paths: list[str],
    lake: str | None = None,
    source: str | None = None,
    format: str | None = None,
    force: bool = False,
) -> dict:
    """Ingest files and folders into the lake; returns per-file reports and totals."""
    lk = Lake(lake)
    config = IngestConfig(source=source, format=format, force=force)
    lk.remove_temp_files()
    registry = Registry(lk)
    files = discover(paths)
    report("start", {"files": len(files)})
    reports = []
    for path, default_source in files:
        r = ingest_file_task(path, lk, config, registry, default_source)
        reports.append(r)
        report("file", r)
    totals: dict[str, int] = {}
    for r in reports:
        for k in ("records_read", "accepted", "quarantined", "size_bytes"):
            totals[k] = totals.get(k, 0) + r[k]
        for k, v in r["rows"].items():
            totals[k] = totals.get(k, 0) + v
        totals[f"files_{r['status']}"] = totals.get(f"files_{r['status']}", 0) + 1
    create_table_artifact(
        key="ingest-files",
        table=[
            {
                k: r[k]
                for k in (
                    "path",
                    "status",
                    "reader",
                    "source",
                    "records_read",
                    "accepted",
                    "quarantined",
                )
            }
            | {"reasons": str(r["reasons"])}
            for r in reports
        ]
        or [{"path": "(no files)"}],
        description=f"Ingest into {lk.root}: {totals}",
    )
    return {"lake": lk.root, "files": reports, "totals": totals}

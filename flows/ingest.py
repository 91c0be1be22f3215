"""The ``ingest`` flow: files hashed and ingested as tasks mapped over the task runner (threads,
processes, a Dask or Ray cluster), a table artifact of per-file counts.

The lake is the cache: a file whose content hash is committed in ``ingest_log`` is skipped
(``unchanged``). Files that share content within one run are ingested once, first by path;
the others run after it and report the copy they match."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow, task, unmapped
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows.caching import RETRIES
from flows.progress import report
from pipeline.ingest.stage import (
    FileReport,
    IngestConfig,
    Registry,
    discover,
    file_sha256,
    ingest_file,
)
from pipeline.lake import Lake


def _as_dict(r: FileReport) -> dict:
    d = asdict(r)
    d["rows"], d["reasons"] = dict(r.rows), dict(r.reasons)
    return d


@task(name="hash-file", cache_policy=NO_CACHE, task_run_name="hash {path}", **RETRIES)
def hash_task(path: str) -> tuple[str, int]:
    return file_sha256(path)


@task(name="ingest-file", cache_policy=NO_CACHE, task_run_name="ingest {path}", **RETRIES)
def ingest_file_task(
    path: str,
    root: str,
    config: IngestConfig,
    registry: Registry,
    default_source: str | None,
    digest: tuple[str, int],
) -> dict:
    return _as_dict(ingest_file(path, Lake(root), config, registry, default_source, digest=digest))


def _ingest_all(lk: Lake, files: list, config: IngestConfig, digests: list) -> list[dict]:
    """First copies of each content in parallel, then the later copies (now ``unchanged``)."""
    seen: set[str] = set()
    first, later = [], []
    for (path, src), d in zip(files, digests, strict=True):
        (later if d[0] in seen else first).append((path, src, d))
        seen.add(d[0])
    reports: dict[str, dict] = {}
    for batch in (first, later):
        if not batch:
            continue
        futures = ingest_file_task.map(
            [p for p, _, _ in batch],
            unmapped(lk.root),
            unmapped(config),
            unmapped(Registry(lk)),
            [s for _, s, _ in batch],
            [d for _, _, d in batch],
        )
        for f in futures:
            r = f.result()
            reports[r["path"]] = r
            report("file", r)
    return [reports[p] for p, _ in files]


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
    files = discover(paths)
    report("start", {"files": len(files)})
    digests = [f.result() for f in hash_task.map([p for p, _ in files])]
    reports = _ingest_all(lk, files, config, digests)
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

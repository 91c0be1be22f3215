"""The ``ingest`` flow: files hashed and ingested in partitions mapped over the task runner
(threads, processes, a Dask or Ray cluster), a table artifact of per-file counts.

The lake is the cache: a file whose content hash is committed in ``ingest_log`` is skipped
(``unchanged``). Files that share content within one run are ingested once, first by path;
the others run after it and report the copy they match."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow, task, unmapped
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows.caching import RETRIES
from flows.progress import locked, report
from pipeline.ingest.stage import (
    FileReport,
    IngestConfig,
    Registry,
    discover_files,
    file_sha256,
    ingest_file,
    safe_text,
    skipped_files,
)
from pipeline.lake import Lake
from pipeline.lake.eval_sets import register as register_eval_sets


def _as_dict(r: FileReport) -> dict:
    d = asdict(r)
    d["rows"], d["reasons"] = dict(r.rows), dict(r.reasons)
    return d


def partitions(files: list, max_files: int = 32, max_bytes: int = 256 << 20) -> list[list[int]]:
    """Consecutive groups of file indexes, each at most ``max_files`` files or ``max_bytes``: the
    unit of mapped work (one Prefect task per file would cost more than small files do)."""
    import fsspec

    groups: list[list[int]] = [[]]
    size = 0
    for i, (path, *_) in enumerate(files):
        try:
            n = fsspec.core.url_to_fs(path)[0].size(path) or 0
        except OSError:  # unreadable: ingest_file records why
            n = 0
        if groups[-1] and (len(groups[-1]) >= max_files or size + n > max_bytes):
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += n
    return [g for g in groups if g]


@task(name="hash-files", cache_policy=NO_CACHE, **RETRIES)
def hash_task(files: list[tuple[str, str | None]]) -> list[tuple[str, int]]:
    """(sha256, size) per (path, refused): a refused file is never read, not even hashed."""
    return [file_sha256(p, refused) for p, refused in files]


@task(name="ingest-files", cache_policy=NO_CACHE, **RETRIES)
def ingest_task(
    items: list[tuple[str, str | None, tuple[str, int], str | None]],
    root: str,
    config: IngestConfig,
    registry: Registry,
) -> list[dict]:
    """Files of one partition, one after the other; each commits on its own, so a retry or a
    rerun skips those already committed."""
    lake = Lake(root)
    return [
        _as_dict(ingest_file(path, lake, config, registry, source, digest=digest, refused=why))
        for path, source, digest, why in items
    ]


def _ingest_all(lk: Lake, files: list, config: IngestConfig, digests: list) -> list[dict]:
    """First copies of each content in parallel partitions, then the later copies (which find
    their content committed and report the file they match)."""
    seen: set[str] = set()
    first, later = [], []
    for (path, src, why), d in zip(files, digests, strict=True):
        (later if d[0] in seen else first).append((path, src, d, why))
        seen.add(d[0])
    reports: dict[str, dict] = {}
    for batch in (first, later):
        if not batch:
            continue
        groups = [[batch[i] for i in g] for g in partitions(batch)]
        futures = ingest_task.map(
            groups, unmapped(lk.root), unmapped(config), unmapped(Registry(lk))
        )
        for f in futures:
            for r in f.result():
                reports[r["path"]] = r
                report("file", r)
    return [reports[safe_text(p)] for p, *_ in files]


@flow(name="ingest", log_prints=False)
@locked
def ingest_flow(
    paths: list[str], lake: str | None = None, config: IngestConfig | None = None
) -> dict:
    """Ingest files and folders into the lake; returns per-file reports and totals. The
    config's ``eval_sets`` are registered as evaluation sets of the lake once the files are in
    (an unknown name fails the run and names the pools)."""
    lk = Lake(lake)
    config = config or IngestConfig()
    lk.remove_temp_files()
    files = discover_files(paths, config.exclude)
    skipped = skipped_files(paths, config.exclude)
    report("start", {"files": len(files)})
    groups = [[(files[i].path, files[i].refused) for i in g] for g in partitions(files)]
    digests = [d for f in hash_task.map(groups) for d in f.result()]
    reports = _ingest_all(lk, files, config, digests)
    totals: dict[str, int] = {}
    for r in reports:
        for k in ("records_read", "accepted", "quarantined", "size_bytes"):
            totals[k] = totals.get(k, 0) + r[k]
        for k, v in r["rows"].items():
            totals[k] = totals.get(k, 0) + v
        totals[f"files_{r['status']}"] = totals.get(f"files_{r['status']}", 0) + 1
    if skipped:
        totals["files_skipped"] = len(skipped)
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
    out = {"lake": lk.root, "files": reports, "totals": totals, "skipped": skipped}
    if config.eval_sets:
        out["eval_sets"] = list(register_eval_sets(lk, list(config.eval_sets)))
    return out

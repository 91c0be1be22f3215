"""The ``dedup`` flow: on processes or a Dask/Ray cluster, signature jobs (partitions of texts
in job files) mapped over the task runner; in process, the stage's own threads compute them.
Then clustering as one cached task, and an artifact of duplicates per source and the largest
clusters."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow, get_run_logger, task, unmapped
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.caching import CACHED, RETRIES, owned_fingerprint, run_cached, stage_fingerprint
from flows.progress import locked, log_upstream, report
from pipeline.dedup import DedupConfig, DedupResult, dedup
from pipeline.dedup.stage import run_signature_job, signature_jobs
from pipeline.lake import Lake
from pipeline.lake.fingerprint import code_version


@task(
    name="minhash-signatures", cache_policy=NO_CACHE, task_run_name="signatures {path}", **RETRIES
)
def signature_task(root: str, path: str, config: DedupConfig) -> int:
    """One partition of texts -> one minhash_signatures part (skipped if already written)."""
    return run_signature_job(Lake(root), path, config)


@task(name="plan-signatures", **CACHED, **RETRIES)
def plan_task(root: str, config: DedupConfig, fingerprint: str, code: str) -> list[str]:
    """Job files of texts lacking a signature; cached like the stage, so a rerun over the same
    lake reads nothing."""
    lake = Lake(root)
    return signature_jobs(lake, config, lake.path("work", "dedup", config.sig_key()))


@task(name="dedup-clusters", **CACHED, **RETRIES)
def dedup_task(root: str, config: DedupConfig, fingerprint: str, code: str) -> dict:
    """Cached on (root, config, fingerprint of the validated tables, stage code)."""
    lake = Lake(root)
    return asdict(dedup(lake, config)) | {"_owns": owned_fingerprint(lake, "dedup")}


def markdown(result: DedupResult) -> str:
    c = result.counts
    lines = [f"**Warning**: {w}\n" for w in result.warnings] + [
        f"# Dedup ({result.params['backend']} signatures, {result.params['lsh']} LSH, b={result.params['bands']} r={result.params['rows']}, threshold {result.params['threshold']})",
        "",
        "| scope | in | kept | exact duplicates | near duplicates |",
        "|---|---|---|---|---|",
        f"| questions (rows) | {c['question_rows']} | {c['questions_kept']} | {c['question_rows'] - c['questions_distinct']} (rows sharing an id) | {c['questions_near_duplicates']} |",
        f"| trajectories | {c.get('trajectory_rows', 0)} | {c.get('trajectories_kept', 0)} | {c.get('trajectory_exact_duplicates', 0)} | {c.get('trajectory_near_duplicates', 0)} |",
        "",
        f"Evaluation sets: {c['questions_in_eval_sets']} unique questions in an evaluation set, {c['questions_contaminated']} training questions near-duplicate one; {c['questions_train_eligible']} train-eligible.",
        "",
        "| source | trajectories | exact duplicates | near duplicates |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['source']} | {r['trajectories']} | {r['exact_duplicates']} | {r['near_duplicates']} |"
        for r in result.per_source
    ]
    if not result.largest_clusters:
        lines += ["", "No question has a near-duplicate: every cluster is a single question."]
        return "\n".join(lines)
    lines += [
        "",
        "Largest question clusters:",
        "",
        "| members | sources | question |",
        "|---|---|---|",
    ]
    lines += [
        f"| {u['n_members']} | {', '.join(u['sources'])} | {u['question'].replace('|', ' ')} |"
        for u in result.largest_clusters
    ]
    return "\n".join(lines)


def _in_process() -> bool:
    """Whether this flow's task runner is a thread pool in this process."""
    from prefect.context import FlowRunContext
    from prefect.task_runners import ThreadPoolTaskRunner

    ctx = FlowRunContext.get()
    return ctx is None or isinstance(ctx.task_runner, ThreadPoolTaskRunner)


@flow(name="dedup")
@locked
def dedup_flow(lake: str | None = None, config: DedupConfig | None = None) -> dict:
    """Deduplicate questions and trajectories across sources; flag evaluation-set contamination."""
    lk = Lake(lake)
    config = config or DedupConfig()
    report("stage", "dedup")
    log_upstream(lk, "dedup")
    fp = stage_fingerprint(lk, "dedup", config)
    jobs, computed = [], 0
    if not _in_process():
        # Spread signature partitions over processes or a cluster; the lake is their cache
        # (a job whose part exists returns at once). In process, the stage's threads do it.
        jobs = plan_task(lk.root, config, fp, code_version())
        futures = signature_task.map(unmapped(lk.root), jobs, unmapped(config))
        computed = sum(f.result() for f in futures)
    run = run_cached(dedup_task, "dedup", lk, config, fingerprint=fp)
    folder = lk.path("work", "dedup", config.sig_key())
    if lk.fs.exists(folder):
        lk.fs.rm(folder, recursive=True)
    out = run.result
    result = DedupResult(
        out["counts"],
        out["largest_clusters"],
        out["per_source"],
        out["params"],
        out.get("warnings", []),
    )
    for w in result.warnings:
        get_run_logger().warning(w)
    create_markdown_artifact(
        key="dedup", markdown=markdown(result), description=f"Dedup of {lk.root}"
    )
    return {
        "lake": lk.root,
        "state": run.state,
        "signature_jobs": len(jobs),
        "signatures_computed": computed,
        "counts": result.counts,
        "largest_clusters": result.largest_clusters,
        "per_source": result.per_source,
        "params": result.params,
        "warnings": result.warnings,
    }

"""The ``dedup`` flow: signatures per partition, LSH band partitions as separate tasks (so a Dask
or Ray task runner can spread them), clustering, and an artifact of duplicates per source and the
largest clusters."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.progress import report
from pipeline.dedup import DedupConfig, DedupResult, dedup
from pipeline.lake import Lake


@task(name="dedup", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=2)
def dedup_task(lake: Lake, config: DedupConfig) -> DedupResult:
    return dedup(lake, config)


def markdown(result: DedupResult) -> str:
    c = result.counts
    lines = [
        f"# Dedup ({result.params['backend']} signatures, {result.params['lsh']} LSH, b={result.params['bands']} r={result.params['rows']}, threshold {result.params['threshold']})",
        "",
        "| scope | in | kept | exact duplicates | near duplicates |",
        "|---|---|---|---|---|",
        f"| questions (distinct ids) | {c['questions_distinct']} | {c['questions_kept']} | {c['question_rows'] - c['questions_distinct']} rows share an id | {c['questions_near_duplicates']} |",
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


@flow(name="dedup")
def dedup_flow(
    lake: str | None = None,
    threshold: float = 0.8,
    backend: str = "auto",
    lsh: str = "bands",
    eval_sets: list[str] | None = None,
) -> dict:
    """Deduplicate questions and trajectories across sources; flag evaluation-set contamination."""
    lk = Lake(lake)
    config = DedupConfig(threshold=threshold, backend=backend, lsh=lsh)
    if eval_sets is not None:
        config.eval_sets = tuple(eval_sets)
    report("stage", "dedup")
    result = dedup_task(lk, config)
    create_markdown_artifact(
        key="dedup", markdown=markdown(result), description=f"Dedup of {lk.root}"
    )
    return {
        "lake": lk.root,
        "counts": result.counts,
        "largest_clusters": result.largest_clusters,
        "per_source": result.per_source,
        "params": result.params,
    }

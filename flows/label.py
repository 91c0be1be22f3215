"""The ``label`` flow: recorded pass rates by default, live rollouts when a policy is given
(retried when the engine fails to start), with an artifact of the pass-rate histogram."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from flows.caching import CACHED, RETRIES, owned_fingerprint, run_cached
from flows.progress import locked, log_upstream, report
from pipeline.label import LabelConfig, label, pass_rate_histogram
from pipeline.lake import Lake
from pipeline.rollout.agent import AgentConfig
from pipeline.rollout.engines import Sampling


@task(name="label", **CACHED, **RETRIES)
def label_task(root: str, config: LabelConfig, fingerprint: str, code: str) -> dict:
    """Cached on (root, config, fingerprint of the deduplicated tables and the policy's weights,
    stage code). Live labels are checkpointed per batch, so a retry or a rerun resumes."""
    lake = Lake(root)
    stats = label(
        lake, config, on_batch=lambda done, total: report("label", {"done": done, "total": total})
    )
    return stats | {"_owns": owned_fingerprint(lake, "label")}


@flow(name="label")
@locked
def label_flow(
    lake: str | None = None,
    policy: str | None = None,
    k: int = 8,
    backend: str = "auto",
    limit: int | None = None,
    max_tokens: int = 512,
    temperature: float = 1.0,
    agent: AgentConfig | None = None,
) -> dict:
    """Pass rates per unique question: recorded, or from K rollouts of ``policy`` through the
    agent loop ``agent`` (default: the loop `flow train` uses)."""
    lk = Lake(lake)
    config = LabelConfig(
        k=k,
        policy=policy,
        backend=backend,
        limit=limit,
        sampling=Sampling(temperature=temperature, max_tokens=max_tokens),
        **({"agent": agent} if agent is not None else {}),
    )
    report("stage", "label")
    log_upstream(lk, "label")
    run = run_cached(label_task, "label", lk, config)
    stats = {k: v for k, v in run.result.items() if k != "_owns"}
    hist = pass_rate_histogram(lk)
    lines = [
        "# Pass rates",
        "",
        f"{stats}",
        "",
        "| source | pass rate | questions |",
        "|---|---|---|",
    ]
    lines += [f"| {h['label_source']} | {h['pass_rate']} | {h['questions']} |" for h in hist]
    create_markdown_artifact(
        key="pass-rates", markdown="\n".join(lines), description=f"Labels in {lk.root}"
    )
    return {"lake": lk.root, "state": run.state, "stats": stats, "histogram": hist}

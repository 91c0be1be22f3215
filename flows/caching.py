"""Stage caching and retries shared by the flows.

A stage task is keyed on ``INPUTS + TASK_SOURCE`` where the inputs are the lake root, the stage
config, the content fingerprint of the tables it reads and the hash of the stage code
(``pipeline.lake.fingerprint``): never on DataFrames. A hit is trusted only if the tables the stage
owns still hash as they did when the result was stored; otherwise the stage runs again (a lake
that was deleted or edited since is never served from cache). Stages are incremental inside too,
so a run killed halfway resumes from its last committed unit of work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefect import Task
from prefect.cache_policies import INPUTS, TASK_SOURCE
from prefect.tasks import exponential_backoff

from flows.local_server import install as install_server_watchdog
from pipeline.lake import Lake
from pipeline.lake.fingerprint import (
    OWNS,
    READS,
    code_version,
    dataset_fingerprint,
    tables_fingerprint,
)
from pipeline.transient import is_transient

install_server_watchdog()  # every stage flow imports this module: their local server dies with us

STAGE_CACHE = INPUTS + TASK_SOURCE


def retry_transient(task: Task, task_run: Any, state: Any) -> bool:
    """Retry storage hiccups, timeouts and engine starts; fail bad input and bugs at once."""
    try:
        state.result()
    except Exception as e:  # noqa: BLE001 - classify whatever the task raised
        return is_transient(e)
    return False


# Task options for stage tasks: three retries 2 s, 4 s, 8 s (±50% jitter), transient errors only.
RETRIES: dict[str, Any] = {
    "retries": 3,
    "retry_delay_seconds": exponential_backoff(backoff_factor=2),
    "retry_jitter_factor": 0.5,
    "retry_condition_fn": retry_transient,
}
CACHED: dict[str, Any] = {
    "cache_policy": STAGE_CACHE,
    "persist_result": True,
    "result_serializer": "json",
}


def owned_fingerprint(lake: Lake, stage: str, dataset: str | None = None) -> str:
    if stage == "build":
        return dataset_fingerprint(lake, dataset or "default")
    return tables_fingerprint(lake, OWNS[stage])


@dataclass
class StageRun:
    result: dict
    state: str  # Completed | Cached
    fingerprint: str


def stage_fingerprint(lake: Lake, stage: str, config: Any) -> str:
    """What the stage reads: its committed input tables (and the policy's weights for live
    labels), by content."""
    fp = tables_fingerprint(lake, READS[stage])
    if stage == "label" and getattr(config, "policy", None):
        from pipeline.label import model_revision

        fp += ":" + model_revision(config.policy)
    return fp


def run_cached(
    stage_task: Task,
    stage: str,
    lake: Lake,
    config: Any,
    dataset: str | None = None,
    fingerprint: str | None = None,
) -> StageRun:
    """Call ``stage_task(root, config, fingerprint, code)``; its result carries ``_owns``, the
    fingerprint of what the stage owns right after it ran."""
    fp = fingerprint or stage_fingerprint(lake, stage, config)
    args = (lake.root, config, fp, code_version())
    state = stage_task(*args, return_state=True)
    result = state.result()
    if state.name == "Cached" and result.get("_owns") != owned_fingerprint(lake, stage, dataset):
        state = stage_task.with_options(refresh_cache=True)(*args, return_state=True)
        result = state.result()
    return StageRun(result, state.name, fp)

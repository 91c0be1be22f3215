"""Task runners by name: where a flow's mapped tasks (files, signature partitions) run.

``threads`` (default; one worker unless ``workers``) and ``processes`` stay on this machine; ``dask`` starts a local cluster or
joins one at ``address`` (``tcp://scheduler:8786``); ``ray`` does the same with Ray. The stages
write through the lake root, so every worker must reach it (a shared disk or an object store).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RUNNERS = ("threads", "processes", "dask", "ray")


@dataclass(frozen=True)
class RunnerConfig:
    """Where a flow's mapped work runs."""

    runner: str | None = None
    """threads | processes | dask | ray; None: threads for the pipeline's mapped work,
    processes for label's engines (each engine in a worker process of its own)."""
    workers: int | None = None
    """Workers of the task runner (None: one thread, or the runner's own default)."""
    address: str | None = None
    """Address of a running Dask or Ray cluster (tcp://scheduler:8786); None: start a local one."""

    def __post_init__(self) -> None:
        if self.runner is not None and self.runner not in RUNNERS:
            raise ValueError(f"runner must be one of {', '.join(RUNNERS)}, not {self.runner!r}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be at least 1, not {self.workers}")


def task_runner(
    name: str = "threads", workers: int | None = None, address: str | None = None
) -> Any:
    """A Prefect task runner; ``workers`` caps local pools and sizes a local Dask cluster."""
    if name == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        # One worker unless asked: parsing holds the GIL, and on 2 cores two ingest threads were
        # 31.8 s against 24.2 s for one (8x the shared data). Threads help I/O-bound lakes.
        return ThreadPoolTaskRunner(max_workers=workers or 1)
    if name == "processes":
        from prefect.task_runners import ProcessPoolTaskRunner

        return ProcessPoolTaskRunner(max_workers=workers)
    if name == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as e:
            raise RuntimeError("--runner dask needs prefect-dask: pip install prefect-dask") from e
        if address:
            return DaskTaskRunner(address=address)
        return DaskTaskRunner(
            cluster_kwargs={"n_workers": workers or 2, "threads_per_worker": 1, "processes": True}
        )
    if name == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError as e:
            raise RuntimeError(
                "--runner ray needs prefect-ray: pip install 'flow-rl-data[ray]'"
            ) from e
        return RayTaskRunner(address=address) if address else RayTaskRunner()
    raise ValueError(f"unknown runner {name!r}; use one of {', '.join(RUNNERS)}")

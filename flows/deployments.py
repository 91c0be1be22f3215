"""Scheduled deployments of the pipeline flow, from a TOML config (``flows/deployments.toml``).

Each deployment runs a subset of the stages on a cron schedule with the config's lake, landing
folder, policy and dataset as parameters; ``flow serve`` serves them all from one process, and
``prefect.yaml`` describes the same deployments for ``prefect deploy`` to a work pool.
"""

from __future__ import annotations

import logging
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = Path(__file__).with_name("deployments.toml")


@dataclass
class Deployment:
    name: str
    stages: list[str]
    cron: str | None
    parameters: dict[str, Any] = field(default_factory=dict)


def _local(path: str, base: Path) -> str:
    """Local paths become absolute (flow runs may start in another folder); URLs stay."""
    return path if "://" in path else str((base / path).resolve())


def load(path: str | Path | None = None, base: Path | None = None) -> list[Deployment]:
    """The deployments of a config file; relative paths resolve against ``base`` (the cwd)."""
    cfg_path = Path(path) if path else DEFAULT_CONFIG
    with open(cfg_path, "rb") as f:
        cfg = tomllib.load(f)
    base = base or Path(os.getcwd())
    from flows.mission import STAGES as MISSION_STAGES
    from flows.pipeline import EXTRA, STAGES

    lake = _local(cfg.get("lake", "data/lake"), base)
    landing = _local(cfg.get("landing", "data/landing"), base)
    out = []
    for name, d in cfg.get("deployments", {}).items():
        mission = bool(d.get("mission", False))  # the whole mission's stages (MissionConfig)
        stages = list(d.get("stages", MISSION_STAGES if mission else STAGES))
        unknown = set(stages) - ({*MISSION_STAGES} if mission else {*STAGES, *EXTRA})
        if unknown:
            raise ValueError(f"{cfg_path}: deployment {name}: unknown stage(s) {sorted(unknown)}")
        params: dict[str, Any] = {
            "lake": lake,
            "dataset": cfg.get("dataset", "default"),
            "stages": stages,
            "write_run_report": d.get("report", True),
        }
        if "ingest" in stages:
            params["inputs"] = [landing]
        if cfg.get("policy") and "label" in stages:
            params["policy"] = _local(cfg["policy"], base)
        if mission:
            params["mission"] = {}  # MissionConfig's defaults
        elif "train" in stages:
            if not cfg.get("train_model"):
                continue  # nothing to train: not served
            params["train_model"] = _local(cfg["train_model"], base)
        out.append(Deployment(name, stages, d.get("cron") or None, params))
    return out


def runner_deployments(deployments: list[Deployment], timezone: str = "UTC") -> list[Any]:
    """Prefect runner deployments of the pipeline flow (cron in ``timezone``)."""
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.deployments.runner import EntrypointType

    from flows.pipeline import pipeline_flow

    return [
        pipeline_flow.to_deployment(
            name=d.name,
            schedule=CronSchedule(cron=d.cron, timezone=timezone) if d.cron else None,
            parameters=d.parameters,
            description=f"stages: {', '.join(d.stages)}",
            tags=["flow-rl-data", *d.stages],
            entrypoint_type=EntrypointType.MODULE_PATH,  # importable from any working folder
        )
        for d in deployments
    ]


class GoneRunFilter(logging.Filter):
    """Prefect's runner, shutting down on Ctrl-C, kills every flow run it still tracks. The same
    Ctrl-C reaches the run's own process (a terminal signals the whole group), so that process may
    be gone already, or a finished run not yet dropped from the runner's map: the kill raises
    ProcessLookupError and Prefect logs a traceback for a process whose end was the kill's goal.
    Say it in one line instead; any other failure to kill keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], ProcessLookupError):
            record.msg = "Flow run '%s' had already exited when the runner shut down."
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info, record.exc_text = None, None
        return True


def _quiet_gone_runs() -> None:
    log = logging.getLogger("prefect.runner.process_manager")
    if not any(isinstance(f, GoneRunFilter) for f in log.filters):
        log.addFilter(GoneRunFilter())


def serve(path: str | Path | None = None, limit: int | None = 1) -> None:
    """Register and serve every deployment of the config; blocks, running scheduled and
    triggered runs (one at a time by default: stages of one lake should not overlap)."""
    from prefect import serve as prefect_serve

    cfg_path = Path(path) if path else DEFAULT_CONFIG
    with open(cfg_path, "rb") as f:
        timezone = tomllib.load(f).get("timezone", "UTC")
    landing = None
    deployments = load(cfg_path)
    for d in deployments:
        if "inputs" in d.parameters:
            landing = d.parameters["inputs"][0]
    if landing and "://" not in landing:
        Path(landing).mkdir(parents=True, exist_ok=True)
    _quiet_gone_runs()
    prefect_serve(*runner_deployments(deployments, timezone), limit=limit)

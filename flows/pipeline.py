"""The ``pipeline`` flow: ingest -> validate -> dedup -> label -> build (-> train), one subflow per
stage, then the run report (HTML + PNG in the lake, and Prefect artifacts).

Each stage is cached on the content of what it reads (see ``flows/caching.py``), so a rerun with
nothing new does no stage work, and a run killed in any stage resumes from that stage's last
committed unit of work. A stage that fails for good fails the run with the stage's name and
reason."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, runtime
from prefect.artifacts import create_link_artifact, create_markdown_artifact

from flows.build import build_flow
from flows.dedup import dedup_flow
from flows.ingest import ingest_flow
from flows.label import label_flow
from flows.progress import locked, report
from flows.runners import task_runner
from flows.validate import validate_flow
from pipeline.lake import Lake, resolve_root
from pipeline.report import conservation, write_report

DEMO_DIR = "data/demo"


STAGES = ("ingest", "validate", "dedup", "label", "build")


def latest_dataset(lake: Lake, name: str) -> str:
    """The folder of the newest published version of a dataset."""
    from pipeline.build import next_version

    version = next_version(lake, name) - 1
    if version < 1:
        raise FileNotFoundError(f"no published version of dataset {name!r} in {lake.root}")
    return lake.path("datasets", name, f"v{version}")


def _read_manifest(lake: Lake, path: str) -> dict:
    import orjson

    with lake.fs.open(f"{path}/manifest.json", "rb") as f:
        return orjson.loads(f.read()) | {"path": path}


class StageFailed(RuntimeError):
    """A stage failed after its retries; the message names the stage and the reason."""


def _summary(stage: str, out: dict) -> dict[str, Any]:
    if stage == "ingest":
        t = out["totals"]
        return {
            "files": len(out["files"]),
            "new files": t.get("files_ingested", 0) + t.get("files_empty", 0),
            "records read": t.get("records_read", 0),
            "accepted": t.get("accepted", 0),
            "quarantined": t.get("quarantined", 0),
        }
    if stage == "validate":
        tables = out["tables"].values()
        return {
            "rows validated": sum(t["rows"] for t in tables),
            "passed": sum(t["passed"] for t in tables),
            "quarantined": sum(t["quarantined"] for t in tables),
            "flagged": sum(t["flagged"] for t in tables),
        }
    if stage == "dedup":
        c = out["counts"]
        return {
            "questions kept": c["questions_kept"],
            "near-dup questions": c["questions_near_duplicates"],
            "trajectories kept": c.get("trajectories_kept", 0),
            "signatures computed": out["counts"].get("question_signatures_computed", 0)
            + out["counts"].get("trajectory_signatures_computed", 0)
            + out.get("signatures_computed", 0),
        }
    if stage == "label":
        return {k: v for k, v in out["stats"].items() if isinstance(v, int | str)}
    if stage == "build":
        return {
            "dataset": f"{out['name']} v{out['version']}"
            + (" (unchanged)" if out["unchanged"] or out.get("state") == "Cached" else ""),
            "rl rows": out["rl"]["rows"],
            "sft rows": out["sft"]["rows"],
        }
    if stage == "train":
        return {"steps": out["steps"]}
    return {}


def _stage(name: str, fn: Any, results: dict, rows: dict, /, **params: Any) -> dict:
    report("stage", name)
    t0 = time.perf_counter()
    state = fn(**params, return_state=True)
    if not state.is_completed():
        try:
            state.result()
        except Exception as e:  # noqa: BLE001 - re-raised with the stage's name
            raise StageFailed(f"stage {name} failed: {type(e).__name__}: {e}") from e
        raise StageFailed(f"stage {name} ended {state.name}: {state.message}")
    out = state.result()
    results[name] = out
    rows[name] = {
        "state": out.get("state", "Completed") if isinstance(out, dict) else "Completed",
        "seconds": round(time.perf_counter() - t0, 2),
    } | _summary(name, out)
    return out


@flow(name="pipeline")
@locked
def pipeline_flow(
    inputs: list[str] | None = None,
    lake: str | None = None,
    policy: str | None = None,
    dataset: str = "demo",
    runner: str = "threads",
    workers: int | None = None,
    address: str | None = None,
    k: int = 8,
    stages: list[str] | None = None,
    train_model: str | None = None,
    train_steps: int = 20,
    train_options: dict | None = None,
    write_run_report: bool = True,
) -> dict:
    """The pipeline on ``inputs`` (default: the demo corpus): recorded labels, or K live rollouts
    of ``policy``; publishes ``datasets/<dataset>/v<N>``; with ``train_model``, GRPO-TCR on the
    newest version. ``stages`` runs a subset in order (scheduled deployments do: ingest every few
    minutes, curation nightly, ...). Returns per-stage summaries and the report's path."""
    root = resolve_root(lake)
    todo = list(stages or STAGES) + (["train"] if train_model and not stages else [])
    unknown = set(todo) - {*STAGES, "train"}
    if unknown:
        raise ValueError(f"unknown stage(s) {sorted(unknown)}; stages: {', '.join(STAGES)}, train")
    if "train" in todo and not train_model:
        raise ValueError("the train stage needs train_model (the SFT policy's folder)")
    if not inputs and "ingest" in todo:
        from pipeline.demo import write_demo

        if not Path(DEMO_DIR).exists():
            write_demo(DEMO_DIR)
        inputs = [DEMO_DIR]
    lk = Lake(root)
    results: dict[str, dict] = {}
    rows: dict[str, dict] = {}

    def mapped(fl: Any) -> Any:  # stages whose work is mapped over partitions
        return fl.with_options(task_runner=task_runner(runner, workers, address))

    manifest = None
    for stage in (s for s in [*STAGES, "train"] if s in todo):
        if stage == "ingest":
            _stage(stage, mapped(ingest_flow), results, rows, paths=inputs, lake=root)
        elif stage == "validate":
            _stage(stage, validate_flow, results, rows, lake=root)
        elif stage == "dedup":
            _stage(stage, mapped(dedup_flow), results, rows, lake=root)
        elif stage == "label":
            _stage(stage, label_flow, results, rows, lake=root, policy=policy, k=k)
        elif stage == "build":
            manifest = _stage(stage, build_flow, results, rows, lake=root, name=dataset)
        elif stage == "train":
            from flows.train import train_flow

            path = manifest["path"] if manifest else latest_dataset(lk, dataset)
            _stage(
                stage,
                train_flow,
                results,
                rows,
                dataset=path,
                model=train_model,
                out=f"{root}/runs/{dataset}-{path.rstrip('/').rsplit('/', 1)[-1]}",
                steps=train_steps,
                **(train_options or {}),
            )
    training = results.get("train")
    if manifest is None and lk.fs.exists(lk.path("datasets", dataset)):
        manifest = _read_manifest(lk, latest_dataset(lk, dataset))
    if not write_run_report:
        return {"lake": root, "stages": rows, "report": None, "results": results}
    run_name = runtime.flow_run.name or "local"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    cons = conservation(lk, manifest)
    warnings = [w for r in results.values() if isinstance(r, dict) for w in r.get("warnings", [])]
    index = write_report(
        lk,
        lk.path("reports", "runs", f"{stamp}-{run_name}"),
        rows,
        manifest,
        training,
        cons,
        warnings,
    )
    lines = [
        "# Pipeline run",
        "",
        f"lake `{root}`; report `{index}`",
        "",
        "| stage | state | seconds |",
    ]
    lines += ["|---|---|---|"] + [
        f"| {k} | {v['state']} | {v['seconds']} |" for k, v in rows.items()
    ]
    lines += [
        "",
        "| counts | in | out | quarantined | duplicates | filtered | pending | balanced |",
    ]
    lines += ["|---|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(str(v) for v in c.values()) + " |" for c in cons]
    create_markdown_artifact(key="pipeline-run", markdown="\n".join(lines), description=root)
    if lk.is_local:
        create_link_artifact(key="run-report", link=f"file://{index}", link_text="run report")
    return {
        "lake": root,
        "stages": rows,
        "conservation": cons,
        "report": index,
        "results": results,
        "warnings": warnings,
    }

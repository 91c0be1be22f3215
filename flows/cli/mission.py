"""The whole mission as one flow, and scheduled deployments."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.cli.common import (
    SAMPLE_QUERY,
    LakeOpt,
    app,
    console,
    err,
    print_rows,
)
from pipeline.lake import Lake, resolve_root
from pipeline.terminal import esc


@app.command()
def run(
    lake: LakeOpt = None,
    inputs: Annotated[
        list[str] | None,
        typer.Option(help="Input files/folders (default: the demo corpus, generated if missing)."),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(help="Model folder: label with live rollouts instead of recorded attempts."),
    ] = None,
    dataset: Annotated[str, typer.Option(help="Dataset name to publish.")] = "demo",
    runner: Annotated[
        str, typer.Option(help="Task runner for mapped work: threads | processes | dask | ray.")
    ] = "threads",
    workers: Annotated[int | None, typer.Option(help="Workers of the task runner.")] = None,
    address: Annotated[
        str | None, typer.Option(help="Address of a running Dask or Ray cluster.")
    ] = None,
    data_only: Annotated[
        bool,
        typer.Option(
            help="Only the data stages (ingest ... build), labelled from recorded attempts, or "
            "from --policy's live rollouts; default: the whole mission (sft, live labels of the "
            "SFT policy, build, GRPO-TCR, eval)."
        ),
    ] = False,
    until: Annotated[
        str | None,
        typer.Option(
            help="Stop after this stage (ingest validate dedup sft label build train eval)."
        ),
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="The CI-sized mission: fewer questions, steps and rollouts.")
    ] = False,
    seed: Annotated[
        int, typer.Option(help="The mission's seed: nano weights, SFT order, rollouts, GRPO.")
    ] = 0,
) -> None:
    """The main job as one Prefect flow: ingest, validate, dedup, then (by default) SFT of the
    nano policy, its K=8 live rollouts as difficulty labels, build, GRPO-TCR and the before/after
    evaluation; then the summary, the counts per stage and the run report's path. Rerun: only
    new work is done."""
    from flows.mission import STAGES as MISSION_STAGES
    from flows.mission import MissionConfig
    from flows.pipeline import STAGES, StageFailed, pipeline_flow
    from flows.progress import set_hook
    from flows.runners import RUNNERS
    from pipeline.build import check_name
    from pipeline.lake.query import query as run_query

    if runner not in RUNNERS:
        raise typer.BadParameter(f"use one of {', '.join(RUNNERS)}", param_hint="--runner")
    known = STAGES if data_only else MISSION_STAGES
    if until is not None and until not in known:
        raise typer.BadParameter(f"one of {', '.join(known)}", param_hint="--until")
    if policy and not Path(policy).is_dir():
        raise typer.BadParameter(f"{policy} is not a model folder", param_hint="--policy")
    try:
        check_name(dataset)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--dataset") from None
    root = resolve_root(lake)
    from flows.progress_lines import ProgressLines

    lines = ProgressLines(lambda t: console.print(esc(t)), enabled=not console.is_terminal)
    with console.status("pipeline…") as status:
        files = {"n": 0, "total": 0}

        def hook(event: str, payload: Any) -> None:
            lines(event, payload)
            if event == "wait":
                err.print(f"[yellow]{esc(payload)}[/yellow]")
            elif event == "stage":
                status.update(f"{payload}…")
            elif event == "start":
                files["total"] = payload["files"]
            elif event == "file":
                files["n"] += 1
                status.update(f"ingest {files['n']}/{files['total']} files")
            elif event == "label":
                status.update(f"label {payload['done']}/{payload['total']} questions")
            elif event == "sft" and "loss" in payload:
                status.update(f"sft step {payload['step']}: loss {payload['loss']:.3f}")
            elif event == "train" and "accuracy" in payload:
                status.update(f"train step {payload['step']}: accuracy {payload['accuracy']:.3f}")

        set_hook(hook)
        if not data_only:
            from pipeline.sandbox import SandboxUnavailable, run_python

            try:
                run_python("print(1)")
            except SandboxUnavailable as e:
                err.print(
                    f"[yellow]warning:[/yellow] the sandbox is unavailable ({esc(e)}); the mission "
                    "runs model code, so this run does the data stages only, labelling from "
                    "recorded attempts (as `flow run --data-only`). Install bubblewrap "
                    "(`make sandbox`) for the whole mission."
                )
                data_only = True
                until = until if until in STAGES else None  # the data stages, up to `until`
        mission = None
        if not data_only:
            mission = MissionConfig.quick() if quick else MissionConfig()
            mission = replace(mission, seed=seed)
        try:
            out = pipeline_flow(
                inputs=inputs,
                lake=root,
                policy=policy,
                dataset=dataset,
                runner=runner,
                workers=workers,
                address=address,
                mission=mission,
                stages=list(STAGES[: STAGES.index(until) + 1]) if until and not mission else None,
                until=until if mission else None,
            )
        except StageFailed as e:
            err.print(f"[red]pipeline failed:[/red] {esc(e)}")
            raise typer.Exit(1) from None
        except FileNotFoundError as e:
            err.print(f"[red]error:[/red] {esc(e)}")
            raise typer.Exit(2) from None
        finally:
            set_hook(None)
    from pipeline.report import stage_rows

    print_rows(stage_rows(out["stages"]), title="pipeline run", max_width=100)
    evaluation = out["results"].get("eval")
    if evaluation:
        print_rows(
            [
                {"stage": r["stage"], "model": r["model"]}
                | {m: round(v, 4) for m, v in r.items() if "@" in m}
                for r in evaluation["rows"]
            ],
            title=f"held-out {evaluation['eval_set']} ({evaluation['questions']} questions)",
            max_width=100,
        )
    print_rows(out["conservation"], title="counts per stage (whole lake)")
    for w in out.get("warnings", []):
        err.print(f"[yellow]warning:[/yellow] {esc(w)}")
    if not all(c["balanced"] for c in out["conservation"]):
        err.print("[red]counts do not add up[/red]: see the table above")
    console.rule("sample query")
    console.print(f"[dim]{esc(SAMPLE_QUERY)}[/dim]")
    print_rows(run_query(Lake(root), SAMPLE_QUERY).to_pylist())
    console.print(f"report: [bold]{esc(out['report'])}[/bold]")
    console.print(
        f'lake: [bold]{esc(root)}[/bold]  (try: flow query "SELECT reason, count(*) FROM quarantine GROUP BY 1")'
    )


@app.command()
def serve(
    config: Annotated[
        str | None,
        typer.Option(help="Deployments config (TOML; default flows/deployments.toml)."),
    ] = None,
    limit: Annotated[int, typer.Option(help="Flow runs at once.")] = 1,
) -> None:
    """Serve the scheduled deployments of a config (ingest, curate, label-build, train, full)
    against the Prefect API in PREFECT_API_URL (e.g. `prefect server start`); blocks."""
    from flows.deployments import DEFAULT_CONFIG, load
    from flows.deployments import serve as serve_deployments

    path = Path(config) if config else DEFAULT_CONFIG
    if not path.is_file():
        raise typer.BadParameter(f"no such config file: {path}", param_hint="--config")
    try:
        deployments = load(path)
    except (ValueError, OSError) as e:
        raise typer.BadParameter(str(e), param_hint="--config") from None
    print_rows(
        [
            {"deployment": f"pipeline/{d.name}", "cron": d.cron or "(on demand)"}
            | {"stages": ", ".join(d.stages)}
            for d in deployments
        ],
        title=f"serving {path}",
    )
    serve_deployments(path, limit=limit)

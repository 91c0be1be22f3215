"""The whole mission as one flow, and scheduled deployments."""

from __future__ import annotations

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
from flows.mission import RunConfig
from flows.options import configured
from pipeline.lake import Lake, resolve_root
from pipeline.terminal import esc


@app.command()
@configured(
    RunConfig,
    "inputs",
    "policy",
    "dataset",
    "data_only",
    "until",
    "quick",
    "real",
    "seed",
    runner="runner.runner",
    workers="runner.workers",
    address="runner.address",
    aliases={"policy": ("--model",)},
)
def run(config: RunConfig, lake: LakeOpt = None) -> None:
    """The main job as one Prefect flow: ingest, validate, dedup, then (by default) SFT of the
    nano policy, its K=8 live rollouts as difficulty labels, build, GRPO-TCR and the before/after
    evaluation; then the summary, the counts per stage and the run report's path. Rerun: only
    new work is done."""
    from flows.pipeline import STAGES, StageFailed, pipeline_flow
    from flows.progress import set_hook
    from pipeline.lake.query import query as run_query

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
                status.update(f"label {payload['done']}/{payload['total']} episodes")
            elif event == "eval" and "done" in payload:
                status.update(f"eval {payload['done']}/{payload['total']} episodes")
            elif event == "sft" and "loss" in payload:
                status.update(f"sft step {payload['step']}: loss {payload['loss']:.3f}")
            elif event == "train" and "accuracy" in payload:
                status.update(f"train step {payload['step']}: accuracy {payload['accuracy']:.3f}")

        set_hook(hook)
        if not config.data_only:
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
                config = config.without_model_code()
        mission, until, runner = config.mission(), config.until, config.runner
        try:
            out = pipeline_flow(
                inputs=list(config.inputs) or None,
                lake=root,
                policy=config.policy,
                dataset=config.dataset,
                runner=runner.runner or "threads",
                workers=runner.workers,
                address=runner.address,
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
                {"set": r.get("eval_set", evaluation["eval_set"]), "stage": r["stage"]}
                | {"model": r["model"]}
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
    from prefect.settings import PREFECT_API_URL

    from flows.deployments import DEFAULT_CONFIG, load
    from flows.deployments import serve as serve_deployments

    path = Path(config) if config else DEFAULT_CONFIG
    if not path.is_file():
        raise typer.BadParameter(f"no such config file: {path}", param_hint="--config")
    if not PREFECT_API_URL.value():
        # Prefect would serve against a server of this process's own: the schedules would end
        # with it, and Ctrl-C (sent to the whole process group) stops that server first
        err.print(
            "[red]error:[/red] flow serve needs a Prefect server that outlives it: start one "
            "(`prefect server start --host 127.0.0.1`) and set "
            "PREFECT_API_URL=http://127.0.0.1:4200/api (docs/howto-scheduled.md)"
        )
        raise typer.Exit(2)
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

"""What every command shares: the typer app, the consoles, the table printer, progress."""

from __future__ import annotations

import contextlib
import csv
import sys
from decimal import Decimal
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pipeline.lake import Lake
from pipeline.terminal import clean, esc, plain

HELP = {"help_option_names": ["-h", "--help"]}  # -h as well, on every command

app = typer.Typer(
    help="Agent trajectories -> canonical lake -> RL datasets -> GRPO-TCR.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=HELP,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("flow-rl-data")
        except PackageNotFoundError:  # run from a checkout that was never installed
            v = "(not installed: run `make setup`)"
        console.print(f"flow-rl-data {v}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Agent trajectories -> canonical lake -> RL datasets -> GRPO-TCR."""


console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

LakeOpt = Annotated[
    str | None,
    typer.Option(
        "--lake", envvar="FLOW_LAKE", help="Lake root: a path or fsspec URL (default data/lake)."
    ),
]

DEMO_DIR = "data/demo"
SAMPLE_QUERY = """SELECT source, source_format, count(*) AS trajectories, sum(num_tool_calls) AS tool_calls,
       round(avg(num_messages), 1) AS avg_messages, round(avg(reward), 3) AS mean_reward
FROM valid_trajectories GROUP BY ALL ORDER BY trajectories DESC"""


def _plain(v: Any) -> Any:
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


def _cell(v: Any) -> str:
    v = _plain(v)
    if v is None:
        return ""
    if isinstance(v, (list, dict)):
        return orjson.dumps(v, default=str).decode()
    return str(v)


def print_rows(
    rows: list[dict], fmt: str = "table", title: str | None = None, max_width: int = 60
) -> None:
    if fmt == "json":
        sys.stdout.write(
            orjson.dumps([{k: _plain(v) for k, v in r.items()} for r in rows], default=str).decode()
            + "\n"
        )
        return
    if fmt == "csv":  # on the terminal: control characters shown, never sent (--out keeps them)
        if rows:
            names = {k: clean(k) for k in rows[0]}
            w = csv.DictWriter(sys.stdout, fieldnames=list(names.values()), lineterminator="\n")
            w.writeheader()
            for r in rows:
                w.writerow({names[k]: clean(_cell(v)) for k, v in r.items()})
        return
    # cells are Text, never markup ([/asy] in a MATH problem is text), control characters shown
    table = Table(title=esc(title) if title else None, show_lines=False)
    for col in rows[0] if rows else []:
        table.add_column(Text(clean(col)), overflow="fold", max_width=max_width)
    for r in rows:
        cells = (_cell(v) for v in r.values())
        table.add_row(
            *(
                Text(clean(c if len(c) <= 4 * max_width else c[: 4 * max_width] + "…"))
                for c in cells
            )
        )
    console.print(table)
    console.print(f"[dim]{len(rows)} row(s)[/dim]")


def print_stage(stage: str, out: dict) -> None:
    """The one summary line of a stage's counts (``pipeline.report.stage_summary``, the same
    counts ``flow run``'s table shows), then the stage's warnings."""
    from pipeline.report.summary import stage_summary

    counts = stage_summary(stage, out)
    state = " (nothing new: done before)" if out.get("state") == "Cached" else ""
    line = plain({k.replace("_", " "): v for k, v in counts.items()})
    console.print(
        f"[bold]{esc(stage)}[/bold]{state}: {esc(line)}"
        if line
        else f"[bold]{esc(stage)}[/bold]{state}"
    )
    for w in out.get("warnings") or []:
        err.print(f"[yellow]warning:[/yellow] {esc(w)}")


@contextlib.contextmanager
def stage_progress(title: str) -> Any:
    """A spinner with the stage's count on a terminal; periodic plain lines in a log (stdout not
    a terminal: CI, nohup, a deployment), so a long stage is never silent."""
    from flows.progress import get_hook, set_hook
    from flows.progress_lines import ProgressLines, _measure

    lines = ProgressLines(lambda t: console.print(esc(t)), enabled=not console.is_terminal)
    previous = get_hook()
    with console.status(f"{title}…") as status:

        def hook(event: str, payload: Any) -> None:
            if event == "wait":
                err.print(f"[yellow]{esc(payload)}[/yellow]")
                return
            lines(event, payload)
            m = _measure(event, payload)
            if m is not None:
                what, done, total, detail = m
                count = f"{done}/{total}" if total else str(done)
                status.update(esc(f"{what} {count} {detail}".strip()))

        set_hook(hook)
        try:
            yield
        finally:
            set_hook(previous)


def _upstream(lake: str | None, stage: str) -> None:
    """Refuse a stage run out of order, saying what is missing and the command that makes it."""
    from pipeline.upstream import problems

    errors, warnings = problems(Lake(lake), stage)
    for w in warnings:
        err.print(f"[yellow]warning:[/yellow] {esc(w)}")
    if errors:
        for e in errors:
            err.print(f"[red]nothing to {stage}:[/red] {esc(e)}")
        raise typer.Exit(2)

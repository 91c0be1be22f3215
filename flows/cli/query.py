"""Ad-hoc DuckDB queries and the trajectory viewer."""

from __future__ import annotations

import os
from typing import Annotated

import orjson
import typer

from flows.cli.common import (
    LakeOpt,
    _plain,
    app,
    console,
    err,
    print_rows,
)
from flows.options import configured
from pipeline.lake import Lake, resolve_root
from pipeline.lake.query import AdHocQueryConfig
from pipeline.terminal import esc


@app.command()
@configured(
    AdHocQueryConfig,
    "format",
    "out",
    "limit",
    "memory_limit",
    "threads",
    timeout="timeout_seconds",
    short={"format": "-f"},
)
def query(
    sql: Annotated[
        str,
        typer.Argument(
            help="A SELECT over trajectories, questions, attempts, quarantine, ingest_log."
        ),
    ],
    config: AdHocQueryConfig,
    lake: LakeOpt = None,
) -> None:
    """Run read-only SQL over the lake with DuckDB."""
    from pipeline.lake.query import QueryError
    from pipeline.lake.query_process import bounded_stream

    out, format, limit = config.out, config.format, config.limit
    if reads_lake_tables(sql):  # SQL over no table (range(), literals) runs anywhere
        _require_lake(lake)
    try:
        batches = bounded_stream(Lake(lake), sql, config)
        if out:
            n = _write_result(batches, out, format)
            err.print(f"{n} row(s) written to {esc(out)}")
            return
        rows, more = [], 0
        for batch in batches:
            if limit and len(rows) >= limit:
                more += batch.num_rows  # counted, not kept: memory stays bounded
                continue
            rows += batch.to_pylist()
        if limit and len(rows) > limit:
            more += len(rows) - limit
            rows = rows[:limit]
    except QueryError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    except Exception as e:  # noqa: BLE001 - DuckDB errors are the user's SQL: show them plainly
        err.print(f"[red]query failed:[/red] {esc(e)}")
        if "file system operations are disabled" in str(e):
            root = resolve_root(lake)
            err.print(
                f"flow query reads the lake's tables and its published datasets only (files "
                f"under {esc(root)}/datasets/, e.g. SELECT * FROM "
                f"read_parquet('{esc(root)}/datasets/NAME/v1/rl/*.parquet')); query other files "
                "with DuckDB itself"
            )
        raise typer.Exit(1) from None
    print_rows(rows, format)
    if more:
        err.print(
            f"[yellow]{more} more row(s) not shown[/yellow]; use --limit N (0: all), or "
            "--format parquet --out FILE for every row"
        )


def reads_lake_tables(sql: str) -> bool:
    """Whether the SQL names one of the lake's tables or views (as a word)."""
    import re

    from pipeline.lake.query import VIEWS
    from schemas import TABLES

    names = "|".join(sorted({*TABLES, *VIEWS}, key=len, reverse=True))
    return re.search(rf"(?<![\w.'\"])(?:{names})(?![\w'\"])", sql, re.IGNORECASE) is not None


def _require_lake(lake: str | None) -> None:
    """A mistyped --lake is an error, not an empty answer."""
    from pipeline.upstream import missing_lake

    why = missing_lake(Lake(lake))
    if why is not None:
        err.print(f"[red]error:[/red] {esc(why)}")
        raise typer.Exit(2)


def _write_result(batches, out: str, fmt: str) -> int:
    """Every row to ``out`` (temp file, then rename: a failed query leaves no partial file)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    tmp = f"{out}.tmp-{os.getpid()}"
    n, writer = 0, None
    try:
        with open(tmp, "wb") as f:
            for batch in batches:
                if writer is None:
                    if fmt == "parquet":
                        writer = pq.ParquetWriter(f, batch.schema, compression="zstd")
                    elif fmt == "csv":
                        writer = pacsv.CSVWriter(f, batch.schema)
                    else:
                        writer = "json"
                if batch.num_rows == 0:
                    continue
                n += batch.num_rows
                if writer == "json":
                    for row in batch.to_pylist():
                        f.write(orjson.dumps({k: _plain(v) for k, v in row.items()}, default=str))
                        f.write(b"\n")
                else:
                    writer.write(pa.Table.from_batches([batch]))
            if writer not in (None, "json"):
                writer.close()
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return n


@app.command()
def show(
    trajectory_id: Annotated[
        str,
        typer.Argument(
            help="A trajectory id, or a record id (a dataset row's record_id: a trajectory, a "
            "pool question or an attempt), or a unique prefix (>= 6 chars)."
        ),
    ],
    lake: LakeOpt = None,
    max_chars: Annotated[int, typer.Option(help="Clip each text to this many characters.")] = 2000,
) -> None:
    """Render one trajectory (roles, reasoning, tool calls and results, reward), or the pool
    question or attempt a dataset row names."""
    from pipeline.show import check_id, find_record, render_record

    try:
        check_id(trajectory_id)  # a malformed id first, before the lake is looked for
    except ValueError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    _require_lake(lake)
    try:
        found = find_record(Lake(lake), trajectory_id)
    except ValueError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    if found is None:
        err.print(
            f"[red]no trajectory or record[/red] {esc(repr(trajectory_id))} in "
            f"{esc(resolve_root(lake))}"
        )
        raise typer.Exit(1)
    render_record(*found, console, max_chars=max_chars)

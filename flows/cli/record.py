"""The recording proxy and its commit into the lake."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.common import (
    LakeOpt,
    app,
    console,
    err,
)
from pipeline.lake import Lake, resolve_root
from pipeline.terminal import esc


@app.command()
def record(
    upstream: Annotated[
        str,
        typer.Option(help="OpenAI-compatible base URL to forward to (e.g. a `vllm serve`)."),
    ],
    lake: LakeOpt = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8100,
    instance: Annotated[
        str | None,
        typer.Option(help="Name of this proxy's log (default <hostname>-<port>)."),
    ] = None,
    wal: Annotated[
        str | None,
        typer.Option(help="Log folder (default ROOT/recorder/wal; needed for a remote lake)."),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds an upstream call may take.")] = 600.0,
    max_request_mb: Annotated[
        float, typer.Option(help="Largest request body accepted, in MB (413 beyond).")
    ] = 32.0,
    header_seconds: Annotated[
        float, typer.Option(help="Seconds a client may take to send its request headers.")
    ] = 10.0,
    allow_origin: Annotated[
        list[str] | None,
        typer.Option(
            help="A browser origin allowed to call the recorder (default none: requests "
            "carrying an Origin header are refused). Repeatable."
        ),
    ] = None,
) -> None:
    """Record a live agent: an OpenAI-compatible proxy that logs every chat call (durably,
    before answering) for `flow record-commit` to turn into lake episodes."""
    from pipeline.recorder.calls import public_url
    from pipeline.recorder.config import RecorderConfig, wal_dir
    from pipeline.recorder.errors import RecorderError
    from pipeline.recorder.proxy import serve
    from pipeline.recorder.wal import WAL

    try:
        config = RecorderConfig(
            upstream=upstream,
            host=host,
            port=port,
            instance=instance,
            wal=wal,
            timeout=timeout,
            max_request_bytes=int(max_request_mb * 1e6),
            header_seconds=header_seconds,
            allowed_origins=tuple(allow_origin or ()),
        )
    except RecorderError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    try:
        log = WAL(wal_dir(Lake(lake), wal), config.instance_name(), config.segment_bytes)
    except RecorderError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    earlier = (
        f"; {log.recovered} call(s) from earlier runs are in the log"
        + (f" ({log.torn_bytes} bytes of a torn last line cut)" if log.torn_bytes else "")
        if log.recovered or log.torn_bytes
        else ""
    )

    def ready() -> None:
        err.print(
            f"recording http://{host}:{port}/v1 -> {esc(public_url(upstream))}; log {esc(log.folder)}{earlier}\n"
            "commit episodes into the lake with `flow record-commit`",
            soft_wrap=True,
        )

    serve(config, log, on_ready=ready)


@app.command("record-commit")
def record_commit(
    lake: LakeOpt = None,
    wal: Annotated[str | None, typer.Option(help="Log folder (default ROOT/recorder/wal).")] = None,
    idle_seconds: Annotated[
        float, typer.Option(help="Commit an unfinished episode after this long without a call.")
    ] = 600.0,
    flush: Annotated[bool, typer.Option(help="Commit every episode now, finished or not.")] = False,
) -> None:
    """Commit the recorder's finished episodes into the lake (the `recorded` source)."""
    from flows.record import record_flow
    from pipeline.recorder.errors import RecorderError

    try:
        out = record_flow(lake=resolve_root(lake), wal=wal, idle_seconds=idle_seconds, flush=flush)
    except RecorderError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    ing = out.get("ingest") or {}
    console.print(
        f"calls read {out['calls_read']}: committed now {out['calls_committed']}, "
        f"earlier {out['calls_committed_before']}, in open episodes {out['calls_open']}"
    )
    if out["episodes_committed"]:
        closed = ", ".join(f"{k} {v}" for k, v in sorted(out["closed_by"].items()))
        console.print(
            f"episodes committed {out['episodes_committed']} ({closed}): "
            f"{ing.get('accepted', 0)} trajectories, {ing.get('quarantined', 0)} quarantined "
            f"-> {esc(out['episode_file'])}"
        )
    if out["episodes_open"]:
        console.print(f"episodes still open: {out['episodes_open']}")
    if out["torn_bytes"] or out["corrupt_lines"]:
        console.print(
            f"log repairs: {out['torn_bytes']} bytes of torn last lines cut (never acknowledged), "
            f"{out['corrupt_lines']} unreadable lines skipped"
        )
    if out["note"]:
        console.print(out["note"])

"""The recording proxy and its commit into the lake."""

from __future__ import annotations

import typer

from flows.cli.common import (
    LakeOpt,
    app,
    console,
    err,
    print_stage,
)
from flows.options import configured
from pipeline.lake import Lake, resolve_root
from pipeline.recorder.config import CommitConfig, RecorderConfig
from pipeline.terminal import esc, plain


@app.command()
@configured(
    RecorderConfig,
    "upstream",
    "host",
    "port",
    "instance",
    "wal",
    "timeout",
    "max_request_mb",
    "header_seconds",
    allow_origin="allowed_origins",
    required=("upstream",),
)
def record(config: RecorderConfig, lake: LakeOpt = None) -> None:
    """Record a live agent: an OpenAI-compatible proxy that logs every chat call (durably,
    before answering) for `flow record-commit` to turn into lake episodes. Point the agent's
    OpenAI client at http://HOST:PORT/v1 (base_url=, or OPENAI_BASE_URL)."""
    from pipeline.recorder.calls import public_url
    from pipeline.recorder.config import wal_dir
    from pipeline.recorder.errors import RecorderError
    from pipeline.recorder.proxy import serve
    from pipeline.recorder.wal import WAL

    host, port, upstream, wal = config.host, config.port, config.upstream, config.wal
    try:
        log = WAL(wal_dir(Lake(lake), wal), config.instance_name(), config.segment_bytes)
    except RecorderError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    earlier = (
        f"; {log.recovered} call(s) from earlier runs are in the log"
        + (f" ({log.torn_bytes} bytes of a torn last line cut)" if log.torn_bytes else "")
        + (
            f"; {log.lost} answer(s) the last run logged but died before sending are marked "
            "unseen (a client's re-sent request replaces them)"
            if log.lost
            else ""
        )
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
    from pipeline import stop

    if stop.requested():
        err.print(
            "stopped on SIGTERM: the calls in flight were answered and logged, the log is "
            f"sealed ({log.folder}); nothing was discarded. Commit with `flow record-commit`."
        )


@app.command("record-commit")
@configured(CommitConfig, "wal", "idle_seconds", "flush")
def record_commit(config: CommitConfig, lake: LakeOpt = None) -> None:
    """Commit the recorder's finished episodes into the lake (the `recorded` source)."""
    from flows.record import record_flow
    from pipeline.recorder.errors import RecorderError

    try:
        out = record_flow(lake=resolve_root(lake), config=config)
    except RecorderError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    ing = out.get("ingest") or {}
    print_stage("record", out)
    console.print(
        f"  calls: committed now {out['calls_committed']}, earlier "
        f"{out['calls_committed_before']}, in open episodes {out['calls_open']}"
    )
    if out["episodes_committed"]:
        closed = plain(dict(sorted(out["closed_by"].items())))
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
    for w in out.get("warnings", []):
        err.print(f"[yellow]warning:[/yellow] {esc(w)}")

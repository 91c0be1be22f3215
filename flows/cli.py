"""The ``flow`` command line. Every command takes ``--lake ROOT`` (or ``FLOW_LAKE``)."""

from __future__ import annotations

import contextlib
import csv
import os
import signal
import sys
from collections import Counter
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

# Prefect reads these at import: no telemetry (no network here), quiet logs under a progress bar.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
# The first start of the local server migrates a fresh database: allow it more than the 20 s default.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
# vLLM must not reconfigure logging under Prefect's handlers (a deadlock: rollout/engines.py)
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
# torch's C++ warnings (NUMA binding at every vLLM CPU engine start) say nothing a user acts on;
# read once when torch loads, so set before anything imports it
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

import orjson  # noqa: E402
import typer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402
from rich.text import Text  # noqa: E402

from pipeline import stop  # noqa: E402
from pipeline.lake import Lake, resolve_root  # noqa: E402
from pipeline.terminal import clean, esc  # noqa: E402

app = typer.Typer(
    help="Agent trajectories -> canonical lake -> RL datasets -> GRPO-TCR.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
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


def _run_ingest(
    paths: list[str],
    lake: str,
    source: str | None,
    fmt: str | None,
    force: bool,
    eval_sets: list[str] | None = None,
    caps: dict | None = None,
) -> dict:
    from flows.ingest import ingest_flow
    from flows.progress import set_hook

    progress = Progress(
        TextColumn("[bold]ingest"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
    task_id = None

    def hook(event: str, payload: Any) -> None:
        nonlocal task_id
        if event == "wait":
            err.print(f"[yellow]{esc(payload)}[/yellow]")
        elif event == "start":
            task_id = progress.add_task("", total=payload["files"])
        elif event == "file" and task_id is not None:
            progress.update(task_id, advance=1, description=Path(payload["path"]).name[-40:])

    set_hook(hook)
    try:
        with progress:
            return ingest_flow(
                paths=paths,
                lake=lake,
                source=source,
                format=fmt,
                force=force,
                eval_sets=eval_sets,
                **(caps or {}),
            )
    finally:
        set_hook(None)


def _print_ingest(result: dict) -> None:
    """Per file for small runs; per source and format when many files were read."""
    files = result["files"]
    group = len(files) > 30
    agg: dict[tuple, dict] = {}
    for r in files:
        key = (r["source"], r["reader"], r["status"]) if group else (r["path"],)
        a = agg.setdefault(
            key,
            {
                "files": 0,
                "read": 0,
                "ok": 0,
                "quarantined": 0,
                "traj": 0,
                "questions": 0,
                "attempts": 0,
                "reasons": {},
            },
        )
        a["files"] += 1
        a["read"] += r["records_read"]
        a["ok"] += r["accepted"]
        a["quarantined"] += r["quarantined"]
        a["traj"] += r["rows"].get("trajectories", 0)
        a["questions"] += r["rows"].get("questions", 0)
        a["attempts"] += r["rows"].get("attempts", 0)
        for k, v in r["reasons"].items():
            a["reasons"][k] = a["reasons"].get(k, 0) + v
        a["_r"] = r
    rows = []
    for key, a in agg.items():
        r = a.pop("_r")
        head = (
            {"source": key[0], "format": key[1], "status": key[2]}
            if group
            else {"file": Path(r["path"]).name, "format": r["reader"], "status": r["status"]}
        )
        rows.append(
            head
            | {k: v for k, v in a.items() if k != "reasons" and (group or k != "files")}
            | {"reasons": ", ".join(f"{k}={v}" for k, v in sorted(a["reasons"].items()))}
        )
    print_rows(rows, title=f"ingest into {result['lake']}", max_width=36)
    t = result["totals"]
    console.print(
        f"[bold]records read {t.get('records_read', 0)} = accepted {t.get('accepted', 0)} + quarantined {t.get('quarantined', 0)}[/bold]; "
        f"rows: trajectories {t.get('trajectories', 0)}, questions {t.get('questions', 0)}, attempts {t.get('attempts', 0)}; "
        f"files: "
        + ", ".join(f"{k[6:]} {v}" for k, v in sorted(t.items()) if k.startswith("files_"))
    )
    skipped = result.get("skipped") or []
    if skipped:
        kinds = Counter(_kind(p) for p in skipped)
        shown = ", ".join(esc(Path(p).name) for p in skipped[:5]) + (
            " …" if len(skipped) > 5 else ""
        )
        console.print(
            f"[yellow]{len(skipped)} file(s) skipped, not of a kind ingest reads[/yellow] "
            f"({esc(', '.join(f'{k} {v}' for k, v in sorted(kinds.items())))}): {shown}. "
            "Readable: .jsonl .ndjson .json .traj .parquet, optionally .gz .zst .bz2 .xz; "
            "unpack archives (.tar.gz, .zip) first."
        )


def _kind(path: str) -> str:
    name = Path(path).name.lower()
    for suffix in (".tar.gz", ".tgz", ".tar.zst", ".tar", ".zip", ".7z", ".rar"):
        if name.endswith(suffix):
            return f"{suffix} archive"
    return Path(name).suffix or "no suffix"


@app.command()
def ingest(
    paths: Annotated[list[str], typer.Argument(help="Files or folders (local or fsspec URLs).")],
    lake: LakeOpt = None,
    source: Annotated[
        str | None,
        typer.Option(help="Source name for every file (default: the top folder under PATH)."),
    ] = None,
    format: Annotated[
        str | None, typer.Option("--format", help="Force a reader (see `flow formats`).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Re-ingest files already in the lake.")] = False,
    eval_set: Annotated[
        list[str] | None,
        typer.Option(
            "--eval-set",
            help="Register a question pool (dataset or dataset/split) as an evaluation set of "
            "the lake: dedup keeps it and its near-duplicates out of training. Repeatable.",
        ),
    ] = None,
    max_records_per_file: Annotated[
        int | None,
        typer.Option(help="Stop reading a file after this many records (the rest: one row)."),
    ] = None,
    max_seconds_per_file: Annotated[
        float | None,
        typer.Option(help="Stop reading a file after this many seconds (the rest: one row)."),
    ] = None,
) -> None:
    """Ingest trace files into the lake: canonical rows, quarantine, ingest log."""
    if format:
        from pipeline.ingest.registry import by_name

        try:
            by_name(format)
        except KeyError as e:
            raise typer.BadParameter(str(e.args[0]), param_hint="--format") from None
    try:
        caps = {"max_records_per_file": max_records_per_file}
        caps["max_seconds_per_file"] = max_seconds_per_file
        result = _run_ingest(paths, resolve_root(lake), source, format, force, eval_set, caps)
    except (FileNotFoundError, ValueError) as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    _print_ingest(result)
    if result.get("eval_sets"):
        console.print(
            f"evaluation sets of this lake: {esc(', '.join(result['eval_sets']))} "
            "(dedup keeps them out of training)"
        )


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


@app.command()
def judge(
    model: Annotated[
        str, typer.Option(help="The judge: a local model folder, or an OpenAI-compatible base URL.")
    ],
    lake: LakeOpt = None,
    target: Annotated[
        str, typer.Option(help="trajectories (valid ones) | rollouts")
    ] = "trajectories",
    limit: Annotated[int | None, typer.Option(help="Judge at most this many.")] = None,
    backend: Annotated[str, typer.Option(help="auto | vllm | transformers | openai")] = "auto",
    served_model: Annotated[
        str | None, typer.Option(help="The endpoint's model name (default: its first).")
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="Tokens the judge may write.")] = 512,
) -> None:
    """Judge trajectories or rollouts with a reasoning reward model: think, critique, score
    into the `judgements` table (cached per judge revision)."""
    from flows.judge import judge_flow
    from pipeline.judge.config import BACKENDS
    from pipeline.judge.errors import JudgeError
    from pipeline.judge.stage import TARGETS

    if target not in TARGETS:
        raise typer.BadParameter(" | ".join(TARGETS), param_hint="--target")
    if backend not in BACKENDS:
        raise typer.BadParameter(" | ".join(BACKENDS), param_hint="--backend")
    try:
        out = judge_flow(
            model=model,
            lake=resolve_root(lake),
            target=target,
            limit=limit,
            backend=backend,
            served_model=served_model,
            max_tokens=max_tokens,
        )
    except JudgeError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    s = out["status"]
    console.print(
        f"{out['target']}: {out['candidates']} candidates, {out['judged']} judged, "
        f"{out['cached']} already judged by {esc(out['judge'])}; parses ok {s.get('ok', 0)}, "
        f"partial {s.get('partial', 0)}, failed {s.get('failed', 0)}"
        + (f"; mean score {out['score_mean']:.3f}" if out["score_mean"] is not None else "")
    )
    for reason, n in sorted(out["reasons"].items(), key=lambda kv: -kv[1]):
        console.print(f"  failed: {esc(reason)} x{n}")
    if out["note"]:
        console.print(out["note"])


def _print_validate(out: dict) -> None:
    rows = [
        {"table": t}
        | {
            k: c.get(k, 0)
            for k in ("rows", "passed", "quarantined", "flagged", "parts", "parts_skipped")
        }
        for t, c in out["tables"].items()
    ]
    print_rows(rows, title=f"validation (suite {out['suite_version']})")
    failing = [r for r in out["rules"] if r["failed"]]
    if failing:
        print_rows(
            [
                {k: r[k] for k in ("table", "rule", "severity", "evaluated", "failed")}
                for r in failing
            ],
            title="failing expectations",
        )
    else:
        console.print("[green]every expectation passed on the rows validated in this run[/green]")
    if out.get("docs_index"):
        console.print(f"Data Docs: [bold]{esc(out['docs_index'])}[/bold]")


@app.command()
def validate(
    lake: LakeOpt = None,
    table: Annotated[
        list[str] | None, typer.Option("--table", help="Validate only these tables (repeatable).")
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Re-validate parts already validated with this suite version.")
    ] = False,
    max_messages: Annotated[
        int, typer.Option(help="Warn above this many messages per trajectory.")
    ] = 400,
) -> None:
    """Run the Great Expectations suites; failing rows go to quarantine with the rule's name."""
    from flows.validate import validate_flow

    bad = set(table or []) - {"trajectories", "questions", "attempts"}
    if bad:
        raise typer.BadParameter(f"unknown table(s) {sorted(bad)}", param_hint="--table")
    with console.status("validating with Great Expectations…"):
        out = validate_flow(
            lake=resolve_root(lake), tables=table, force=force, max_messages=max_messages
        )
    _print_validate(out)


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


def _print_dedup(out: dict) -> None:
    c = out["counts"]
    p = out["params"]
    console.print(
        f"[bold]dedup[/bold] ({p['backend']} signatures, {p['lsh']} LSH, b={p['bands']} r={p['rows']}, threshold {p['threshold']})"
    )
    rows = [
        {
            "scope": "questions (distinct ids)",
            "in": c["questions_distinct"],
            "kept": c["questions_kept"],
            "exact": c["question_rows"] - c["questions_distinct"],
            "near": c["questions_near_duplicates"],
        },
        {
            "scope": "trajectories",
            "in": c.get("trajectory_rows", 0),
            "kept": c.get("trajectories_kept", 0),
            "exact": c.get("trajectory_exact_duplicates", 0),
            "near": c.get("trajectory_near_duplicates", 0),
        },
    ]
    print_rows(rows)
    console.print(
        f"evaluation sets: {c['questions_in_eval_sets']} unique questions in one, {c['questions_contaminated']} training questions near-duplicate one; train-eligible: {c['questions_train_eligible']}"
    )
    for w in out.get("warnings", []):
        err.print(f"[yellow]warning:[/yellow] {esc(w)}")


@app.command()
def dedup(
    lake: LakeOpt = None,
    threshold: Annotated[float, typer.Option(help="Jaccard threshold for near-duplicates.")] = 0.8,
    backend: Annotated[str, typer.Option(help="Signatures: auto | datasketch | rensa.")] = "auto",
    lsh: Annotated[
        str, typer.Option(help="LSH: bands (partitioned) | datasketch (MinHashLSH index).")
    ] = "bands",
    eval_set: Annotated[
        list[str] | None,
        typer.Option(
            "--eval-set", help="Registered evaluation sets (dataset or dataset/split; repeatable)."
        ),
    ] = None,
) -> None:
    """Exact and MinHash-LSH dedup across sources, and decontamination against evaluation sets."""
    from flows.dedup import dedup_flow

    if backend not in ("auto", "datasketch", "rensa") or lsh not in ("bands", "datasketch"):
        raise typer.BadParameter("backend: auto|datasketch|rensa; lsh: bands|datasketch")
    _upstream(lake, "dedup")
    with console.status("deduplicating…"):
        out = dedup_flow(
            lake=resolve_root(lake),
            threshold=threshold,
            backend=backend,
            lsh=lsh,
            eval_sets=eval_set,
        )
    _print_dedup(out)


def _print_label(out: dict) -> None:
    from pipeline.select import SelectConfig, pass_rate_bin

    console.print(f"[bold]label[/bold] {esc(out['stats'])}")
    hist: dict[str, list] = {}
    for h in out["histogram"]:
        hist.setdefault(h["label_source"], []).append(h)
    for src, rows in hist.items():
        buckets = {"all wrong": 0, "hard": 0, "medium": 0, "easy": 0, "all right": 0}
        for h in rows:  # the bins `flow build` balances (pipeline.select.pass_rate_bin)
            buckets[pass_rate_bin(h["pass_rate"], SelectConfig())] += h["questions"]
        console.print(f"  {esc(src)}: " + ", ".join(f"{k} {v}" for k, v in buckets.items()))
    if "judge" in out:
        j = out["judge"]
        console.print(
            f"[bold]judge[/bold] {esc(j['judge'])}: {j['judged']} rollouts judged now, "
            f"{j['cached']} before; parses {esc(j['status'])}"
        )
        for sig in out["judge_signal"]:
            console.print(
                f"  {sig['bin']}: {sig['questions']} questions, mean score {sig['judge_score']} "
                f"(right {sig['judge_score_correct']}, wrong {sig['judge_score_wrong']})"
            )


@app.command()
def label(
    lake: LakeOpt = None,
    policy: Annotated[
        str | None,
        typer.Option(
            help="Model folder for live rollouts (default: recorded labels from attempts)."
        ),
    ] = None,
    k: Annotated[int, typer.Option(help="Rollouts per question.")] = 8,
    backend: Annotated[str, typer.Option(help="auto | vllm | transformers")] = "auto",
    limit: Annotated[int | None, typer.Option(help="Label at most this many questions.")] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(help="Tokens per assistant turn (default: the policy's own, else 512)."),
    ] = None,
    engines: Annotated[
        int,
        typer.Option(help="Engines labelling shards of the questions at once (one per GPU)."),
    ] = 1,
    runner: Annotated[
        str,
        typer.Option(help="Where the engines run (with --engines > 1): processes | dask | ray."),
    ] = "processes",
    address: Annotated[
        str | None, typer.Option(help="Address of a running Dask or Ray cluster.")
    ] = None,
    judge: Annotated[
        str | None,
        typer.Option(
            help="Then judge the rollouts: a judge model folder or an OpenAI-compatible base URL."
        ),
    ] = None,
    judge_backend: Annotated[
        str, typer.Option(help="The judge's engine: auto | vllm | transformers | openai")
    ] = "auto",
    judge_max_tokens: Annotated[int, typer.Option(help="Tokens the judge may write.")] = 512,
) -> None:
    """Difficulty labels: pass rate k/K per unique question (and, with --judge, the judge's
    score of the rollouts behind each)."""
    from flows.label import label_flow
    from flows.runners import RUNNERS, task_runner
    from pipeline.judge.errors import JudgeError

    if policy and not Path(policy).is_dir():
        raise typer.BadParameter(
            f"{policy} is not a model folder (hub names need the network; download first)",
            param_hint="--policy",
        )
    if engines < 1:
        raise typer.BadParameter("at least 1", param_hint="--engines")
    if runner not in RUNNERS:
        raise typer.BadParameter(f"use one of {', '.join(RUNNERS)}", param_hint="--runner")
    if engines > 1 and not policy:
        raise typer.BadParameter(
            "engines label live rollouts: give --policy", param_hint="--engines"
        )
    if judge and not policy:
        raise typer.BadParameter(
            "the judge scores live rollouts: give --policy", param_hint="--judge"
        )
    fl = label_flow
    if engines > 1:  # one worker per engine
        fl = label_flow.with_options(task_runner=task_runner(runner, engines, address))
    _upstream(lake, "label")
    try:
        with stage_progress("labelling"):
            out = fl(
                lake=resolve_root(lake),
                policy=policy,
                k=k,
                backend=backend,
                limit=limit,
                max_tokens=max_tokens,
                engines=engines,
                judge=judge,
                judge_backend=judge_backend,
                judge_max_tokens=judge_max_tokens,
            )
    except JudgeError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    _print_label(out)


def _print_build(m: dict) -> None:
    rl, sft = m["rl"], m["sft"]
    console.print(
        f"[bold]dataset[/bold] {esc(m['name'])} v{m['version']}{' (unchanged)' if m.get('unchanged') else ''}: rl {rl['rows']} questions (labels: {esc(rl['label_source'])}), sft {sft['rows']} trajectories"
    )
    console.print(
        f"  pyramid {esc(rl['pyramid'])} (targets {esc(rl['targets'])}); supply {esc(rl['supply'])}; dropped {esc(rl['dropped'])}"
    )
    if rl["short_bins"]:
        console.print(
            f"  [yellow]short bins[/yellow] {esc(rl['short_bins'])}: the largest dataset meeting the ratios has {rl['largest_size_meeting_ratios']} questions"
        )
    div = rl.get("diversity")
    if div:
        from pipeline.diversity.measure import side_by_side

        rows = side_by_side(div)
        table = Table(*rows[0], title="diversity (bits)", title_justify="left")
        for r in rows:
            table.add_row(*("" if v is None else esc(str(v)) for v in r.values()))
        console.print(table)
        if div["warning"]:
            console.print(f"  [yellow]warning:[/yellow] {esc(div['warning'])}")
    console.print(
        f"  [bold]{esc(m['path'])}[/bold] (manifest.json, rl/, sft/, exports/, pyramid.png)"
    )


@app.command()
def build(
    lake: LakeOpt = None,
    name: Annotated[str, typer.Option(help="Dataset name (datasets/<name>/v<N>).")] = "default",
    size: Annotated[
        int | None,
        typer.Option(help="Requested RL size (default: the largest meeting the ratios)."),
    ] = None,
    seed: int = 0,
    label_source: Annotated[
        str | None, typer.Option(help="recorded | rollouts (default: rollouts if any).")
    ] = None,
    tool_arguments: Annotated[
        str,
        typer.Option(
            help="Tool-call arguments in the TRL export: dict (TRL's shape; Qwen2.5, Llama-3.1, "
            "GPT-OSS templates) | string (templates that print them as they are, DeepSeek-V3)."
        ),
    ] = "dict",
    source_system_prompts: Annotated[
        bool,
        typer.Option(
            help="Keep each trajectory's own system prompt in the SFT rows instead of the "
            "dataset's one prompt."
        ),
    ] = False,
    min_judge_score: Annotated[
        float | None,
        typer.Option(
            help="SFT rows only from trajectories the judge (`flow judge`) scored at least this."
        ),
    ] = None,
    objective: Annotated[
        str,
        typer.Option(
            help="entropy: maximise the feature dimensions' entropy inside the pyramid | "
            "strata: draw evenly over (domain, source, tool pattern)."
        ),
    ] = "entropy",
    diversity_target: Annotated[
        float, typer.Option(help="Joint entropy (bits) below which the build warns.")
    ] = 2.5,
    diversity_dimensions: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated feature dimensions (default: all of question_features: "
            "domain, source, tool_pattern, behaviour, tool_calls, error_recovery, "
            "verification, length)."
        ),
    ] = None,
) -> None:
    """Build a versioned dataset: RL pyramid, SFT selection, shards, manifest, exports."""
    from flows.build import build_flow
    from pipeline.build import check_name

    try:
        check_name(name)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--name") from None
    from pipeline.exports.config import TOOL_ARGUMENTS

    if tool_arguments not in TOOL_ARGUMENTS:
        raise typer.BadParameter(" | ".join(TOOL_ARGUMENTS), param_hint="--tool-arguments")
    from pipeline.diversity.config import DiversityConfig
    from pipeline.diversity.errors import DiversityError
    from pipeline.select import SelectConfig

    dims = [d.strip() for d in diversity_dimensions.split(",")] if diversity_dimensions else None
    try:  # the configs' own checks, before any work
        DiversityConfig(
            **({"dimensions": tuple(dims)} if dims else {}), target_bits=diversity_target
        )
        SelectConfig(objective=objective)
    except DiversityError as e:
        raise typer.BadParameter(str(e), param_hint="--diversity-dimensions") from None
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--objective") from None
    _upstream(lake, "build")
    with console.status("building…"):
        m = build_flow(
            lake=resolve_root(lake),
            name=name,
            size=size,
            seed=seed,
            label_source=label_source,
            tool_arguments=tool_arguments,
            keep_source_system_prompts=source_system_prompts,
            min_judge_score=min_judge_score,
            objective=objective,
            diversity_target=diversity_target,
            diversity_dimensions=dims,
        )
    _print_build(m)


@app.command()
def sft(
    dataset: Annotated[
        str, typer.Option(help="A published dataset folder: <lake>/datasets/<name>/v<N>.")
    ],
    out: Annotated[
        str, typer.Option(help="Run folder (checkpoints, metrics.jsonl, sft_curves.png).")
    ] = "runs/sft",
    model: Annotated[
        str | None,
        typer.Option(help="A local model folder (default: the nano policy, from scratch)."),
    ] = None,
    steps: int = 300,
    batch_size: int = 32,
    lr: Annotated[
        float | None, typer.Option(help="Default 3e-3 for the nano policy, 1e-5 for a model.")
    ] = None,
    max_turns: int = 4,
    tools: str = "python",
    seed: Annotated[
        int, typer.Option(help="The initial weights' (nano) and data order's seed.")
    ] = 0,
) -> None:
    """Supervised fine-tuning on a dataset's SFT split: the policy RL starts from."""
    from flows.sft import sft_flow

    if not (Path(dataset) / "sft").is_dir():
        raise typer.BadParameter(
            f"{dataset} has no sft/ shards (build one with `flow build`)", param_hint="--dataset"
        )
    from trainer.train import TOOLS

    if tools not in TOOLS:
        raise typer.BadParameter(" | ".join(TOOLS), param_hint="--tools")
    try:
        with stage_progress("sft"):
            res = sft_flow(
                dataset=dataset,
                out=out,
                model=model,
                steps=steps,
                batch_size=batch_size,
                lr=lr,
                max_turns=max_turns,
                tools=tools,
                seed=seed,
            )
    except ValueError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    first, last = res["first"], res["last"]
    if last is None:
        console.print(f"nothing to do: {esc(out)} already has {steps} steps")
        return
    console.print(
        f"SFT {res['steps']} steps: loss {first['loss']:.4f} -> {last['loss']:.4f}; "
        f"policy: {esc(out)}/checkpoint-latest; curve: {esc(out)}/sft_curves.png"
    )


@app.command()
def train(
    dataset: Annotated[
        str, typer.Option(help="A published dataset folder: <lake>/datasets/<name>/v<N>.")
    ],
    model: Annotated[str, typer.Option(help="The SFT policy's model folder.")],
    out: Annotated[
        str,
        typer.Option(help="Run folder (checkpoints, metrics.jsonl, curves.png); rerun to resume."),
    ] = "runs/grpo-tcr",
    steps: int = 100,
    prompts_per_step: int = 8,
    group_size: int = 8,
    lr: float = 1e-6,
    max_tokens: Annotated[
        int | None,
        typer.Option(help="Tokens per assistant turn (default: the policy's own, else 256)."),
    ] = None,
    max_turns: Annotated[
        int | None,
        typer.Option(
            help="Agent turns per episode: tool call, result, ... answer (default: the loop the "
            "policy was trained with, its agent_loop.json, else 4)."
        ),
    ] = None,
    tools: Annotated[
        str | None,
        typer.Option(
            help="python (the sandboxed interpreter) | none (one turn, no tool); default: the "
            "policy's own loop, else python."
        ),
    ] = None,
    minibatches: Annotated[
        int,
        typer.Option(
            help="Optimizer steps per rollout batch: after the first the policy is off the "
            "rollouts' and the clip acts (verl's ppo_mini_batch_size)."
        ),
    ] = 4,
    ppo_epochs: Annotated[int, typer.Option(help="Passes over each rollout batch.")] = 1,
    seed: int = 0,
    rollout_backend: Annotated[
        str, typer.Option(help="auto (vLLM where installed) | vllm | transformers.")
    ] = "auto",
    eval_set: Annotated[
        str | None,
        typer.Option(help="Evaluate before and after on this lake dataset (e.g. aime2024)."),
    ] = None,
    eval_limit: int = 20,
    eval_every: Annotated[
        int,
        typer.Option(
            help="With --eval-set: evaluate every N steps and keep the best held-out checkpoint "
            "as OUT/checkpoint-best (0: off)."
        ),
    ] = 0,
    judge: Annotated[
        str | None,
        typer.Option(
            help="A reasoning reward model (model folder or OpenAI-compatible URL) for "
            "--judge-weight and --refine (docs/judge.md)."
        ),
    ] = None,
    judge_weight: Annotated[
        float, typer.Option(help="Reagent-R: R = R_rule + λ·judge score (0: off).")
    ] = 0.0,
    refine: Annotated[
        bool,
        typer.Option(help="Reagent-U: each group pools K initial and K critique-refined episodes."),
    ] = False,
    adaptive: Annotated[
        bool,
        typer.Option(
            help="Adaptive difficulty: track each question's pass rate; all-correct ones retire, "
            "all-wrong ones back off, draws follow the dataset's pyramid (docs/training.md)."
        ),
    ] = False,
    lake: LakeOpt = None,
) -> None:
    """GRPO-TCR training on a dataset's RL split (resumes from OUT/checkpoint-latest)."""
    if (judge_weight or refine) and not judge:
        raise typer.BadParameter("--judge-weight and --refine need --judge", param_hint="--judge")

    if not (Path(dataset) / "rl").is_dir():
        raise typer.BadParameter(
            f"{dataset} has no rl/ shards (build one with `flow build`)", param_hint="--dataset"
        )
    from trainer.train import ROLLOUT_BACKENDS, TOOLS

    if tools is not None and tools not in TOOLS:
        raise typer.BadParameter(" | ".join(TOOLS), param_hint="--tools")
    if rollout_backend not in ROLLOUT_BACKENDS:
        raise typer.BadParameter(" | ".join(ROLLOUT_BACKENDS), param_hint="--rollout-backend")
    if max_turns is not None and max_turns < 1:
        raise typer.BadParameter("at least 1", param_hint="--max-turns")
    held_out = eval_questions(lake, eval_set, eval_limit) if eval_set else None
    if eval_set and not held_out:
        raise typer.BadParameter(
            f"no questions for dataset {eval_set!r} in the lake", param_hint="--eval-set"
        )
    from flows.train import train_flow

    with stage_progress("train"):
        out_ = train_flow(
            eval_questions=held_out,
            dataset=dataset,
            model=model,
            out=out,
            steps=steps,
            prompts_per_step=prompts_per_step,
            group_size=group_size,
            lr=lr,
            max_tokens=max_tokens,
            max_turns=max_turns,
            rollout_backend=rollout_backend,
            tools=tools,
            lake=resolve_root(lake) if eval_set else None,
            eval_set=eval_set,
            options=(
                {"minibatches": minibatches, "ppo_epochs": ppo_epochs, "seed": seed}
                | ({"eval_every": eval_every} if eval_every else {})
                | (
                    {"judge": judge, "judge_weight": judge_weight, "refine": refine}
                    if judge and (judge_weight or refine)
                    else {}
                )
                | ({"adaptive": True} if adaptive else {})
            )
            or None,
        )
    _print_train(out_, out)


def _print_train(out_: dict, out: str) -> None:
    console.print(
        f"trained {out_['steps']} steps; last: {esc(out_['last'])}; curves: {esc(out)}/curves.png"
    )
    if out_.get("stopped"):
        console.print(f"[yellow]stopped early[/yellow]: {esc(out_['stopped'])}")
    if out_["eval_before"]:
        keep = lambda r: {m: round(v, 4) for m, v in r.items() if isinstance(v, float)}  # noqa: E731
        console.print(
            f"evaluation before: {esc(keep(out_['eval_before']))}\n"
            f"evaluation after:  {esc(keep(out_['eval_after']))}"
        )
    if out_.get("best"):
        b = out_["best"]
        console.print(
            f"best held-out checkpoint: {esc(b['path'])} (step {b['step']}, avg@{b['k']} {b['accuracy']:.3f})"
        )
    for a in out_.get("alarms", []):
        console.print(
            f"[yellow]reward-hacking alarm[/yellow] {esc(a['name'])}: {esc(a['message'])}"
        )


def eval_questions(lake: str | None, dataset: str, limit: int | None) -> list[dict]:
    """Held-out questions of one lake dataset (e.g. aime2024), in a stable order: the
    evaluate flow's own selection (those with a ground truth to verify against)."""
    from flows.evaluate import held_out

    return held_out(Lake(lake), dataset, limit)


@app.command(name="eval")
def eval_(
    model: Annotated[str, typer.Option(help="Model folder.")],
    lake: LakeOpt = None,
    eval_set: Annotated[
        str, typer.Option(help="A dataset of the lake's questions (e.g. aime2024, math500).")
    ] = "math500",
    k: int = 4,
    limit: Annotated[int | None, typer.Option(help="At most this many questions.")] = 50,
    backend: str = "auto",
    max_tokens: Annotated[
        int | None,
        typer.Option(help="Tokens per assistant turn (default: the model's own, else 512)."),
    ] = None,
    stage: Annotated[
        str, typer.Option(help="What MODEL is (sft, grpo, base...), kept in the evals table.")
    ] = "model",
    refine: Annotated[
        bool,
        typer.Option(
            help="Reagent-C: a second attempt after the --judge's critique of the first; "
            "both reported (STAGE and STAGE+refine)."
        ),
    ] = False,
    judge: Annotated[
        str | None, typer.Option(help="The reasoning reward model for --refine (folder or URL).")
    ] = None,
) -> None:
    """MODEL on an evaluation set through the agent loop (the Prefect `evaluate` flow):
    avg@k, pass@j, maj@k with 95% intervals and the agent metrics, or BFCL's function-calling
    metrics on function-calling sets (`--eval-set 'bfcl_*'`); per slice, a report page, and
    every number in the lake's evals table (`flow query "SELECT * FROM evals"`)."""
    from flows.evaluate import eval_flow
    from pipeline.rollout.engines import Sampling

    if not Path(model).is_dir():
        raise typer.BadParameter(f"{model} is not a model folder", param_hint="--model")
    if not eval_questions(lake, eval_set, limit):
        err.print(f"[red]no questions[/red] for dataset {esc(repr(eval_set))} in the lake")
        raise typer.Exit(1)
    if refine != bool(judge):
        raise typer.BadParameter("--refine and --judge go together", param_hint="--judge")
    with console.status("evaluating…"):
        out = eval_flow(
            models=[(model, stage)],
            eval_set=eval_set,
            lake=resolve_root(lake),
            k=k,
            limit=limit,
            sampling=Sampling(max_tokens=max_tokens) if max_tokens else None,
            backend=backend,
            judge=judge,
        )
    row, *second = out["rows"]
    for name, n in out.get("skipped", {}).items():
        console.print(
            f"[yellow]left out[/yellow] {n} questions of {esc(name)}: no verdicts for that BFCL category"
        )
    console.print(
        f"[bold]{esc(eval_set)}[/bold]: {out['questions']} questions × {row['k']} samples"
        + (" (recorded earlier)" if out["state"] == "Cached" else "")
    )
    for m, v in row.items():
        if isinstance(v, float):
            lo, hi = row.get("ci", {}).get(m, (None, None))
            ci = f"  [{lo:.3f}, {hi:.3f}]" if lo is not None else ""
            console.print(f"  {m:<24} {v:.3f}{ci}")
    if second:  # Reagent-C: first vs second attempt
        (r2,) = second
        m = f"average@{row['k']}"
        f = row.get("flips", {})
        console.print(
            f"  refined with {esc(row.get('judge', {}).get('name', judge))}'s critiques: "
            f"{m} {row[m]:.3f} -> {r2[m]:.3f}"
            + (
                f" ({f['wrong_to_right']} wrong -> right, {f['right_to_wrong']} right -> wrong "
                f"of {f['samples']} samples)"
                if f
                else ""
            )
        )
    console.print(f"  report [bold]{esc(out['report'])}[/bold]")


@app.command()
def compact(
    lake: LakeOpt = None,
    small_kb: Annotated[
        int, typer.Option(help="An ingested file whose lake parts are under this many KB is small.")
    ] = 1024,
    bundle_mb: Annotated[int, typer.Option(help="A bundle grows to about this many MB.")] = 128,
) -> None:
    """Bundle the lake parts of many small ingested files into a few (fewer files to open for
    every query and stage); queries and validation see the same rows before and after."""
    from pipeline.compact import CompactConfig
    from pipeline.compact import compact as run_compact

    root = resolve_root(lake)
    if not Lake(root).fs.exists(Lake(root).path("tables", "ingest_log")):
        err.print(f"[red]error:[/red] no lake at {esc(root)} (nothing was ingested there)")
        raise typer.Exit(2)
    try:
        config = CompactConfig(small_bytes=small_kb << 10, bundle_bytes=bundle_mb << 20)
    except ValueError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    r = run_compact(Lake(root), config)
    if r.note:
        console.print(esc(r.note))
    else:
        console.print(
            f"compacted {r.files} ingested files into {r.bundles} bundle(s): "
            f"{r.lake_files_before} lake files -> {r.lake_files_after}"
        )
    if r.removed_leftovers:
        console.print(f"removed {r.removed_leftovers} hidden part(s) left by an earlier compaction")


@app.command()
def query(
    sql: Annotated[
        str,
        typer.Argument(
            help="A SELECT over trajectories, questions, attempts, quarantine, ingest_log."
        ),
    ],
    lake: LakeOpt = None,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="table | csv | json (JSON lines with --out) | parquet (needs --out)",
        ),
    ] = "table",
    out: Annotated[
        str | None, typer.Option(help="Write every row to this file instead of the terminal.")
    ] = None,
    limit: Annotated[
        int, typer.Option(help="Rows shown on the terminal (0: all); --out writes all.")
    ] = 1000,
    memory_limit: Annotated[
        str,
        typer.Option(
            help="DuckDB memory_limit; the query's process is killed past it plus 512 MB."
        ),
    ] = "2GB",
    threads: Annotated[int, typer.Option(help="DuckDB threads.")] = 2,
    timeout: Annotated[
        float, typer.Option(help="Seconds before the query is stopped (its process killed).")
    ] = 60.0,
) -> None:
    """Run read-only SQL over the lake with DuckDB."""
    from pipeline.query import QueryConfig, QueryError
    from pipeline.query_process import bounded_stream

    if format not in ("table", "csv", "json", "parquet"):
        raise typer.BadParameter("use table, csv, json or parquet", param_hint="--format")
    if format == "parquet" and not out:
        raise typer.BadParameter("parquet output needs --out FILE", param_hint="--format")
    config = QueryConfig(memory_limit=memory_limit, threads=threads, timeout_seconds=timeout)
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
        raise typer.Exit(1) from None
    print_rows(rows, format)
    if more:
        err.print(
            f"[yellow]{more} more row(s) not shown[/yellow]; use --limit N (0: all), or "
            "--format parquet --out FILE for every row"
        )


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
        str, typer.Argument(help="A trajectory id or a unique prefix (>= 6 chars).")
    ],
    lake: LakeOpt = None,
    max_chars: Annotated[int, typer.Option(help="Clip each text to this many characters.")] = 2000,
) -> None:
    """Render one trajectory: roles, reasoning, tool calls and results, reward."""
    from pipeline.show import find_trajectory, render

    try:
        row = find_trajectory(Lake(lake), trajectory_id)
    except ValueError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    if row is None:
        err.print(
            f"[red]no trajectory[/red] {esc(repr(trajectory_id))} in {esc(resolve_root(lake))}"
        )
        raise typer.Exit(1)
    render(row, console, max_chars=max_chars)


@app.command()
def formats() -> None:
    """List the readers, in detection order."""
    from pipeline.ingest.registry import readers

    print_rows(
        [
            {
                "format": r.name,
                "description": r.description,
                "whole_file": r.whole_file,
                "companion": r.companion,
            }
            for r in readers()
        ],
        max_width=90,
    )


@app.command()
def demo(
    out: Annotated[str, typer.Option(help="Folder for the demo inputs.")] = DEMO_DIR, seed: int = 0
) -> None:
    """Write the deterministic demo corpus."""
    from pipeline.demo import write_demo

    for p in write_demo(out, seed=seed):
        console.print(esc(p))


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
    from pipeline.query import query as run_query

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


def _on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM: stop at the next safe point (between records, files, batches); SIGKILL is the
    way to stop at once. (Prefect re-delivers the signal to this handler after its own.)"""
    stop.request()


def main() -> None:
    """The console script: the CLI, with a clear message when Prefect's local server cannot start."""
    from flows.progress import set_hook

    set_hook(
        lambda event, payload: (
            err.print(f"[yellow]{esc(payload)}[/yellow]") if event == "wait" else None
        )
    )
    signal.signal(signal.SIGTERM, _on_sigterm)
    import logging

    # vLLM's start-up warnings (no tcmalloc, thread binding, ...) say nothing a user acts on
    logging.getLogger("vllm").setLevel(os.environ.get("FLOW_VLLM_LOG_LEVEL", "ERROR"))
    try:
        app()
    except BaseException as e:
        if stop.requested():  # whatever the stop looked like on its way out (Prefect's own
            # TerminationSignal, Stopped, a failed flow): one clear message and 128 + SIGTERM
            err.print(
                "[yellow]stopped[/yellow] on SIGTERM at a safe point: what was committed stays, "
                "what was being written was discarded; rerun to continue"
            )
            raise SystemExit(143) from None
        if not isinstance(e, RuntimeError) or "ephemeral Prefect API server" not in str(e):
            raise
        home = os.environ.get("PREFECT_HOME", "~/.prefect")
        err.print(
            f"[red]error:[/red] Prefect's local server did not start ({esc(e)}).\n"
            f"Its database lives in {esc(home)}; one written by another Prefect version cannot be migrated back. "
            "Point PREFECT_HOME at a fresh folder (e.g. export PREFECT_HOME=$PWD/.prefect) or move the old one away."
        )
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()

"""The data stages: ingest, validate, dedup, compact; the demo inputs and the formats list."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from flows.cli.common import (
    DEMO_DIR,
    LakeOpt,
    _upstream,
    app,
    console,
    err,
    print_rows,
    print_stage,
)
from flows.options import configured
from pipeline.dedup.config import DEFAULT_EVAL_SETS, DedupConfig
from pipeline.ingest.config import IngestConfig
from pipeline.lake import Lake, resolve_root
from pipeline.lake.compact import CompactConfig
from pipeline.terminal import esc
from pipeline.validate.config import ValidateConfig


def _run_ingest(paths: list[str], lake: str, config: IngestConfig) -> dict:
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
            return ingest_flow(paths=paths, lake=lake, config=config)
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
@configured(
    IngestConfig,
    "source",
    "format",
    "force",
    "max_records_per_file",
    "max_seconds_per_file",
    eval_set="eval_sets",
    exclude="exclude",
)
def ingest(
    paths: Annotated[list[str], typer.Argument(help="Files or folders (local or fsspec URLs).")],
    config: IngestConfig,
    lake: LakeOpt = None,
) -> None:
    """Ingest trace files into the lake: canonical rows, quarantine, ingest log."""
    try:
        result = _run_ingest(paths, resolve_root(lake), config)
    except (FileNotFoundError, ValueError) as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    _print_ingest(result)
    if result.get("eval_sets"):
        console.print(
            f"evaluation sets of this lake: {esc(', '.join(result['eval_sets']))} "
            "(dedup keeps them out of training)"
        )


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
        offline = out["docs_index"].rsplit("/", 1)[0] + "/summary.html"
        console.print(
            f"Validation report: [bold]{esc(offline)}[/bold] (self-contained); "
            f"Great Expectations Data Docs: {esc(out['docs_index'])} (their scripts and styles "
            "come from CDNs)",
            soft_wrap=True,
        )
    print_stage("validate", out)


@app.command()
@configured(ValidateConfig, "force", "limits.max_messages", table="tables")
def validate(config: ValidateConfig, lake: LakeOpt = None) -> None:
    """Run the Great Expectations suites; failing rows go to quarantine with the rule's name."""
    from flows.validate import validate_flow

    _upstream(lake, "validate")
    with console.status("validating with Great Expectations…"):
        out = validate_flow(lake=resolve_root(lake), config=config)
    _print_validate(out)


def _print_dedup(out: dict) -> None:
    c = out["counts"]
    p = out["params"]
    console.print(
        f"[bold]dedup[/bold] ({p['backend']} signatures, {p['lsh']} LSH, b={p['bands']} r={p['rows']}, threshold {p['threshold']})"
    )
    rows = [
        {
            "scope": "questions (rows)",
            "in": c["question_rows"],
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
    print_stage("dedup", out)


@app.command()
@configured(
    DedupConfig,
    "threshold",
    "backend",
    "lsh",
    eval_set="eval_sets",
    train_on_eval_set="train_on_eval_sets",
    resolve=lambda values: _beside_defaults(values),
)
def dedup(config: DedupConfig, lake: LakeOpt = None) -> None:
    """Exact and MinHash-LSH dedup across sources, and decontamination against evaluation sets.

    --eval-set adds a set to the well-known ones held out; --train-on-eval-set takes one out."""
    from flows.dedup import dedup_flow

    _upstream(lake, "dedup")
    with console.status("deduplicating…"):
        out = dedup_flow(lake=resolve_root(lake), config=config)
    _print_dedup(out)


def _beside_defaults(values: dict) -> None:
    """`--eval-set X` holds X out beside the well-known sets, never instead of them (replacing
    them would quietly make GSM8K test items train-eligible)."""
    if values.get("eval_set"):
        values["eval_set"] = [*DEFAULT_EVAL_SETS, *values["eval_set"]]


@app.command()
@configured(CompactConfig, "small_kb", "bundle_mb")
def compact(config: CompactConfig, lake: LakeOpt = None) -> None:
    """Bundle the lake parts of many small ingested files into a few (fewer files to open for
    every query and stage); queries and validation see the same rows before and after."""
    from pipeline.lake.compact import compact as run_compact

    root = resolve_root(lake)
    if not Lake(root).fs.exists(Lake(root).path("tables", "ingest_log")):
        err.print(f"[red]error:[/red] no lake at {esc(root)} (nothing was ingested there)")
        raise typer.Exit(2)
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

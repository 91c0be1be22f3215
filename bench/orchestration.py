"""The whole pipeline on all of ../shared/data with recorded labels: wall time and records/s per
stage, and Prefect's own overhead: the same stages called directly vs through the pipeline flow
(ratio, same process). Then the no-op rerun through the flow.

    python bench/orchestration.py [--data ../shared/data] [--workdir /tmp/bench-pipeline] [--copies N]

The Prefect server (ephemeral mode) is started before timing begins, by a trivial flow run; the
report written at the end of the flow is timed on its own line.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

# This file is named like the `pipeline` package; keep its folder off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


def direct(data: str, root: str) -> dict[str, float]:
    """The stage functions, no Prefect: what the flows wrap."""
    from pipeline.build import BuildConfig, build
    from pipeline.dedup import DedupConfig, dedup
    from pipeline.ingest import IngestConfig, ingest
    from pipeline.label import label
    from pipeline.lake import Lake
    from pipeline.validate import ValidateConfig, validate

    lake = Lake(root)
    out = {}
    for name, fn in (
        ("ingest", lambda: ingest([data], lake, IngestConfig())),
        ("validate", lambda: validate(lake, ValidateConfig())),
        ("dedup", lambda: dedup(lake, DedupConfig())),
        ("label", lambda: label(lake)),
        ("build", lambda: build(lake, BuildConfig(name="demo"))),
    ):
        t0 = time.perf_counter()
        fn()
        out[name] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--workdir", default="/tmp/bench-pipeline")
    ap.add_argument(
        "--copies",
        type=int,
        default=1,
        help="N copies of the data, each file made distinct by trailing whitespace (N x the work)",
    )
    args = ap.parse_args()
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if args.copies > 1:
        src = Path(args.data)
        for i in range(args.copies):
            for f in src.rglob("*"):
                if f.is_file():
                    dst = work / "data" / f"copy{i}" / f.relative_to(src)
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    # whitespace after the last record: same records, another content hash
                    dst.write_bytes(f.read_bytes() + b"\n" + b" " * i)
        args.data = str(work / "data")

    from prefect import flow

    from flows.pipeline import pipeline_flow
    from pipeline.lake import Lake
    from pipeline.lake.query import query

    @flow
    def warmup() -> int:
        return 1

    warmup()  # starts the ephemeral server outside the timings

    @flow
    def empty_child() -> int:
        return 0

    @flow
    def empty_parent() -> float:
        t0 = time.perf_counter()
        for _ in range(5):
            empty_child()
        return (time.perf_counter() - t0) / 5

    per_subflow = empty_parent()  # Prefect's fixed cost of one subflow run
    # First use of GX, matplotlib, DuckDB etc. (imports, contexts) outside the timings too.
    from pipeline.demo import write_demo

    write_demo(str(work / "demo"))
    direct(str(work / "demo"), str(work / "warm"))

    for f in Path(args.data).rglob("*"):  # the page cache warm for both sides
        if f.is_file():
            f.read_bytes()
    d = direct(args.data, str(work / "direct"))
    t0 = time.perf_counter()
    out = pipeline_flow(inputs=[args.data], lake=str(work / "flow"))
    flow_total = time.perf_counter() - t0
    t1 = time.perf_counter()
    again = pipeline_flow(inputs=[args.data], lake=str(work / "flow"))
    rerun = time.perf_counter() - t1

    records = int(
        query(Lake(str(work / "flow")), "SELECT sum(records_read) n FROM ingest_log")["n"][
            0
        ].as_py()
    )
    stages = out["stages"]
    print("first run states: " + ", ".join(f"{k} {v['state']}" for k, v in stages.items()))
    print(f"records read: {records:,} from {args.data}")
    print("| stage | direct s | flow s | flow / direct | records/s (flow) |")
    print("|---|---|---|---|---|")
    for name, secs in d.items():
        f = stages[name]["seconds"]
        print(f"| {name} | {secs:.2f} | {f:.2f} | {f / secs:.3f} | {records / f:,.0f} |")
    dt, ft = sum(d.values()), sum(s["seconds"] for s in stages.values())
    print(f"| **all stages** | {dt:.2f} | {ft:.2f} | **{ft / dt:.3f}** | {records / ft:,.0f} |")
    print(
        f"flow run wall time {flow_total:.2f} s (stages {ft:.2f} s + report and bookkeeping "
        f"{flow_total - ft:.2f} s); orchestration overhead on stage time {100 * (ft / dt - 1):.1f}%"
    )
    fixed = per_subflow * len(stages)
    print(
        f"fixed cost of an empty subflow: {per_subflow:.2f} s (x{len(stages)} stages = {fixed:.2f} s); "
        f"overhead beyond that: {ft - dt - fixed:.2f} s = {100 * (ft - dt - fixed) / dt:.1f}% of stage time"
    )
    print(
        f"no-op rerun: {rerun:.2f} s; states "
        + ", ".join(f"{k} {v['state']}" for k, v in again["stages"].items())
    )


if __name__ == "__main__":
    main()

"""Validation throughput: the full GX suite vs the same rules as plain Polars expressions, on the
same check frames, in the same run.

    python bench/validate.py [--rows 1000000] [--chunk 50000]

Both paths compute the same Polars check frame per chunk (messages exploded, per-rule columns);
the GX path then validates it through Great Expectations (pandas batch, COMPLETE results with
failing row ids), the Polars path evaluates each rule as a filter and collects failing rows.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import polars as pl
import pyarrow as pa

from pipeline.ingest import ingest
from pipeline.ingest.normalize import trajectory_row
from pipeline.ingest.records import TrajectoryRec
from pipeline.lake import Lake
from pipeline.validate.checks import CHECKS
from pipeline.validate.gx_suite import GXRunner
from schemas import TABLES
from schemas.expectations import Limits, Rule, rules_for

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
TOOLS = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]


def generated_table(n: int, seed: int = 0) -> pa.Table:
    """n canonical trajectory rows (5 messages, one tool call), ~1% planted failures."""
    rng = random.Random(seed)
    template = trajectory_row(
        TrajectoryRec(
            messages=[
                {"role": "system", "content": "Use the python tool."},
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": "Computing.",
                    "tool_calls": [
                        {"id": "c1", "name": "python", "arguments": {"code": "print(1)"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "1"},
                {"role": "assistant", "content": "1"},
            ],
            tools=TOOLS,
            reward=1.0,
            is_correct=True,
        )
    )
    cols: dict[str, list] = {name: [] for name in TABLES["trajectories"].names}
    for i in range(n):
        msgs = [dict(m) for m in template["messages"]]
        msgs[1]["content"] = f"Problem {i}: what is {rng.randint(1, 10**6)} squared?"
        r = rng.random()
        if r < 0.003:
            msgs[2] = msgs[2] | {"tool_calls": [{"id": "c1", "name": "shell", "arguments": "{}"}]}
        elif r < 0.006:
            msgs[2] = msgs[2] | {
                "tool_calls": [{"id": "c1", "name": "python", "arguments": "{bad"}]
            }
        row = template | {
            "messages": msgs,
            "question": msgs[1]["content"],
            "record_id": f"r{i}",
            "reward": 5.0 if 0.006 <= r < 0.01 else 1.0,
        }
        for k in cols:
            cols[k].append(row.get(k))
    return pa.Table.from_pydict(cols, schema=TABLES["trajectories"])


def polars_failures(checks: pl.DataFrame, rules: list[Rule]) -> dict[str, list[int]]:
    df = checks.with_row_index("_row")
    out = {}
    for r in rules:
        c = pl.col(r.column)
        if r.kind == "true":
            bad = ~c.fill_null(False)
        elif r.kind == "not_null":
            bad = c.is_null()
        elif r.kind == "unique":
            bad = c.is_duplicated()
        else:
            bad = c.is_not_null() & ((c < r.kwargs["min_value"]) | (c > r.kwargs["max_value"]))
        out[r.name] = df.filter(bad)["_row"].to_list()
    return out


def bench(table: pa.Table, chunk: int, label: str, runner: GXRunner) -> None:
    limits = Limits()
    rules = rules_for("trajectories", limits)
    chunks = [table.slice(i, chunk) for i in range(0, table.num_rows, chunk)]
    t0 = time.perf_counter()
    fail_pl = 0
    for c in chunks:
        checks = CHECKS["trajectories"](c, limits)
        fail_pl += sum(len(v) for v in polars_failures(checks, rules).values())
    t_pl = time.perf_counter() - t0
    t0 = time.perf_counter()
    fail_gx = 0
    for c in chunks:
        checks = CHECKS["trajectories"](c, limits)
        out = runner.validate("trajectories", checks.with_row_index("_row").to_pandas())
        fail_gx += sum(len(o.failed_rows) for o in out.values())
    t_gx = time.perf_counter() - t0
    n = table.num_rows
    print(f"== {label}: {n} rows, {len(rules)} expectations, chunks of {chunk}")
    print(f"plain Polars   {t_pl:7.2f}s  {n / t_pl:>10.0f} rows/s  failures found {fail_pl}")
    print(f"GX (+Polars)   {t_gx:7.2f}s  {n / t_gx:>10.0f} rows/s  failures found {fail_gx}")
    print(f"ratio GX / plain Polars time: {t_gx / t_pl:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--chunk", type=int, default=50_000)
    args = ap.parse_args()
    runner = GXRunner({"trajectories": rules_for("trajectories")})
    if SHARED.is_dir():
        lake = Lake(tempfile.mkdtemp(prefix="bench-validate-"))
        ingest([str(SHARED)], lake)
        bench(lake.read_table("trajectories"), args.chunk, "shared trajectories", runner)
    t = time.perf_counter()
    table = generated_table(args.rows)
    print(f"(generated {table.num_rows} rows in {time.perf_counter() - t:.1f}s)")
    bench(table, args.chunk, "generated", runner)


if __name__ == "__main__":
    main()

"""Build throughput: selection (binning, stratified rebalancing) and shard writing on a generated
table of 1 M labelled questions, and shard read throughput.

    python bench/build.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import pyarrow.dataset as ds

from pipeline.build.select import SelectConfig, select
from pipeline.build.stage import _shards
from schemas import RL_ROWS as RL_SCHEMA


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    rng = random.Random(0)
    domains, sources, patterns = (
        ["math", "code", "qa", "tools"],
        [f"s{i}" for i in range(12)],
        ["none", "single", "multi"],
    )
    t0 = time.perf_counter()
    items = [
        {
            "question_id": f"q{i:08d}",
            "question": f"question {i}",
            "ground_truth": str(i % 97),
            "answer_type": "integer",
            "domain": rng.choice(domains),
            "source": rng.choice(sources),
            "datasets": [],
            "pass_rate": rng.randint(0, 8) / 8,
            "k": 8,
            "n_correct": 0,
            "label_source": "rollouts",
            "tool_pattern": rng.choice(patterns),
        }
        for i in range(args.rows)
    ]
    print(f"generated {len(items)} labelled questions in {time.perf_counter() - t0:.1f}s")
    t0 = time.perf_counter()
    sel = select(items, SelectConfig())
    t_sel = time.perf_counter() - t0
    rows = [{k: r.get(k) for k in RL_SCHEMA.names} for r in sel.rows]
    t0 = time.perf_counter()
    shards = _shards(rows, RL_SCHEMA, 100_000)
    t_write = time.perf_counter() - t0
    out = Path(tempfile.mkdtemp(prefix="bench-build-"))
    for i, data in enumerate(shards):
        (out / f"part-{i:05d}.parquet").write_bytes(data)
    t0 = time.perf_counter()
    table = ds.dataset(str(out), format="parquet").to_table()
    t_read = time.perf_counter() - t0
    print(
        f"selection      {len(items) / t_sel:>10.0f} input rows/s ({t_sel:.2f}s; selected {len(rows)}, pyramid {sel.report['pyramid']})"
    )
    print(
        f"shard writing  {len(rows) / t_write:>10.0f} rows/s ({t_write:.2f}s, {len(shards)} shards, {sum(map(len, shards)) / 1e6:.1f} MB zstd)"
    )
    print(
        f"shard reading  {table.num_rows / t_read:>10.0f} rows/s ({t_read:.3f}s, pyarrow dataset)"
    )


if __name__ == "__main__":
    main()

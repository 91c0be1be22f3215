"""Ingest throughput: the project's ingest vs ``polars.read_ndjson`` of the same file, in one run.

    python bench/ingest.py [--mb 500] [--workdir /tmp/flow-bench]

Each measurement runs in a child process so its peak RSS is its own; the ratio is
project records/s over polars records/s on the same file, measured in the same run. Also ingests
the largest shared sources (../shared/data) and reports records/s and MB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"

CHILD = r"""
import json, resource, sys, time
kind, path, lake = sys.argv[1], sys.argv[2], sys.argv[3]
import polars as pl
from pipeline.ingest import IngestConfig, ingest
from pipeline.lake import Lake
t0 = time.perf_counter()  # imports excluded on both sides
if kind == "polars":
    n = pl.read_ndjson(path).height
else:
    res = ingest([path], Lake(lake), IngestConfig(force=True))
    n = res.totals["records_read"]
dt = time.perf_counter() - t0
print(json.dumps({"records": n, "seconds": dt, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def generate(path: Path, mb: int, seed: int = 0) -> int:
    """OpenAI tool-call trajectories of ~2 KB each until the file reaches ``mb`` MB."""
    rng = random.Random(seed)
    words = [
        "the",
        "of",
        "a",
        "to",
        "in",
        "is",
        "for",
        "on",
        "that",
        "with",
        "as",
        "by",
        "at",
        "from",
        "this",
        "be",
        "are",
        "was",
        "it",
        "an",
        "or",
        "value",
        "sum",
        "list",
        "find",
        "result",
        "check",
    ]
    n, size, target = 0, 0, mb * 1_000_000
    with path.open("w") as f:
        while size < target:
            text = " ".join(rng.choice(words) for _ in range(rng.randint(40, 120)))
            code = f"x = {rng.randint(1, 999)}\nprint(sum(range(x)))"
            rec = {
                "messages": [
                    {"role": "system", "content": "You solve problems with the python tool."},
                    {"role": "user", "content": f"Problem {n}: {text}?"},
                    {
                        "role": "assistant",
                        "content": "Let me compute.",
                        "tool_calls": [
                            {
                                "id": f"call_{n}",
                                "type": "function",
                                "function": {
                                    "name": "python",
                                    "arguments": json.dumps({"code": code}),
                                },
                            }
                        ],
                    },
                    {
                        "role": "tool",
                        "tool_call_id": f"call_{n}",
                        "content": str(rng.randint(1, 10**6)),
                    },
                    {
                        "role": "assistant",
                        "content": f"{text[:200]} The answer is {rng.randint(1, 1000)}.",
                    },
                ],
                "reward": float(rng.random() < 0.5),
            }
            line = json.dumps(rec) + "\n"
            f.write(line)
            size += len(line)
            n += 1
    return n


def child(kind: str, path: Path, lake: Path) -> dict:
    env = os.environ | {"PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(path), str(lake)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=500)
    ap.add_argument("--workdir", default="/tmp/flow-bench")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    big = work / f"generated_{args.mb}mb.jsonl"
    if not big.exists():
        t = time.perf_counter()
        n = generate(big, args.mb)
        print(f"generated {big} ({n} records) in {time.perf_counter() - t:.1f}s")
    mb = big.stat().st_size / 1e6

    print(f"\n== generated JSONL, {mb:.0f} MB")
    pol = child("polars", big, work / "lake-polars")
    ours = child("project", big, work / "lake-big")
    for name, r in (("polars.read_ndjson", pol), ("flow ingest", ours)):
        print(
            f"{name:20s} {r['records']:>9d} rec  {r['seconds']:7.2f}s  {r['records'] / r['seconds']:>9.0f} rec/s  {mb / r['seconds']:7.1f} MB/s  peak RSS {r['peak_rss_mb']:6.0f} MB"
        )
    print(
        f"ratio (flow ingest / polars records per second): {pol['seconds'] / ours['seconds']:.3f}"
    )

    if SHARED.is_dir():
        print("\n== largest shared sources")
        for rel in [
            "mini_swe_agent_deepseek",
            "bfcl",
            "questions",
            "tau_bench",
            "tora",
            "gsm8k_model_solutions",
        ]:
            src = SHARED / rel
            size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file()) / 1e6
            r = child("project", src, work / f"lake-{rel}")
            print(
                f"{rel:26s} {r['records']:>7d} rec  {r['seconds']:6.2f}s  {r['records'] / r['seconds']:>8.0f} rec/s  {size / r['seconds']:6.1f} MB/s  peak RSS {r['peak_rss_mb']:5.0f} MB"
            )


if __name__ == "__main__":
    main()

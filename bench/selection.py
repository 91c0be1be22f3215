"""Selection time of the diversity objective against the stratified selection it replaced, on a
generated supply of labelled questions with every feature dimension of the feature store, both
run in this process (alternating, best of ``--repeat``), with the diversity each one reaches.

    python bench/selection.py [--rows 1000000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import random
import time

from pipeline.build.select import SelectConfig, select

VALUES = {
    "domain": ["math", "code", "qa", "tools", "search", "science"],
    "source": [f"s{i}" for i in range(12)],
    "tool_pattern": ["none", "single", "multi"],
    "behaviour": ["none", "reactive", "deliberative", "mixed"],
    "tool_calls": ["0", "1", "2", "3+"],
    "error_recovery": ["yes", "no"],
    "verification": ["yes", "no"],
    "length": ["short", "medium", "long"],
}


def supply(n: int, seed: int = 0) -> list[dict]:
    """Skewed like real lakes: most questions from one domain and source."""
    rng = random.Random(seed)
    weights = {d: [2.0**-i for i in range(len(v))] for d, v in VALUES.items()}
    cols = {d: rng.choices(v, weights[d], k=n) for d, v in VALUES.items()}
    rates = rng.choices([i / 8 for i in range(9)], k=n)
    return [
        {"question_id": f"q{i:08d}", "pass_rate": rates[i]} | {d: cols[d][i] for d in VALUES}
        for i in range(n)
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    t0 = time.perf_counter()
    items = supply(args.rows)
    print(f"generated {len(items)} labelled questions in {time.perf_counter() - t0:.1f}s")
    best = {"strata": float("inf"), "entropy": float("inf")}
    reports = {}
    for _ in range(args.repeat):
        for objective in ("strata", "entropy"):
            t0 = time.perf_counter()
            sel = select(items, SelectConfig(objective=objective))
            best[objective] = min(best[objective], time.perf_counter() - t0)
            reports[objective] = sel.report
    for objective in ("strata", "entropy"):
        div = reports[objective]["diversity"]["selected"]
        print(
            f"{objective:8s} {best[objective]:6.2f}s  selected {reports[objective]['rows'] if 'rows' in reports[objective] else sum(reports[objective]['selected'].values())}"
            f"  joint {div['joint_bits']:.2f} bits, sum of marginals {sum(div['bits'].values()):.2f} bits"
        )
    print(f"entropy / strata time: {best['entropy'] / best['strata']:.2f}x")


if __name__ == "__main__":
    main()

"""Sandbox calls/s on the same programs, in one run: a warm isolated sandbox (one forked child
per program) against a fresh process per call, unisolated (``python -I -c``, what the earlier
sandbox started per call) and isolated (bubblewrap + Python per call, ``run_python``).

    python bench/sandbox.py [--calls 200] [--workers 2] [--threads 4]

The programs are what a policy writes in RL on math tasks: arithmetic, loops, fractions,
string work, an exception, a program that prints a lot.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.sandbox import Sandbox, SandboxConfig, run_python  # noqa: E402

PROGRAMS = [
    "print(37 * 49 + 12)",
    "print(sum(i * i for i in range(10_000)))",
    "from fractions import Fraction\nprint(Fraction(3, 7) + Fraction(5, 11))",
    "import math\nprint(math.comb(52, 5), math.factorial(20))",
    "s = 'the quick brown fox'\nprint(sorted(set(s.replace(' ', ''))))",
    "x = [1, 2, 3]\nprint(x[10])",  # an IndexError, as policies often write
    "for i in range(2000):\n    print(i)",
    "import itertools\nprint(sum(1 for p in itertools.permutations(range(7)) if p[0] < p[-1]))",
]


def fresh_process(code: str) -> bool:
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, timeout=30)
    return r.returncode == 0


def rate(fn, n: int, threads: int) -> float:
    progs = [PROGRAMS[i % len(PROGRAMS)] for i in range(n)]
    t0 = time.perf_counter()
    if threads == 1:
        for p in progs:
            fn(p)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(fn, progs))
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args()
    cfg = SandboxConfig()
    few = max(len(PROGRAMS), args.calls // 5)  # the slow baselines get fewer calls
    rows = {}
    with Sandbox(cfg, workers=args.workers) as box:
        check = [box.run(p) for p in PROGRAMS]
        assert [r.ok for r in check] == [True] * 5 + [False] + [True] * 2, check
        for callers in (1, args.threads):  # every contender at the same concurrency
            rows["fresh process per call (python -I, no isolation)", callers] = rate(
                fresh_process, few, callers
            )
            rows["fresh isolated interpreter per call (run_python)", callers] = rate(
                lambda c: run_python(c, cfg), few, callers
            )
            rows[f"warm sandbox ({args.workers} workers)", callers] = rate(
                box.run, args.calls, callers
            )
    for (name, callers), r in rows.items():
        print(f"{name:52s} {callers} caller(s) {r:7.1f} calls/s")
    for callers in (1, args.threads):
        warm = rows[f"warm sandbox ({args.workers} workers)", callers]
        for name in (
            "fresh process per call (python -I, no isolation)",
            "fresh isolated interpreter per call (run_python)",
        ):
            print(f"ratio warm / {name}, {callers} caller(s): {warm / rows[name, callers]:5.1f}x")


if __name__ == "__main__":
    main()

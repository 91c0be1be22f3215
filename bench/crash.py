"""Crash safety: kill -9 a `flow run` at random moments, rerun it, and compare the lake with an
uninterrupted run's, byte for byte (dataset shards and manifests included). Meanwhile a reader
queries every committed table of the lake being killed, over and over: it must never meet a
partial file.

    python bench/crash.py [--trials 20] [--inputs DIR] [--policy MODEL_DIR] [--seed 0] [--own-server]

With --policy, labels come from live rollouts of that model (transformers backend), so kills also
land inside per-batch label checkpoints. One Prefect test server serves every run, and the kill
hits the run's whole process group; with --own-server each run starts Prefect's temporary local
server itself and the kill hits the run's main process only (as `kill -9 PID` or the OOM killer
would). After every kill, the processes left from the killed run are counted: its session's
members and the local server it started must all be gone within 5 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

from tests.harness import prefect_servers_of, processes, snapshot  # noqa: E402

EPOCH = "1780000000"


def stage_reached(lake: Path) -> str:
    """The last stage with committed output (a coarse label for where the kill landed)."""
    marks = [
        ("build", "datasets/*/v*/manifest.json"),
        ("label", "tables/labels/[!.]*.parquet"),
        ("dedup", "tables/unique_questions/[!.]*.parquet"),
        ("dedup (signatures)", "tables/minhash_signatures/[!.]*.parquet"),
        ("validate", "tables/validation/[!.]*.parquet"),
        ("ingest", "tables/ingest_log/[!.]*.parquet"),
    ]
    for name, pattern in marks:
        if list(lake.glob(pattern)):
            return f"after {name} output"
    return "before any output"


def reader(lake: Path, stop: threading.Event, errors: list[str], reads: Counter) -> None:
    from pipeline.lake import Lake
    from pipeline.lake.query import connect

    while not stop.is_set():
        if not (lake / "tables").exists():
            time.sleep(0.01)
            continue
        try:
            con = connect(Lake(str(lake)))
            for (table,) in con.sql(
                "SELECT view_name FROM duckdb_views() WHERE NOT internal"
            ).fetchall():
                con.sql(f"SELECT count(*) FROM {table}").fetchall()
                reads["table reads"] += 1
            con.close()
        except Exception as e:  # noqa: BLE001 - a vanished part between listing and reading is
            # expected when a changed file supersedes another; anything else is a finding
            msg = f"{type(e).__name__}: {e}"
            if "No files found" in msg or "No such file" in msg:
                reads["part replaced under the reader"] += 1
            else:
                errors.append(msg)


def leftovers(pid: int) -> list[str]:
    """Live processes of the run started as ``pid``: its session (it was started with its own)
    and the local Prefect server whose watchdog names it."""
    procs = processes()
    servers = set(prefect_servers_of(pid, procs))
    return [
        f"{p['pid']} {' '.join(p['argv'])[:80]}"
        for p in procs
        if p["pid"] != pid and (p["sid"] == pid or p["pid"] in servers)
    ]


def wait_gone(pid: int, seconds: float = 5.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := leftovers(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def run(lake: Path, inputs: str, env: dict, policy: str | None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "flows.cli", "run", "--lake", str(lake), "--inputs", inputs]
    cmd += ["--data-only"]  # the data stages (the kill -9 harness measures those)
    if policy:
        cmd += ["--policy", policy]
    return subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--inputs", default=None, help="default: the demo corpus")
    ap.add_argument("--policy", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--own-server", action="store_true")
    args = ap.parse_args()
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    from pipeline.demo import write_demo

    work = Path(tempfile.mkdtemp(prefix="crash-"))
    inputs = args.inputs
    if inputs is None:
        write_demo(str(work / "demo"))
        inputs = str(work / "demo")
    rng = random.Random(args.seed)
    harness = (
        contextlib.nullcontext()
        if args.own_server
        else prefect_test_harness(server_startup_timeout=120)
    )
    left_total = 0
    with harness:
        env = os.environ | {
            "SOURCE_DATE_EPOCH": EPOCH,
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        }
        if args.own_server:
            env["PREFECT_HOME"] = str(work / "prefect-home")
        else:
            env["PREFECT_API_URL"] = PREFECT_API_URL.value()
        t0 = time.perf_counter()
        ref = run(work / "reference", inputs, env, args.policy)
        assert ref.wait() == 0, "the uninterrupted run failed"
        duration = time.perf_counter() - t0
        reference = snapshot(work / "reference")
        print(f"uninterrupted run: {duration:.1f} s, {len(reference)} files", flush=True)
        where: Counter = Counter()
        equal = 0
        errors: list[str] = []
        reads: Counter = Counter()
        for trial in range(args.trials):
            lake = work / f"trial-{trial}"
            stop = threading.Event()
            watcher = threading.Thread(target=reader, args=(lake, stop, errors, reads))
            watcher.start()
            proc = run(lake, inputs, env, args.policy)
            delay = rng.uniform(0.5, duration)
            time.sleep(delay)
            killed = proc.poll() is None
            if killed:
                if args.own_server:
                    proc.kill()  # the main process only
                else:
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            left = wait_gone(proc.pid)
            left_total += len(left)
            for p in left:
                print(f"  left running after the kill: {p}", flush=True)
            stop.set()
            watcher.join()
            landed = stage_reached(lake) if killed else "finished before the kill"
            where[landed] += 1
            rerun = run(lake, inputs, env, args.policy)
            ok = rerun.wait() == 0 and snapshot(lake) == reference
            left_total += len(wait_gone(rerun.pid))
            leftovers = [p for p in lake.rglob(".tmp-*")]
            equal += ok and not leftovers
            print(
                f"trial {trial}: kill at {delay:.1f} s ({landed}); rerun equal: {ok}; "
                f"temp files left: {len(leftovers)}",
                flush=True,
            )
    print(f"\n{args.trials} trials, {equal} ended byte-identical to the uninterrupted run")
    print("kills landed: " + ", ".join(f"{k} x{v}" for k, v in sorted(where.items())))
    print(
        f"concurrent reader: {reads['table reads']:,} table reads, "
        f"{reads['part replaced under the reader']} parts replaced under it, "
        f"{len(errors)} errors" + (f" (first: {errors[0]})" if errors else "")
    )
    print(f"processes left running after the kills and reruns: {left_total}")
    sys.exit(0 if equal == args.trials and not errors and not left_total else 1)


if __name__ == "__main__":
    main()

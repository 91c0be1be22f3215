"""Seeded corpus mutation over every real shared file: each file mutated N times (random lines of
JSONL files, or the whole document / array), ingested, and checked: no exception out of the
stage, records read = accepted + quarantined, the quarantine rows in the lake match, the log
commits the count. Prints the cases tried and the quarantine reasons seen.

    python bench/fuzz.py [--data ../shared/data] [--per-file 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import gzip
import random
import resource
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.ingest.stage import discover  # noqa: E402
from pipeline.lake import Lake  # noqa: E402
from pipeline.lake.query import query  # noqa: E402
from tests.harness import (  # noqa: E402
    COMPRESSED,
    MUTATIONS,
    check_corrupt_container,
    check_ingest,
    check_special_files,
    mutate,
)


def mutated_file(data: bytes, jsonl: bool, rng: random.Random) -> bytes:
    ops = rng.sample(sorted(MUTATIONS), rng.randint(1, 3))
    if not jsonl:
        return mutate(data, ops, rng.randrange(2**32))
    lines = data.split(b"\n")
    for i in rng.sample(range(len(lines)), min(len(lines), rng.randint(1, 5))):
        lines[i] = mutate(lines[i], ops, rng.randrange(2**32))
    return b"\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--per-file", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-mb", type=float, default=8.0, help="skip files larger than this")
    ap.add_argument(
        "--containers",
        action="store_true",
        help="also put every file in each compressed container, corrupt it 3 ways, and add "
        "FIFOs and /dev/zero symlinks under every supported suffix",
    )
    args = ap.parse_args()
    rng = random.Random(args.seed)
    files = [p for p, _ in discover([args.data])]
    cases = failures = skipped = 0
    totals: Counter = Counter()
    reasons: Counter = Counter()
    reader_errors: Counter = Counter()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            raw = Path(path).read_bytes()
            if path.endswith(".gz"):
                raw = gzip.decompress(raw)
            if len(raw) > args.max_mb * (1 << 20):
                skipped += 1
                continue
            base = path.removesuffix(".gz")
            suffix = ".jsonl" if base.endswith(".jsonl") else Path(base).suffix or ".json"
            for k in range(args.per_file):
                data = mutated_file(raw, suffix == ".jsonl", rng)
                if suffix == ".jsonl" and data.endswith(b"\n"):
                    data = data[:-1]
                cases += 1
                try:
                    name = str(Path(base).relative_to(args.data))
                    r = check_ingest(Path(tmp) / f"c{cases}", data, suffix, name=name)
                except Exception:  # noqa: BLE001 - a finding: print it and go on
                    failures += 1
                    print(f"FAIL {path} case {k}:\n{traceback.format_exc(limit=4)}", flush=True)
                    continue
                totals.update(read=r.records_read, accepted=r.accepted, quarantined=r.quarantined)
                reasons.update(r.reasons)
                if r.reasons.get("reader_error"):  # a reader raised: contained, but worth a look
                    lake = Lake(str(Path(tmp) / f"c{cases}" / "lake"))
                    for d in query(
                        lake, "SELECT detail FROM quarantine WHERE reason = 'reader_error'"
                    )["detail"].to_pylist():
                        reader_errors[f"{r.reader}: {d.splitlines()[0][:150]}"] += 1
        if args.containers:
            for path in files:
                raw = Path(path).read_bytes()
                if path.endswith(".gz"):
                    raw = gzip.decompress(raw)
                if len(raw) > args.max_mb * (1 << 20):
                    continue
                base = Path(path.removesuffix(".gz")).suffix or ".json"
                for comp in COMPRESSED:
                    for how in ("truncate", "bitflip", "not_compressed"):
                        cases += 1
                        try:
                            for r in check_corrupt_container(
                                Path(tmp) / f"c{cases}", raw, base + comp, how, rng.randrange(2**32)
                            ):
                                totals.update(
                                    read=r.records_read,
                                    accepted=r.accepted,
                                    quarantined=r.quarantined,
                                )
                                reasons.update(r.reasons)
                        except Exception:  # noqa: BLE001
                            failures += 1
                            print(f"FAIL {path} {comp} {how}:\n{traceback.format_exc(limit=4)}")
            cases += 1
            try:
                for r in check_special_files(
                    Path(tmp) / "special",
                    (".jsonl", ".ndjson", ".json", ".traj", ".parquet", ".jsonl.gz", ".json.zst"),
                ):
                    reasons.update(r.reasons)
            except Exception:  # noqa: BLE001
                failures += 1
                print(f"FAIL special files:\n{traceback.format_exc(limit=4)}")
    secs = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(
        f"{cases} cases ({args.per_file} per file, seed {args.seed}) over {len(files) - skipped} "
        f"files ({skipped} larger than {args.max_mb} MB skipped) in {secs:.0f} s; failures: {failures}"
    )
    print(
        f"records read {totals['read']:,} = accepted {totals['accepted']:,} + quarantined "
        f"{totals['quarantined']:,}; peak RSS {rss} MB"
    )
    print("| reason | records |\n|---|---|")
    for reason, n in reasons.most_common():
        print(f"| {reason} | {n:,} |")
    for what, n in reader_errors.most_common():
        print(f"reader_error x{n}: {what}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

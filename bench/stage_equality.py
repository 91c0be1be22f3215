"""The data stages' behaviour, fingerprinted: the demo corpus through ingest -> validate -> dedup
-> label (recorded) -> build with ``SOURCE_DATE_EPOCH`` pinned, then one SHA-256 per lake table
(its rows, sorted) and per published dataset file. Run before and after a change that should not
change behaviour (a refactor): equal lines, equal lake, equal dataset.

    python bench/stage_equality.py > before.txt   # ... change ...
    python bench/stage_equality.py > after.txt && diff before.txt after.txt
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["SOURCE_DATE_EPOCH"] = "1767225600"  # 2026-01-01T00:00:00Z

# One fixed folder: source paths are data (ids and rows carry them), so both runs use the same.
WORK = Path(tempfile.gettempdir()) / "flow-stage-equality"


def main() -> None:
    import argparse
    import shutil

    import orjson

    from pipeline.build import BuildConfig, build
    from pipeline.dedup import DedupConfig, dedup
    from pipeline.demo import write_demo
    from pipeline.ingest import IngestConfig, ingest
    from pipeline.label import label
    from pipeline.lake import Lake
    from pipeline.lake.query import query
    from pipeline.validate import ValidateConfig, validate
    from schemas import TABLES

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    work = WORK
    demo = work / "demo"
    write_demo(demo)
    lake = Lake(str(work / "lake"))
    ingest([str(demo)], lake, IngestConfig())
    validate(lake, ValidateConfig(data_docs=False))
    dedup(lake, DedupConfig())
    label(lake)
    manifest = build(lake, BuildConfig(name="demo", label_source="recorded"))

    for table in sorted(TABLES):
        rows = query(lake, f"SELECT * FROM {table}").to_pylist()
        blob = b"\n".join(
            sorted(orjson.dumps(r, default=str, option=orjson.OPT_SORT_KEYS) for r in rows)
        )
        print(f"table {table} rows={len(rows)} {hashlib.sha256(blob).hexdigest()[:16]}")
    folder = Path(manifest["path"])
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            digest = hashlib.sha256(f.read_bytes()).hexdigest()[:16]
            print(f"dataset {f.relative_to(folder)} {digest}")


if __name__ == "__main__":
    main()

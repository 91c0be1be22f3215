"""Evaluation sets registered in the lake (``eval_sets.json``), beside the built-in defaults.

``flow ingest PATH --eval-set NAME`` registers a question pool (``dataset`` or
``dataset/split``) as an evaluation set of this lake: dedup then keeps its questions, and every
training question near-duplicating one, out of the training data, whatever flags a later
``flow dedup`` is run with.
"""

from __future__ import annotations

import orjson

from pipeline.lake import Lake
from pipeline.lake.query import query

FILE = "eval_sets.json"


def registered(lake: Lake) -> tuple[str, ...]:
    path = lake.path(FILE)
    if not lake.fs.exists(path):
        return ()
    with lake.fs.open(path, "rb") as f:
        return tuple(orjson.loads(f.read())["eval_sets"])


def pools(lake: Lake) -> list[str]:
    """The question pools in the lake, as ``dataset`` and ``dataset/split`` names."""
    rows = query(
        lake,
        "SELECT DISTINCT dataset, split FROM questions WHERE dataset IS NOT NULL ORDER BY 1, 2",
    ).to_pylist()
    names = {r["dataset"] for r in rows} | {
        f"{r['dataset']}/{r['split']}" for r in rows if r["split"]
    }
    return sorted(names)


def register(lake: Lake, names: list[str]) -> tuple[str, ...]:
    """Add ``names`` to the lake's evaluation sets; each must name a question pool in the lake.
    Returns the whole registry. Idempotent."""
    known = set(pools(lake))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"no question pool named {', '.join(map(repr, unknown))} in the lake; pools: "
            + (", ".join(sorted(known)) or "none (ingest a question pool first)")
        )
    merged = tuple(sorted(set(registered(lake)) | set(names)))
    lake.write_bytes(lake.path(FILE), orjson.dumps({"eval_sets": list(merged)}))
    return merged

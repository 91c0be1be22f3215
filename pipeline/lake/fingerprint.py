"""Content fingerprints: what a stage read and what it wrote, as short hashes.

Orchestration keys its cache on these (never on DataFrames): a stage whose input tables hash the
same, under the same config and code, has nothing new to do. Part files are hashed by content
(SHA-256 of their bytes), so a lake rebuilt from the same inputs at another time, whose rows
carry other timestamps, is not mistaken for the old one.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from pipeline.lake import Lake
from pipeline.lake.query import visible_parts

# Which committed tables each stage reads, and which it owns (writes whole).
READS: dict[str, tuple[str, ...]] = {
    "validate": ("ingest_log", "trajectories", "questions", "attempts"),
    "dedup": ("ingest_log", "trajectories", "questions", "attempts", "validation"),
    "label": ("attempts", "validation", "dedup_clusters", "unique_questions"),
    "build": (
        "ingest_log",
        "trajectories",
        "validation",
        "dedup_clusters",
        "unique_questions",
        "labels",
        "judgements",  # the SFT split can filter on the judge's scores
    ),
}
OWNS: dict[str, tuple[str, ...]] = {
    "validate": ("validation",),
    "dedup": ("dedup_clusters", "unique_questions"),
    "label": ("labels", "rollouts"),
}


def file_digest(lake: Lake, path: str) -> str:
    h = hashlib.sha256()
    with lake.fs.open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def tables_fingerprint(lake: Lake, tables: tuple[str, ...]) -> str:
    """SHA-256 over the committed parts of ``tables``: names and content hashes."""
    visible = visible_parts(lake)
    h = hashlib.sha256()
    for table in tables:
        for part in visible.get(table, []):
            digest = file_digest(lake, lake.part_path(table, part))
            h.update(f"{table}/{part}:{digest}\n".encode())
    return h.hexdigest()


def dataset_fingerprint(lake: Lake, name: str) -> str:
    """The newest published version of a dataset: its manifest's hash (empty if none)."""
    from pipeline.build import next_version

    version = next_version(lake, name) - 1
    manifest = lake.path("datasets", name, f"v{version}", "manifest.json")
    if version < 1 or not lake.fs.exists(manifest):
        return ""
    return f"v{version}:{file_digest(lake, manifest)}"


@cache
def code_version() -> str:
    """Hash of the stage code (``pipeline/`` and ``schemas/``): new code, new cache keys."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for pkg in ("pipeline", "schemas"):
        for p in sorted((root / pkg).rglob("*.py")):
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]

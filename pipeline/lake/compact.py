"""Small-file compaction: the parts of many small ingested files become one bundle.

Ingest commits each input file as its own parts (one per table, named by the file's hash) and
one ``ingest_log`` part: the unit of commit, supersede and incremental validation. 3,000 tiny
files are then 6,000+ lake files, and every query opens all of them. ``compact`` merges the
parts of small files into a bundle ``bundle-<hash>`` per table (validation results and the
validate stage's quarantine rows too, version by version), whose ``ingest_log`` part holds the
members' log rows. Writing that log part is the switch: from then on the members' own parts are
hidden (``committed_parts``) and are deleted. A compaction cut short leaves either the old parts
visible or the bundle visible, never both; the hidden leftovers are removed by the next one.

A changed member is superseded as any file is: its bundle is first split back into its
members' parts (hidden until the bundle's log part goes, in one step), then the old member's
parts are deleted. Queries, validation and every stage see the same rows before and after.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.lake import Lake

BUNDLE_PREFIX = "bundle-"
INGEST_TABLES = ("trajectories", "questions", "attempts", "quarantine")


def part_name(sha: str) -> str:
    """The part name of an ingested file: the start of its content hash."""
    return sha[:32]


@dataclass(frozen=True)
class CompactConfig:
    """Which ingested files are bundled, and how large a bundle grows."""

    small_kb: int = 1024
    """An ingested file whose lake parts add up to less than this many KB is small."""
    bundle_mb: int = 128
    """A bundle's parts add up to at most about this many MB."""
    min_files: int = 2
    """A bundle holds at least this many files."""

    def __post_init__(self) -> None:
        if self.small_kb <= 0 or self.bundle_mb <= 0:
            raise ValueError(
                f"small_kb and bundle_mb must be positive, not {self.small_kb}, {self.bundle_mb}"
            )
        if self.min_files < 2:
            raise ValueError(f"min_files must be at least 2, not {self.min_files}")

    @property
    def small_bytes(self) -> int:
        return self.small_kb << 10

    @property
    def bundle_bytes(self) -> int:
        return self.bundle_mb << 20


@dataclass
class CompactResult:
    files: int  # ingested files bundled now
    bundles: int  # bundles written now
    lake_files_before: int
    lake_files_after: int
    removed_leftovers: int  # hidden parts of an earlier compaction cut short
    note: str = ""


def bundle_members(lake: Lake) -> dict[str, list[str]]:
    """Each bundle's ``ingest_log`` part -> the part names of the files it holds."""
    out = {}
    for p in lake.parts("ingest_log"):
        if p.startswith(BUNDLE_PREFIX):
            shas = lake.read_columns("ingest_log", p, ["file_sha256"]).column(0).to_pylist()
            out[p] = [part_name(s) for s in shas]
    return out


def committed_parts(lake: Lake) -> set[str]:
    """The ``ingest_log`` parts that commit their data: bundles, and files not in a bundle."""
    hidden = {m for ms in bundle_members(lake).values() for m in ms}
    return set(lake.parts("ingest_log")) - hidden


def _lake_files(lake: Lake) -> int:
    return sum(len(lake.parts(t)) for t in (*INGEST_TABLES, "ingest_log", "validation"))


def _size(lake: Lake, table: str, part: str) -> int:
    return lake.fs.size(lake.part_path(table, part))


def _remove(lake: Lake, part: str) -> int:
    """Every part of one ingested file (data, validation, log); how many."""
    n = lake.delete_derived_parts(part)
    if part in lake.parts("ingest_log"):
        lake.delete_part("ingest_log", part)
        n += 1
    return n


def _concat(lake: Lake, table: str, parts: list[str]) -> pa.Table:
    return pa.concat_tables([lake.read_part(table, p) for p in parts], promote_options="default")


def _bundle(lake: Lake, members: list[str]) -> str:
    """Write one bundle of ``members`` (sorted, so equal inputs give equal bytes), switch to it,
    then delete the members' own parts."""
    name = BUNDLE_PREFIX + hashlib.sha256("\n".join(members).encode()).hexdigest()[:32]
    has = {t: [m for m in members if m in set(lake.parts(t))] for t in INGEST_TABLES}
    for table, parts in has.items():
        if parts:
            lake.write_part(table, name, _concat(lake, table, parts))
    versions: dict[str, dict[str, str]] = defaultdict(dict)  # "<table>.<version>" -> member -> part
    for v in lake.parts("validation"):
        base, _, suffix = v.partition(".")
        if base in members:
            versions[suffix][base] = v
    quarantined = set(lake.parts("quarantine"))
    for suffix, got in versions.items():
        need = has.get(suffix.split(".", 1)[0], [])
        if not need or not set(need) <= set(got):
            continue  # not every member validated at this version: validate does the bundle
        lake.write_part(
            "validation", f"{name}.{suffix}", _concat(lake, "validation", [got[m] for m in need])
        )
        q = [f"{m}.{suffix}" for m in need if f"{m}.{suffix}" in quarantined]
        if q:
            lake.write_part("quarantine", f"{name}.{suffix}", _concat(lake, "quarantine", q))
    lake.write_part("ingest_log", name, _concat(lake, "ingest_log", members))  # the switch
    for m in members:
        _remove(lake, m)
    return name


def remove_leftovers(lake: Lake) -> int:
    """Delete the hidden parts of files that a bundle holds (a compaction or a split cut short)."""
    return sum(_remove(lake, m) for ms in bundle_members(lake).values() for m in ms)


def compact(lake: Lake, config: CompactConfig | None = None) -> CompactResult:
    """Bundle the small ingested files of ``lake``. Idempotent: a rerun finds nothing to do."""
    config = config or CompactConfig()
    with lake.lock():
        before = _lake_files(lake)
        leftovers = remove_leftovers(lake)
        small: list[tuple[str, int]] = []
        for p in sorted(committed_parts(lake)):
            if p.startswith(BUNDLE_PREFIX):
                continue
            size = sum(_size(lake, t, p) for t in INGEST_TABLES if p in set(lake.parts(t)))
            if size < config.small_bytes:
                small.append((p, size))
        groups: list[list[str]] = [[]]
        total = 0
        for p, size in small:
            if groups[-1] and total + size > config.bundle_bytes:
                groups.append([])
                total = 0
            groups[-1].append(p)
            total += size
        groups = [g for g in groups if len(g) >= config.min_files]
        for g in groups:
            _bundle(lake, g)
        files = sum(len(g) for g in groups)
        note = (
            ""
            if groups
            else f"nothing to compact: {len(small)} ingested file(s) under "
            f"{config.small_bytes:,} bytes, a bundle needs {config.min_files}"
        )
        return CompactResult(files, len(groups), before, _lake_files(lake), leftovers, note)


def split_bundle(lake: Lake, bundle: str) -> list[str]:
    """Give every member of ``bundle`` its own parts again (before one of them is superseded);
    the members' parts stay hidden until the bundle's log part is deleted, in one step."""
    members = bundle_members(lake)[bundle]
    has_data: dict[str, pa.Table] = {}
    for table in INGEST_TABLES:
        if bundle in set(lake.parts(table)):
            rows = lake.read_part(table, bundle)
            has_data[table] = rows
            key = pc.utf8_slice_codeunits(rows.column("file_sha256"), 0, 32)
            for m in members:
                sub = rows.filter(pc.equal(key, m))
                if sub.num_rows:
                    lake.write_part(table, m, sub)
    for v in lake.parts("validation"):
        base, _, suffix = v.partition(".")
        if base != bundle:
            continue
        table = suffix.split(".", 1)[0]
        data = has_data.get(table)
        owner = dict(
            zip(
                data.column("record_id").to_pylist(),
                (part_name(s) for s in data.column("file_sha256").to_pylist()),
                strict=True,
            )
        ) if data is not None else {}  # fmt: skip
        rows = lake.read_part("validation", v)
        key = pa.array([owner.get(r) for r in rows.column("record_id").to_pylist()], pa.string())
        for m in members:
            sub = rows.filter(pc.equal(key, m))
            if sub.num_rows:
                lake.write_part("validation", f"{m}.{suffix}", sub)
        if v in set(lake.parts("quarantine")):
            q = lake.read_part("quarantine", v)
            qkey = pc.utf8_slice_codeunits(q.column("file_sha256"), 0, 32)
            for m in members:
                sub = q.filter(pc.equal(qkey, m))
                if sub.num_rows:
                    lake.write_part("quarantine", f"{m}.{suffix}", sub)
    log = lake.read_part("ingest_log", bundle)
    for i, sha in enumerate(log.column("file_sha256").to_pylist()):
        lake.write_part("ingest_log", part_name(sha), log.slice(i, 1))
    lake.delete_part("ingest_log", bundle)  # the switch: the members are visible again
    lake.delete_derived_parts(bundle)
    return members

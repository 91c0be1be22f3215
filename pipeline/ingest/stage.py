"""The ingest stage: files in, canonical lake parts out, every record accounted for.

Per input file: hash its bytes; skip it if that content is already in the lake; pick a reader
(``--format`` or auto-detection on the first record); stream records through the reader and
``normalize``; write one Parquet part per table named by the file's hash; then commit by writing
the file's ``ingest_log`` entry. A changed file (same URI, new content) supersedes its earlier
parts after the new ones are committed. ``records_read = accepted + quarantined`` for every file.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import stat
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import fsspec
import pyarrow as pa

from pipeline import stop
from pipeline.ingest.config import IngestConfig
from pipeline.ingest.containers import (
    RawRecord,
    is_supported,
    iter_records,
    sniff_container,
    strip_compression,
)
from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.normalize import attempt_row, question_row, trajectory_row
from pipeline.ingest.readers.base import Context, Reader
from pipeline.ingest.records import AttemptRec, QuestionRec, TrajectoryRec
from pipeline.ingest.registry import by_name, detect
from pipeline.lake import Lake, LazyParts, run_time
from pipeline.lake.compact import bundle_members, part_name, split_bundle
from pipeline.lake.ids import record_id
from schemas import SCHEMA_VERSION


@dataclass
class FileReport:
    path: str
    status: str  # ingested | unchanged | companion | empty | refused (not a regular file)
    source: str | None = None
    reader: str | None = None
    file_sha256: str | None = None
    size_bytes: int = 0
    records_read: int = 0
    accepted: int = 0
    quarantined: int = 0
    rows: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    superseded: list[str] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""


@dataclass
class IngestResult:
    files: list[FileReport]
    skipped: list[str] = field(default_factory=list)  # files found but not of a readable kind

    @property
    def totals(self) -> dict[str, int]:
        t = Counter()
        for f in self.files:
            t["files"] += 1
            t[f"files_{f.status}"] += 1
            t["records_read"] += f.records_read
            t["accepted"] += f.accepted
            t["quarantined"] += f.quarantined
            t["bytes"] += f.size_bytes
            for k, v in f.rows.items():
                t[k] += v
        if self.skipped:
            t["files_skipped"] = len(self.skipped)
        return dict(t)


# ---- discovery -----------------------------------------------------------------------------


PSEUDO_FILESYSTEMS = ("/proc/", "/sys/", "/dev/")  # kernel state, never trajectories


class Found(NamedTuple):
    """A file to ingest: its path, default source name, and why it is refused unread (None)."""

    path: str
    source: str | None
    refused: str | None = None


def _outside(target: str, root: str | None) -> str | None:
    """Why a local file's real path may not be read: it lies in a pseudo file system, or (for a
    file found under the folder ``root``) outside that folder."""
    if target.startswith(PSEUDO_FILESYSTEMS) or target in ("/proc", "/sys", "/dev"):
        return f"points into /{target.split('/')[1]} ({safe_text(target)})"
    if root is not None and not (target + "/").startswith(root + "/"):
        return f"a symlink out of the input folder {safe_text(root)} (to {safe_text(target)})"
    return None


def excluded(rel: str, patterns: Iterable[str]) -> bool:
    """Whether a path relative to the given folder matches an exclude pattern (fnmatch, on the
    whole relative path or on any of its folders: ``tests``, ``*/eval/*``, ``*.metrics``)."""
    parts = rel.split("/")
    heads = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatch(h, pat) or fnmatch.fnmatch(x, pat)
               for pat in patterns for h, x in zip(heads, parts, strict=True))  # fmt: skip


def discover_files(paths: Iterable[str], exclude: Iterable[str] = ()) -> list[Found]:
    """Expand folders into supported files, sorted; each with its default source name (the first
    folder under the given folder, or None for a file given directly), less those ``exclude``
    patterns match (see ``excluded``). Symlinks are followed only
    inside the given folder: one pointing elsewhere (``env.jsonl -> /proc/self/environ``, a key
    in a home folder) is refused unread, and so is any path into /proc, /sys or /dev."""
    out: list[Found] = []
    for p in paths:
        fs, root = fsspec.core.url_to_fs(p)
        proto = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        prefix = "" if proto in ("file", "local") else f"{proto}://"
        if not prefix:
            root = os.path.realpath(root)
        if fs.isdir(root):
            root = root.rstrip("/")
            for f in sorted(fs.find(root)):
                rel = f[len(root) + 1 :]
                if any(part.startswith(".") for part in rel.split("/")) or not is_supported(f):
                    continue
                if excluded(rel, exclude):
                    continue
                top = rel.split("/", 1)[0] if "/" in rel else None
                refused = None if prefix else _outside(os.path.realpath(f), root)
                out.append(Found(prefix + f, top, refused))
        elif fs.exists(root):
            out.append(Found(prefix + root, None, None if prefix else _outside(root, None)))
        else:
            raise FileNotFoundError(f"no such file or folder: {p}")
    return out


def discover(paths: Iterable[str]) -> list[tuple[str, str | None]]:
    """(path, default source) of every file ``discover_files`` finds."""
    return [(f.path, f.source) for f in discover_files(paths)]


def skipped_files(paths: Iterable[str], exclude: Iterable[str] = ()) -> list[str]:
    """Files under the given folders that ingest does not read (unsupported suffixes, archives
    among them, and those ``exclude`` matches), for the run's summary: none is passed over
    unsaid."""
    out = []
    for p in paths:
        fs, root = fsspec.core.url_to_fs(p)
        if fs.isdir(root):
            root = root.rstrip("/")
            for f in sorted(fs.find(root)):
                rel = f[len(root) + 1 :]
                if any(x.startswith(".") for x in rel.split("/")):
                    continue
                if not is_supported(f) or excluded(rel, exclude):
                    out.append(safe_text(f))
        elif fs.exists(root) and not is_supported(root):
            out.append(safe_text(root))
    return out


def safe_text(path: str) -> str:
    """A path as text the lake can store: bytes that are not UTF-8 in a file name (kept by
    Python as surrogates) become ``\\xNN`` escapes."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def special_file(path: str) -> str | None:
    """Why a local path is not a regular file (a FIFO, a device, a socket, also behind a
    symlink), or None. Such a file is never opened: a FIFO blocks, /dev/zero never ends."""
    local = path[7:] if path.startswith("file://") else path if "://" not in path else None
    if local is None:
        return None
    try:
        mode = os.stat(local).st_mode
    except OSError as e:
        return f"cannot stat: {e.strerror}"
    if stat.S_ISREG(mode):
        return None
    kind = (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a character device"
        if stat.S_ISCHR(mode)
        else "a block device"
        if stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a directory"
        if stat.S_ISDIR(mode)
        else "not a regular file"
    )
    target = os.path.realpath(local)
    return kind + (f" ({target})" if target != os.path.abspath(local) else "")


def _refused_sha(path: str) -> str:
    """A stand-in content hash for a file that is never read: one per path, so a rerun finds
    it done and a regular file put there later is ingested."""
    return hashlib.sha256(
        f"not-a-regular-file\0{path}".encode("utf-8", "surrogateescape")
    ).hexdigest()


def file_sha256(path: str, refused: str | None = None) -> tuple[str, int]:
    """(sha256, size) of a file's bytes; a file refused or unreadable gets its stand-in hash."""
    if refused is not None or special_file(path) is not None:
        return _refused_sha(path), 0
    h = hashlib.sha256()
    n = 0
    try:
        with fsspec.open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
                n += len(chunk)
    except OSError:  # unreadable (a symlink to /proc/self/mem, no permission): refused later
        return _refused_sha(path), 0
    return h.hexdigest(), n


def unreadable(path: str) -> str | None:
    """Why a file cannot be read through, or None."""
    try:
        with fsspec.open(path, "rb") as f:
            while f.read(1 << 22):
                pass
    except OSError as e:
        return f"cannot read: {e.strerror or e}"
    return None


# ---- the registry of ingested files ----------------------------------------------------------


class Registry:
    """Committed files by content hash and by URI, read from ``ingest_log``."""

    def __init__(self, lake: Lake):
        # file part -> the bundle that holds it (pipeline/lake/compact.py)
        self.bundle_of = {m: b for b, ms in bundle_members(lake).items() for m in ms}
        log = lake.read_table("ingest_log").to_pylist()
        self.by_hash = {r["file_sha256"]: r for r in log}
        self.by_uri: dict[str, list[str]] = {}
        for r in log:
            self.by_uri.setdefault(r["source_uri"], []).append(r["file_sha256"])


# ---- one file ------------------------------------------------------------------------------


def _detect(
    path: str, container: str, max_record_bytes: int, tries: int = 20, scan: int = 1000
) -> Reader | None:
    """The reader that recognizes one of the first ``tries`` parseable records, so one corrupt
    or odd first record does not make the whole file unknown. At most ``scan`` records are read
    for it: a file of millions of broken lines is not read twice (its reading has caps of its
    own; detection had none)."""
    n = 0
    for i, rec in enumerate(iter_records(path, container, max_record_bytes)):
        if i >= scan:
            return None
        if rec.error is not None:
            continue
        reader = detect(rec.value, path)
        n += 1
        if reader is not None or n >= tries:
            return reader
    return None


def _record_bytes(rec: RawRecord) -> int:
    """About the memory a record's rows hold, for flushing by bytes."""
    if rec.size is not None:
        return rec.size
    return len(rec.raw) if rec.raw is not None else 1024


def _reader_failure(e: Exception) -> RecordError:
    """A reader raised: values nested too deep for Python or orjson are ``too_deep``, a list or
    dict where the reader needs a key is ``wrong_type``; anything else is a reader bug, kept with
    its traceback as ``reader_error``."""
    if isinstance(e, RecursionError) or "Recursion limit reached" in str(e):
        return RecordError(Reason.TOO_DEEP, f"record nested too deep to map: {type(e).__name__}")
    if isinstance(e, TypeError) and "unhashable type" in str(e):  # a list/dict where a name goes
        return RecordError(
            Reason.WRONG_TYPE, f"{e} (a field holds a container)\n{traceback.format_exc(limit=3)}"
        )
    return RecordError(
        Reason.READER_ERROR, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
    )


def _rows(reader: Reader, value: object, ctx: Context) -> list[tuple[str, dict]]:
    """(table, row) pairs for one record, all or nothing."""
    out: list[tuple[str, dict]] = []
    if not reader.whole_file and not isinstance(value, dict):
        raise RecordError(
            Reason.NOT_AN_OBJECT, f"record is a JSON {type(value).__name__}, expected an object"
        )
    for rec in reader.parse(value, ctx):
        if isinstance(rec, TrajectoryRec):
            out.append(("trajectories", trajectory_row(rec)))
        elif isinstance(rec, QuestionRec):
            out.append(("questions", question_row(rec)))
        elif isinstance(rec, AttemptRec):
            tid = None
            if rec.trajectory is not None:
                t = trajectory_row(rec.trajectory)
                tid = t["trajectory_id"]
                out.append(("trajectories", t))
            out.append(("attempts", attempt_row(rec, tid)))
        else:
            raise TypeError(f"reader {reader.name} yielded {type(rec).__name__}")
    if not out:
        raise RecordError(Reason.NO_ROWS, f"reader {reader.name} produced no rows")
    return out


def ingest_file(
    path: str,
    lake: Lake,
    config: IngestConfig,
    registry: Registry,
    default_source: str | None = None,
    on_record: Callable[[int], None] | None = None,
    digest: tuple[str, int] | None = None,
    refused: str | None = None,
) -> FileReport:
    """Ingest one file (``digest``: its (sha256, size) when the caller hashed it already;
    ``refused``: why discovery refused it, so it is recorded but never opened)."""
    t0 = time.perf_counter()
    now = config.now or run_time()
    stop.check(f"before {safe_text(path)}")
    sha, size = digest or file_sha256(path, refused)
    uri = safe_text(path)  # what the lake stores and shows (the name may not be UTF-8)
    report = FileReport(path=uri, status="ingested", file_sha256=sha, size_bytes=size)
    reason = Reason.OUTSIDE_INPUT if refused else Reason.NOT_A_REGULAR_FILE
    refused = refused or special_file(path)
    if refused is None and sha == _refused_sha(path):
        refused, reason = unreadable(path) or "cannot read", Reason.UNREADABLE_FILE
    if sha in registry.by_hash and not config.force:
        report.status = "unchanged"
        prev = registry.by_hash[sha]
        report.note = (
            ""
            if prev["source_uri"] == uri
            else f"same content already ingested from {prev['source_uri']}"
        )
        report.reader, report.source = prev["source_format"], prev["source"]
        return report

    reader: Reader | None = None
    container = "json_document"
    if refused is None:
        try:
            container = sniff_container(path, config.max_record_bytes)
            if not config.format:
                reader = _detect(path, container, config.max_record_bytes)
        except Exception:  # noqa: BLE001 - unreadable head: the record loop below quarantines it
            container = "json_document"
    if config.format:
        reader = by_name(config.format)
    source = safe_text(
        config.source
        or default_source
        or (reader.name if reader else strip_compression(path.rsplit("/", 1)[-1])[0])
    )
    report.source, report.reader = source, reader.name if reader else None
    part = part_name(sha)
    ctx = Context(path=path, index=0)

    if reader is not None and reader.companion:
        report.status = "companion"
    else:
        records: Iterator[RawRecord]
        if refused is not None:  # one quarantine row for the file; it is never opened
            records = iter([RawRecord(0, raw=b"", error=RecordError(reason, refused))])
        elif reader is not None and reader.whole_file:
            records = iter_records(path, "json_document", config.max_record_bytes)
        else:
            records = iter_records(path, container, config.max_record_bytes)
        lineage = {
            "source": source,
            "source_format": report.reader or "unknown",
            "source_uri": uri,
            "file_sha256": sha,
        }
        capped = _capped(records, config, time.monotonic())
        with LazyParts(lake, part) as parts:
            for rec in capped:
                if report.records_read % 1000 == 999:
                    stop.check(f"in {uri}")  # the parts so far are discarded, nothing committed
                report.records_read += 1
                err = rec.error
                rows: list[tuple[str, dict]] = []
                if err is None:
                    if reader is None:
                        err = RecordError(
                            Reason.UNKNOWN_FORMAT,
                            "no reader recognizes this file's records (use --format)",
                        )
                    else:
                        ctx.index = rec.index
                        try:
                            rows = _rows(reader, rec.value, ctx)
                        except RecordError as e:
                            err = e
                        except Exception as e:  # noqa: BLE001 - a reader bug quarantines, never crashes
                            err = _reader_failure(e)
                if err is not None:
                    report.quarantined += 1
                    report.reasons[err.reason.value] += 1
                    raw, raw_bytes = rec.excerpt(config.max_raw_bytes)
                    parts.add(
                        "quarantine",
                        {
                            "quarantine_id": record_id(sha, rec.index, -1),
                            "stage": "ingest",
                            "reason": err.reason.value,
                            "detail": err.detail[:2000],
                            "record_id": record_id(sha, rec.index, 0),
                            **lineage,
                            "source_index": rec.index,
                            "raw": raw,
                            "raw_bytes": raw_bytes,
                            "quarantined_at": now,
                        },
                        len(raw),
                    )
                else:
                    report.accepted += 1
                    for sub, (table, row) in enumerate(rows):
                        row.update(lineage)
                        row["record_id"] = record_id(sha, rec.index, sub)
                        row["source_index"] = rec.index
                        row["ingested_at"] = now
                        parts.add(table, row, _record_bytes(rec))
                        report.rows[table] += 1
                if on_record is not None and report.records_read % 1000 == 0:
                    on_record(report.records_read)
        if refused is not None:
            report.status = "refused"
        elif report.records_read == 0:
            report.status = "empty"

    # Commit: the ingest-log entry makes the parts visible; then retire superseded versions.
    report.seconds = time.perf_counter() - t0
    log_row = {
        "file_sha256": sha,
        "source_uri": uri,
        "source": source,
        "source_format": report.reader or "unknown",
        "status": report.status,
        "size_bytes": size,
        "records_read": report.records_read,
        "records_accepted": report.accepted,
        "records_quarantined": report.quarantined,
        "trajectories": report.rows["trajectories"],
        "questions": report.rows["questions"],
        "attempts": report.rows["attempts"],
        "schema_version": SCHEMA_VERSION,
        "started_at": now,
        "finished_at": now if config.now else run_time(),
    }
    lake.write_part("ingest_log", part, pa.Table.from_pylist([log_row]))
    for old in registry.by_uri.get(uri, []):
        if old != sha:
            bundle = registry.bundle_of.get(part_name(old))
            if bundle is not None:  # its rows share a bundle: every member gets its parts back
                for m in split_bundle(lake, bundle):
                    registry.bundle_of.pop(m, None)
            lake.delete_part("ingest_log", part_name(old))
            lake.delete_derived_parts(part_name(old))
            report.superseded.append(old)
    registry.by_hash[sha] = log_row
    registry.by_uri[uri] = [sha]
    return report


def _capped(records: Iterator[RawRecord], config: IngestConfig, t0: float) -> Iterator[RawRecord]:
    """The file's records up to its caps; past one, a single quarantine record says so."""
    cap_n, cap_s = config.max_records_per_file, config.max_seconds_per_file
    if cap_n is None and cap_s is None:
        yield from records
        return
    for n, rec in enumerate(records):
        why = None
        if cap_n is not None and n >= cap_n:
            why = f"the file has more than max_records_per_file={cap_n} records"
        elif cap_s is not None and time.monotonic() - t0 > cap_s:
            why = f"reading it took more than max_seconds_per_file={cap_s:g} s"
        if why:
            detail = f"{why}: records from {rec.index} on were not read"
            yield RawRecord(rec.index, raw=b"", error=RecordError(Reason.FILE_CAP_REACHED, detail))
            return
        yield rec


def ingest(
    paths: Iterable[str],
    lake: Lake,
    config: IngestConfig | None = None,
    on_file: Callable[[FileReport], None] | None = None,
) -> IngestResult:
    """Ingest files and folders into the lake. Never raises for bad records; raises only for
    paths that do not exist."""
    config = config or IngestConfig()
    lake.remove_temp_files()
    registry = Registry(lake)
    reports = []
    for path, default_source, refused in discover_files(paths, config.exclude):
        r = ingest_file(path, lake, config, registry, default_source, refused=refused)
        reports.append(r)
        if on_file:
            on_file(r)
    return IngestResult(reports, skipped_files(paths, config.exclude))

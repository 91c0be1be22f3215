"""The lake: a root (local path or any fsspec URL) holding one folder of Parquet parts per table.

Layout::

    ROOT/tables/<table>/<part>.parquet   zstd Parquet, one part per unit of work (an input file)
    ROOT/reports/ ...                    reports written by later stages

Writes are atomic: a part is written under a hidden temp name in the same folder, flushed (and
fsynced on local disks), then renamed, so a reader never sees a half-written file. A part of a
data table is *committed* once its ingest-log entry exists; views only read committed parts.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from schemas import TABLES

DEFAULT_LAKE = "data/lake"
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 3, "write_statistics": True}


class LakeBusy(RuntimeError):
    """Another writer holds the lake's lock and the wait timed out."""


_HELD: dict[str, int] = {}


def _read_holder(path: str) -> str:
    try:
        with open(path + ".holder") as f:
            return f.read().strip() or "unknown holder"
    except OSError:
        return "unknown holder"


def run_clock() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def run_time() -> datetime:
    """The time stamped on rows: now, or ``SOURCE_DATE_EPOCH`` when set (reproducible builds:
    two runs over the same inputs then give byte-identical lakes)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    return datetime.fromtimestamp(int(epoch), UTC) if epoch else datetime.now(UTC)


def resolve_root(root: str | None = None) -> str:
    """--lake beats FLOW_LAKE beats the default ``data/lake`` (relative to the working dir)."""
    return root or os.environ.get("FLOW_LAKE") or DEFAULT_LAKE


@dataclass
class Lake:
    """The lake at ``root`` (a path or any fsspec URL): one folder of Parquet parts per table
    under ``tables/``, written atomically (temp name, fsync, rename) and named by content hash,
    so a rerun of the same input writes nothing new; the writer lock; dataset folders and
    reports beside the tables. Readers see committed parts only (``pipeline.lake.query``)."""

    root: str

    def __post_init__(self) -> None:
        self.root = resolve_root(self.root).rstrip("/")
        self.fs, self._base = fsspec.core.url_to_fs(self.root)
        self.is_local = self.fs.protocol in ("file", "local") or "file" in (self.fs.protocol or ())
        if self.is_local:
            self._base = os.path.abspath(self._base)

    # ---- paths -------------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return "/".join([self._base, *parts])

    def url(self, path: str) -> str:
        """A path as DuckDB should see it (protocol-prefixed for non-local filesystems)."""
        if self.is_local:
            return path
        proto = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        return f"{proto}://{path.lstrip('/')}" if proto == "memory" else f"{proto}://{path}"

    def table_dir(self, table: str) -> str:
        if table not in TABLES:
            raise KeyError(f"unknown table {table!r}; known: {sorted(TABLES)}")
        return self.path("tables", table)

    def part_path(self, table: str, part: str) -> str:
        if "/" in part or part.startswith("."):
            raise ValueError(f"invalid part name {part!r}")
        return f"{self.table_dir(table)}/{part}.parquet"

    # ---- one writer at a time ----------------------------------------------------------------
    @contextlib.contextmanager
    def lock(
        self, timeout: float | None = None, on_wait: Callable[[str], None] | None = None
    ) -> Iterator[None]:
        """Hold the lake's writer lock: an exclusive OS lock on ``ROOT/.lock``, released by the
        kernel when the holder exits, even by kill -9, so it never goes stale. Reentrant within a
        process. A second writer waits (``on_wait`` gets who holds it) up to ``timeout`` seconds,
        then raises ``LakeBusy``. Remote lakes have no lock: give each writer its own root or run
        one scheduler (``flow serve --limit 1``)."""
        if not self.is_local:
            yield
            return
        from filelock import FileLock, Timeout

        os.makedirs(self._base, exist_ok=True)
        path = os.path.join(self._base, ".lock")
        held = _HELD.get(path, 0)
        if held:
            _HELD[path] = held + 1
            try:
                yield
            finally:
                _HELD[path] -= 1
            return
        lock = FileLock(path, thread_local=False)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            holder = _read_holder(path)
            if on_wait:
                on_wait(holder)
            try:
                lock.acquire(timeout=-1 if timeout is None else timeout)
            except Timeout:
                raise LakeBusy(
                    f"{self.root} is locked by another writer ({holder}); waited {timeout} s"
                ) from None
        info = path + ".holder"
        with open(info, "w") as f:
            f.write(f"pid {os.getpid()} on {os.uname().nodename} since {run_clock()}")
        _HELD[path] = 1
        try:
            yield
        finally:
            _HELD.pop(path, None)
            with contextlib.suppress(OSError):
                os.remove(info)
            lock.release()

    # ---- listing and reading -----------------------------------------------------------------
    def parts(self, table: str) -> list[str]:
        """Part names (without .parquet) present for a table, sorted; temp files excluded."""
        d = self.table_dir(table)
        if not self.fs.exists(d):
            return []
        names = []
        for p in self.fs.ls(d, detail=False):
            base = p.rstrip("/").rsplit("/", 1)[-1]
            if base.endswith(".parquet") and not base.startswith("."):
                names.append(base[: -len(".parquet")])
        return sorted(names)

    def read_part(self, table: str, part: str) -> pa.Table:
        with self.fs.open(self.part_path(table, part), "rb") as f:
            return pq.read_table(f)

    def read_table(self, table: str, parts: Iterable[str] | None = None) -> pa.Table:
        names = self.parts(table) if parts is None else list(parts)
        tables = [self.read_part(table, p) for p in names]
        if not tables:
            return TABLES[table].empty_table()
        return pa.concat_tables(tables, promote_options="default")

    # ---- writing -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _atomic(self, final: str) -> Iterator[object]:
        folder = final.rsplit("/", 1)[0]
        self.fs.makedirs(folder, exist_ok=True)
        tmp = f"{folder}/.tmp-{uuid.uuid4().hex}.parquet"
        try:
            if self.is_local:
                with open(tmp, "wb") as f:
                    yield f
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, final)
            else:
                with self.fs.open(tmp, "wb") as f:
                    yield f
                self.fs.mv(tmp, final)
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm(tmp)
            raise

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write a small file of the lake (a registry, a manifest) atomically."""
        with self._atomic(path) as f:
            f.write(data)

    def write_part(self, table: str, part: str, data: pa.Table) -> str:
        """Write one whole part atomically (replacing an existing part of the same name)."""
        schema = TABLES[table]
        final = self.part_path(table, part)
        with self._atomic(final) as f:
            pq.write_table(data.cast(schema), f, **PARQUET_OPTIONS)
        return final

    @contextlib.contextmanager
    def part_writer(self, table: str, part: str) -> Iterator[PartWriter]:
        """Stream row batches into one part; it appears atomically when the block exits cleanly."""
        final = self.part_path(table, part)
        with self._atomic(final) as f:
            w = PartWriter(TABLES[table], f)
            try:
                yield w
            finally:
                w.close()

    def delete_part(self, table: str, part: str) -> None:
        p = self.part_path(table, part)
        if self.fs.exists(p):
            self.fs.rm(p)

    def delete_derived_parts(self, base: str) -> int:
        """Delete every part named ``base`` or ``base.<anything>`` in every table except the log."""
        n = 0
        for table in TABLES:
            if table == "ingest_log":
                continue
            for p in self.parts(table):
                if p == base or p.startswith(base + "."):
                    self.delete_part(table, p)
                    n += 1
        return n

    def num_rows(self, table: str, part: str) -> int:
        with self.fs.open(self.part_path(table, part), "rb") as f:
            return pq.ParquetFile(f).metadata.num_rows

    def read_columns(self, table: str, part: str, columns: list[str]) -> pa.Table:
        with self.fs.open(self.part_path(table, part), "rb") as f:
            return pq.read_table(f, columns=columns)

    def iter_part_batches(self, table: str, part: str, batch_rows: int) -> Iterator[pa.Table]:
        """A part in row batches, so a large part is never fully in memory."""
        with self.fs.open(self.part_path(table, part), "rb") as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=batch_rows):
                yield pa.Table.from_batches([batch])

    def remove_temp_files(self) -> int:
        """Remove temp files left by a killed writer (never visible to readers)."""
        n = 0
        for table in TABLES:
            d = self.table_dir(table)
            if not self.fs.exists(d):
                continue
            for p in self.fs.ls(d, detail=False):
                if p.rstrip("/").rsplit("/", 1)[-1].startswith(".tmp-"):
                    self.fs.rm(p)
                    n += 1
        return n


class LazyParts:
    """Part writers for several tables under one part name, each opened on its first row, so
    tables without rows leave no file. All parts appear atomically when the block exits."""

    def __init__(self, lake: Lake, part: str):
        self.lake, self.part = lake, part
        self.stack = contextlib.ExitStack()
        self.writers: dict[str, PartWriter] = {}

    def add(self, table: str, row: dict, nbytes: int = 0) -> None:
        """``nbytes``: about how much memory the row holds (its record's size), so buffers
        flush by bytes as well as by rows."""
        w = self.writers.get(table)
        if w is None:
            w = self.writers[table] = self.stack.enter_context(
                self.lake.part_writer(table, self.part)
            )
        w.add(row, nbytes)

    def __enter__(self) -> LazyParts:
        return self

    def __exit__(self, *exc: object) -> bool:
        return bool(self.stack.__exit__(*exc))


class PartWriter:
    """Buffers dict rows and writes them as row groups; the schema is the table's."""

    def __init__(
        self,
        schema: pa.Schema,
        sink: object,
        rows_per_group: int = 5_000,
        bytes_per_group: int = 32 << 20,
    ):
        self.schema = schema
        self.rows_per_group = rows_per_group
        self.bytes_per_group = bytes_per_group
        self._writer = pq.ParquetWriter(sink, schema, **PARQUET_OPTIONS)
        self._buf: list[dict] = []
        self._buf_bytes = 0
        self.rows = 0

    def add(self, row: dict, nbytes: int = 0) -> None:
        self._buf.append(row)
        self._buf_bytes += nbytes
        if len(self._buf) >= self.rows_per_group or self._buf_bytes >= self.bytes_per_group:
            self.flush()

    def flush(self) -> None:
        if self._buf:
            self._writer.write_table(pa.Table.from_pylist(self._buf, schema=self.schema))
            self.rows += len(self._buf)
            self._buf, self._buf_bytes = [], 0

    def close(self) -> None:
        if self._writer is not None:
            self.flush()
            self._writer.close()
            self._writer = None

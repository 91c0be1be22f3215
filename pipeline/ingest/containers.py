"""Stream records out of files with bounded memory: JSONL, JSON arrays, single JSON documents and
Parquet, optionally ``.gz`` / ``.zst`` / ``.bz2`` / ``.xz`` compressed, from any fsspec URL.

The container is decided by the extension (``.jsonl``, ``.ndjson``, ``.parquet``) or, for
``.json``/``.traj`` and unknown suffixes, by the first bytes: ``[`` is a JSON array, a first line
that is a whole JSON value followed by another is JSONL (BFCL's ``.json`` files are JSONL), and
anything else is one JSON document.
"""

from __future__ import annotations

import io
import reprlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import ijson
import orjson

from pipeline.ingest.errors import Reason, RecordError

COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
SUPPORTED_SUFFIXES = (".jsonl", ".ndjson", ".json", ".traj", ".parquet")


_SHORT_REPR = reprlib.Repr()  # bounded depth and size (3.11's Repr takes no arguments)
_SHORT_REPR.maxlevel, _SHORT_REPR.maxstring, _SHORT_REPR.maxother = 50, 10_000, 1_000
_SHORT_REPR.maxlist = _SHORT_REPR.maxdict = 1_000


@dataclass(slots=True)
class RawRecord:
    index: int
    value: Any = None
    raw: bytes | None = None  # the record's bytes when the container has them (JSONL)
    error: RecordError | None = None
    size: int | None = None  # the record's full size when ``raw`` holds only its start

    def excerpt(self, limit: int) -> tuple[str, int]:
        """(the record's text, at most ``limit`` bytes of it; the record's full size in bytes).
        Raw bytes are cut before decoding, so a huge record never becomes a huge string."""
        if self.raw is not None:
            size = self.size if self.size is not None else len(self.raw)
            return self.raw[:limit].decode("utf-8", errors="backslashreplace"), size
        if self.value is None:
            return "", self.size or 0
        try:
            text = orjson.dumps(self.value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()
        except (TypeError, RecursionError):  # too deep for JSON: a bounded repr, never a crash
            text = _SHORT_REPR.repr(self.value)
        size = self.size if self.size is not None else len(text.encode("utf-8", "surrogatepass"))
        return text[:limit], size


def strip_compression(path: str) -> tuple[str, str | None]:
    for suf, comp in COMPRESSIONS.items():
        if path.endswith(suf):
            return path[: -len(suf)], comp
    return path, None


def is_supported(path: str) -> bool:
    base, _ = strip_compression(path)
    return base.endswith(SUPPORTED_SUFFIXES)


def open_binary(path: str) -> io.BufferedIOBase:
    """Open for binary reading, decompressing by suffix; local files get a 1 MiB buffer."""
    _, comp = strip_compression(path)
    local = path[7:] if path.startswith("file://") else path if "://" not in path else None
    if local is not None and comp is None:
        return open(local, "rb", buffering=1 << 20)
    f = fsspec.open(path, "rb", compression=comp).open()
    if comp == "zstd":  # zstandard's reader has no readline: buffer it for line iteration
        return io.BufferedReader(f, buffer_size=1 << 20)
    return f


def sniff_container(path: str, max_record_bytes: int = 1 << 30) -> str:
    """jsonl | json_array | json_document | parquet."""
    base, _ = strip_compression(path)
    if base.endswith(".parquet"):
        return "parquet"
    if base.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    with open_binary(path) as f:
        first = f.readline(max_record_bytes)
        while first and not first.strip():
            first = f.readline(max_record_bytes)
        lead = first.lstrip()[:1]
        if lead == b"[":
            return "json_array"
        if lead != b"{":
            return "json_document"
        second = f.readline(1 << 16)
        while second and not second.strip():
            second = f.readline(1 << 16)
    if second:
        try:
            orjson.loads(first)
            return "jsonl"
        except orjson.JSONDecodeError:
            return "json_document"
    return "json_document"


def _decode_error(line: bytes) -> RecordError:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as e:
        return RecordError(Reason.INVALID_UTF8, f"invalid UTF-8 at byte {e.start}")
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError as e:
        return RecordError(Reason.INVALID_JSON, str(e))
    return RecordError(Reason.INVALID_JSON, "unparseable")


def iter_jsonl(path: str, max_record_bytes: int) -> Iterator[RawRecord]:
    """One record per non-blank line; the index is the 0-based line number."""
    with open_binary(path) as f:
        i = -1
        while line := f.readline(max_record_bytes + 1):
            i += 1
            if len(line) > max_record_bytes and not line.endswith(b"\n"):
                # Too long: keep its first MiB for the quarantine row, skip the rest unread
                # into memory, so one huge line costs max_record_bytes, not its size.
                size, head = len(line), line[: 1 << 20]
                del line
                while chunk := f.readline(1 << 24):
                    size += len(chunk)
                    if chunk.endswith(b"\n"):
                        break
                yield RawRecord(
                    i,
                    raw=head,
                    size=size,
                    error=RecordError(
                        Reason.RECORD_TOO_LARGE,
                        f"{size} bytes > max_record_bytes={max_record_bytes}",
                    ),
                )
                continue
            if not line.strip():
                continue
            try:
                yield RawRecord(i, orjson.loads(line), raw=line)
            except orjson.JSONDecodeError:
                yield RawRecord(i, raw=line, error=_decode_error(line))


MAX_DEPTH = 1024  # nesting levels of one record: orjson's limit, applied to JSON arrays too


def iter_json_array(path: str, max_record_bytes: int) -> Iterator[RawRecord]:
    """Elements of a top-level JSON array, parsed incrementally from ijson's basic events (no
    path prefixes, whose cost grows with the square of the nesting); the index is the element
    position. An element nested deeper than ``MAX_DEPTH`` is skipped unbuilt and quarantined; a
    syntax error ends the stream: the rest of the file becomes one quarantine row."""
    i = 0
    with open_binary(path) as f:
        try:
            # multiple_values: data after the closing ']' is read too, never dropped unseen
            events = ijson.basic_parse(f, use_float=True, multiple_values=True)
            next(events, None)  # the opening '[' (the container was sniffed as an array)
            # depth 0: between top-level values; base: the depth at which a record ends
            # (1 inside an array, 0 for a stray top-level value after one)
            depth, base, builder, too_deep = 1, 1, None, False
            for event, value in events:
                if depth == 0:
                    if event == "start_array":  # another array follows: read its elements
                        depth, base = 1, 1
                        continue
                    base = 0  # a value after ']' is one more record, never dropped unseen
                if event in ("start_map", "start_array"):
                    depth += 1
                elif event in ("end_map", "end_array"):
                    depth -= 1
                    if depth == 0 and base == 1:
                        continue  # an array's closing ']'
                if not too_deep:
                    if depth > MAX_DEPTH:
                        too_deep, builder = True, None
                    else:
                        builder = builder or ijson.common.ObjectBuilder()
                        builder.event(event, value)
                if depth == base:  # a record ends here
                    if too_deep:
                        yield RawRecord(
                            i,
                            raw=b"",
                            error=RecordError(
                                Reason.TOO_DEEP, f"element nested deeper than {MAX_DEPTH} levels"
                            ),
                        )
                    elif builder is not None:
                        yield RawRecord(i, builder.value)
                    i, builder, too_deep = i + 1, None, False
            if depth != 0:
                raise ValueError("the array is not closed")
        except (ijson.JSONError, UnicodeDecodeError, ValueError) as e:
            reason = (
                Reason.INVALID_UTF8 if isinstance(e, UnicodeDecodeError) else Reason.TRUNCATED_JSON
            )
            yield RawRecord(
                i,
                raw=b"",
                error=RecordError(reason, f"JSON array broken after element {i - 1}: {e}"),
            )


def read_document(path: str, max_record_bytes: int) -> RawRecord:
    """A whole file as one JSON value (size-capped)."""
    with open_binary(path) as f:
        data = f.read(max_record_bytes + 1)
        if len(data) > max_record_bytes:
            size = len(data)
            while chunk := f.read(1 << 22):
                size += len(chunk)
            error = RecordError(
                Reason.RECORD_TOO_LARGE,
                f"document of {size} bytes exceeds max_record_bytes={max_record_bytes}",
            )
            return RawRecord(0, raw=data[:1024], size=size, error=error)
    try:
        return RawRecord(0, orjson.loads(data), raw=None)
    except orjson.JSONDecodeError:
        return RawRecord(0, raw=data, error=_decode_error(data))


BATCH_BYTES = 64 << 20  # decoded Arrow bytes per Parquet batch, about


def iter_parquet(path: str, max_record_bytes: int, batch_rows: int = 1024) -> Iterator[RawRecord]:
    """Rows of a Parquet file with bounded memory, whatever its compression hides: batches are
    sized from each row group's uncompressed size (a dictionary page counts in full for every
    row, since each row may decode to its largest entry), and a row past ``max_record_bytes`` is
    quarantined from its Arrow size, never turned into Python objects."""
    import pyarrow.parquet as pq

    i = 0
    with fsspec.open(path, "rb").open() as f:
        try:
            pf = pq.ParquetFile(f)
            md = pf.metadata
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                cols = [rg.column(c) for c in range(rg.num_columns)]
                per_row = sum(c.total_uncompressed_size for c in cols) / max(rg.num_rows, 1)
                per_row += sum(c.total_uncompressed_size for c in cols if c.has_dictionary_page)
                rows = int(max(1, min(batch_rows, BATCH_BYTES // max(per_row, 1))))
                for batch in pf.iter_batches(batch_size=rows, row_groups=[g]):
                    if batch.nbytes <= max_record_bytes:
                        for row in batch.to_pylist():
                            yield RawRecord(i, row)
                            i += 1
                        continue
                    for j in range(batch.num_rows):
                        one = batch.slice(j, 1)
                        if one.nbytes > max_record_bytes:
                            detail = f"row of {one.nbytes} bytes exceeds max_record_bytes={max_record_bytes}"
                            yield RawRecord(
                                i,
                                raw=b"",
                                size=one.nbytes,
                                error=RecordError(Reason.RECORD_TOO_LARGE, detail),
                            )
                        else:
                            yield RawRecord(i, one.to_pylist()[0])
                        i += 1
        except Exception as e:  # noqa: BLE001 - any decoder failure is one quarantine row
            yield RawRecord(i, raw=b"", error=RecordError(Reason.UNREADABLE_FILE, f"parquet: {e}"))


def _guarded(records: Iterator[RawRecord]) -> Iterator[RawRecord]:
    """A container that fails mid-stream (corrupt gzip, I/O error) ends with one quarantine
    record for the unread rest, instead of an exception out of the stage."""
    last = -1
    try:
        for rec in records:
            last = rec.index
            yield rec
    except Exception as e:  # noqa: BLE001
        yield RawRecord(
            last + 1,
            raw=b"",
            error=RecordError(
                Reason.UNREADABLE_FILE,
                f"stream failed after record {last}: {type(e).__name__}: {e}",
            ),
        )


def iter_records(path: str, container: str, max_record_bytes: int) -> Iterator[RawRecord]:
    if container == "jsonl":
        return _guarded(iter_jsonl(path, max_record_bytes))
    if container == "json_array":
        return _guarded(iter_json_array(path, max_record_bytes))
    if container == "parquet":
        return _guarded(iter_parquet(path, max_record_bytes))
    return _guarded(_document(path, max_record_bytes))


def _document(path: str, max_record_bytes: int) -> Iterator[RawRecord]:
    """The document read when iterated, inside ``_guarded``: a corrupt .gz/.zst document is a
    quarantine row, not an exception out of the stage."""
    yield read_document(path, max_record_bytes)

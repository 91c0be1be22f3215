"""The ingest stage's options: source name, reader, per-record and per-file bounds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pipeline.ingest.errors import IngestError


@dataclass
class IngestConfig:
    """Options of the ingest stage."""

    source: str | None = None
    """Source name for every file. Default: for a folder given, the first folder under it
    (``flow ingest ../shared/data`` names ToRA's files ``tora``; a file directly in the given
    folder, or a file given directly, gets its reader's name)."""
    exclude: tuple[str, ...] = ()
    """Glob patterns of files or folders under a given folder not to read (``tests``,
    ``*/outputs/*``, ``*.metrics``): matched on the path relative to that folder and on each of
    its folder names; excluded files are counted as skipped in the summary."""
    format: str | None = None
    """Force a reader by name instead of detecting it (see flow formats)."""
    max_record_bytes: int = 64 << 20
    """Larger records are quarantined as record_too_large."""
    max_raw_bytes: int = 64 << 10
    """Raw text kept per quarantine row (the full size is recorded)."""
    force: bool = False
    """Re-ingest files whose content is already in the lake."""
    now: datetime | None = None
    """The ingest timestamp (tests pin it for byte-identical lakes)."""
    max_records_per_file: int | None = None
    """Stop reading a file after this many records: the unread rest is one file_cap_reached
    quarantine row (a cap against cheap amplification, e.g. a 6 KB .gz of 2 M bad lines).
    """
    max_seconds_per_file: float | None = None
    """Stop reading a file after this many seconds: the unread rest is one file_cap_reached
    quarantine row.
    """

    eval_sets: tuple[str, ...] = ()
    """Question pools (dataset or dataset/split) to register as evaluation sets of the lake once
    the files are in: dedup keeps them and their near-duplicates out of training."""

    def __post_init__(self) -> None:
        if self.format is not None:
            from pipeline.ingest.registry import by_name

            try:
                by_name(self.format)
            except KeyError as e:
                raise IngestError(f"format: {e.args[0]}") from None
        for name in ("max_records_per_file", "max_seconds_per_file"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise IngestError(f"{name} must be positive (or None for no cap), got {value}")

"""The ingest stage's options: source name, reader, per-record and per-file bounds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pipeline.ingest.errors import IngestError


@dataclass
class IngestConfig:
    """Options of the ingest stage."""

    source: str | None = (
        None  # source name for every file (default: top folder under the input, or the reader)
    )
    format: str | None = None  # force a reader by name instead of auto-detection
    max_record_bytes: int = 64 << 20  # larger records are quarantined as record_too_large
    max_raw_bytes: int = 64 << 10  # raw text kept per quarantine row (the full size is recorded)
    force: bool = False  # re-ingest files whose content is already in the lake
    now: datetime | None = None  # ingest timestamp (tests pin it for byte-identical lakes)
    # caps per file against cheap amplification (a 6 KB .gz of 2 M bad lines): past either, the
    # unread rest is one `file_cap_reached` quarantine row and the file's reading stops
    max_records_per_file: int | None = None
    max_seconds_per_file: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_records_per_file", "max_seconds_per_file"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise IngestError(f"{name} must be positive (or None for no cap), got {value}")

"""Ingest: many trace formats -> the canonical lake tables (see ``stage.ingest``)."""

from pipeline.ingest.config import IngestConfig
from pipeline.ingest.errors import IngestError
from pipeline.ingest.stage import (
    FileReport,
    IngestResult,
    discover,
    ingest,
    ingest_file,
)

__all__ = [
    "FileReport",
    "IngestConfig",
    "IngestError",
    "IngestResult",
    "discover",
    "ingest",
    "ingest_file",
]

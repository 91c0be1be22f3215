"""Ingest: many trace formats -> the canonical lake tables (see ``stage.ingest``)."""

from pipeline.ingest.stage import (
    FileReport,
    IngestConfig,
    IngestResult,
    discover,
    ingest,
    ingest_file,
)

__all__ = ["FileReport", "IngestConfig", "IngestResult", "discover", "ingest", "ingest_file"]

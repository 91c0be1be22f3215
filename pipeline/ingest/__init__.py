"""Ingest: many trace formats -> the canonical lake tables (see ``stage.ingest``)."""

from pipeline.ingest.config import IngestConfig
from pipeline.ingest.errors import IngestError

__all__ = [
    "FileReport",
    "IngestConfig",
    "IngestError",
    "IngestResult",
    "discover",
    "ingest",
    "ingest_file",
]


_STAGE = {"FileReport", "IngestResult", "discover", "ingest", "ingest_file"}


def __getattr__(attr: str):
    """The stage loads on first use: importing the config (the command line does, for its
    options) does not load the stage's libraries."""
    if attr in _STAGE:
        import importlib

        return getattr(importlib.import_module("pipeline.ingest.stage"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

"""Dedup: exact and MinHash-LSH near-duplicates across sources, and decontamination."""

from pipeline.dedup.config import DedupConfig
from pipeline.dedup.errors import DedupError

__all__ = ["DedupConfig", "DedupError", "DedupResult", "dedup"]


_STAGE = {"DedupResult", "dedup"}


def __getattr__(attr: str):
    """The stage loads on first use: importing the config (the command line does, for its
    options) does not load the stage's libraries."""
    if attr in _STAGE:
        import importlib

        return getattr(importlib.import_module("pipeline.dedup.stage"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

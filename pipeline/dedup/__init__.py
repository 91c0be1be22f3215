"""Dedup: exact and MinHash-LSH near-duplicates across sources, and decontamination."""

from pipeline.dedup.config import DedupConfig
from pipeline.dedup.errors import DedupError
from pipeline.dedup.stage import DedupResult, dedup

__all__ = ["DedupConfig", "DedupError", "DedupResult", "dedup"]

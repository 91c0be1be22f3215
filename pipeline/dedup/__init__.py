"""Dedup: exact and MinHash-LSH near-duplicates across sources, and decontamination."""

from pipeline.dedup.stage import DedupConfig, DedupResult, dedup

__all__ = ["DedupConfig", "DedupResult", "dedup"]

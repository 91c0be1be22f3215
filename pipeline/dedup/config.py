"""The dedup stage's options: shingles, MinHash, LSH bands, verification, evaluation sets."""

from __future__ import annotations

import importlib.metadata as md
from dataclasses import dataclass

import orjson

from pipeline.dedup.errors import DedupError
from pipeline.lake.ids import digest

DEFAULT_EVAL_SETS = ("aime2024", "aime2025", "amc2023", "math500", "gsm8k/test")


@dataclass
class DedupConfig:
    """Options of the dedup stage."""

    threshold: float = 0.8  # Jaccard threshold for near-duplicates
    num_perm: int = 128
    ngram: int = 5
    mode: str = "word"  # word | char shingles
    backend: str = "auto"  # auto (rensa if installed) | datasketch | rensa
    lsh: str = "bands"  # bands (partitioned, vectorized) | datasketch (MinHashLSH index)
    # false-positive / false-negative weights for datasketch's optimal (b, r): favour recall, since
    # every candidate is verified (b=14, r=9 for 0.8/128: P(candidate | J=0.85) = 0.975)
    weights: tuple[float, float] = (0.1, 0.9)
    verify: str = "estimate"  # estimate | exact: how candidate pairs are verified
    band_partitions: int = 3
    workers: int = 2  # threads computing signature partitions
    partition_docs: int = 5_000
    eval_sets: tuple[str, ...] = DEFAULT_EVAL_SETS  # dataset or dataset/split names
    max_text_chars: int = 20_000  # trajectory text used for shingles
    trajectories: bool = True
    storage_config: dict | None = None  # datasketch storage (e.g. Redis) for lsh="datasketch"

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise DedupError(f"threshold must be in (0, 1], got {self.threshold}")
        for name, allowed in (
            ("backend", ("auto", "datasketch", "rensa")),
            ("lsh", ("bands", "datasketch")),
            ("mode", ("word", "char")),
            ("verify", ("estimate", "exact")),
        ):
            if getattr(self, name) not in allowed:
                raise DedupError(
                    f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}"
                )
        for name in ("num_perm", "ngram", "band_partitions", "workers", "partition_docs"):
            if getattr(self, name) < 1:
                raise DedupError(f"{name} must be at least 1, got {getattr(self, name)}")

    def resolved_backend(self) -> str:
        if self.backend != "auto":
            return self.backend
        try:
            import rensa  # noqa: F401

            return "rensa"
        except ImportError:
            return "datasketch"

    def sig_key(self) -> str:
        versions = {"polars": md.version("polars"), "datasketch": md.version("datasketch")}
        if self.resolved_backend() == "rensa":
            versions["rensa"] = md.version("rensa")
        return digest(
            orjson.dumps([self.resolved_backend(), self.num_perm, self.ngram, self.mode, versions]),
            8,
        )

"""The dedup stage's options: shingles, MinHash, LSH bands, verification, evaluation sets."""

from __future__ import annotations

import importlib.metadata as md
from dataclasses import dataclass

import orjson

from pipeline.dedup.errors import DedupError
from pipeline.dedup.known_evals import KNOWN
from pipeline.lake.ids import digest

# the well-known sets, recognised by pool name, path and content (pipeline/dedup/known_evals.py)
DEFAULT_EVAL_SETS = KNOWN


@dataclass
class DedupConfig:
    """Options of the dedup stage."""

    threshold: float = 0.8
    """Jaccard threshold for near-duplicates."""
    num_perm: int = 128
    """MinHash permutations per signature."""
    ngram: int = 5
    """Shingle length (words or characters, by mode)."""
    mode: str = "word"
    """Word | char shingles."""
    backend: str = "auto"
    """Auto (rensa if installed) | datasketch | rensa."""
    lsh: str = "bands"
    """Bands (partitioned, vectorized) | datasketch (MinHashLSH index)."""
    weights: tuple[float, float] = (0.1, 0.9)
    """False-positive / false-negative weights for datasketch's optimal (b, r): favour recall,
    since every candidate is verified (b=14, r=9 for 0.8/128: P(candidate | J=0.85) = 0.975).
    """
    verify: str = "estimate"
    """Estimate | exact: how candidate pairs are verified."""
    band_partitions: int = 3
    """Partitions of the band tables (bounds memory for lsh=bands)."""
    workers: int = 2
    """Threads computing signature partitions."""
    partition_docs: int = 5_000
    """Documents per signature partition (a unit of work and of the cache)."""
    eval_sets: tuple[str, ...] = DEFAULT_EVAL_SETS
    """Evaluation sets held out of training (dataset or dataset/split names): the well-known ones
    by default; on the command line, --eval-set adds to them."""
    train_on_eval_sets: tuple[str, ...] = ()
    """Evaluation sets to train on anyway (taken out of eval_sets): their items become
    train-eligible and every dedup warns of the contamination."""
    max_text_chars: int = 20_000
    """Trajectory text used for shingles."""
    trajectories: bool = True
    """Also deduplicate trajectories, not only questions."""
    storage_config: dict | None = None
    """Datasketch storage (e.g. Redis) for lsh="datasketch"."""

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
        if stray := set(self.train_on_eval_sets) - set(self.eval_sets) - set(KNOWN):
            raise DedupError(
                f"train_on_eval_sets names {', '.join(sorted(stray))}: neither a well-known "
                f"evaluation set ({', '.join(KNOWN)}) nor one of eval_sets"
            )
        self.eval_sets = tuple(e for e in self.eval_sets if e not in self.train_on_eval_sets)
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

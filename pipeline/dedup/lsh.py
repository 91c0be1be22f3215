"""Locality-sensitive hashing over signatures: candidate pairs, two interchangeable paths.

* ``band_pairs``: the signature matrix cut into ``b`` bands of ``r`` rows (datasketch's optimal
  ``(b, r)`` for the threshold and weights); a pair is a candidate when some band agrees. Bands
  are split into partitions, each a pure function call (a Prefect task in ``flows/dedup.py``, so
  partitions can run on a Dask or Ray task runner); the union of the partitions' pairs is the
  candidate set. An optional group key restricts pairs to the same group (trajectories of one
  question).
* ``datasketch_pairs``: datasketch's ``MinHashLSH`` index (``insert`` / ``query`` with
  ``LeanMinHash`` objects), which can live in Redis for a shared, persistent index::

      MinHashLSH(threshold=0.8, num_perm=128,
                 storage_config={"type": "redis", "basename": b"flow-questions",
                                 "redis": {"host": "localhost", "port": 6379}})

Both give the same candidate pairs for the same (b, r) (tested).
"""

from __future__ import annotations

import numpy as np
import polars as pl


def band_params(
    threshold: float, num_perm: int, weights: tuple[float, float] = (0.5, 0.5)
) -> tuple[int, int]:
    """(bands, rows) minimizing datasketch's weighted false-positive/negative probability."""
    from datasketch.lsh import _optimal_param

    return _optimal_param(threshold, num_perm, weights[0], weights[1])


def band_partitions(bands: int, partitions: int) -> list[range]:
    step = -(-bands // max(1, partitions))
    return [range(i, min(i + step, bands)) for i in range(0, bands, step)]


def _band_keys(sigs: np.ndarray, rows: int, band: int) -> np.ndarray:
    """A 64-bit key per row for one band (FNV-1a over its r values; a rare collision only adds a
    candidate, which verification then rejects)."""
    chunk = sigs[:, band * rows : (band + 1) * rows].astype(np.uint64)
    h = np.full(len(sigs), np.uint64(0xCBF29CE484222325) ^ np.uint64(band), dtype=np.uint64)
    for c in range(chunk.shape[1]):
        h = (h ^ chunk[:, c]) * np.uint64(0x100000001B3)
    return h


def band_pairs(
    sigs: np.ndarray,
    rows: int,
    band_range: range,
    groups: np.ndarray | None = None,
    max_bucket: int = 100,
) -> np.ndarray:
    """Candidate pairs (i < j) from the bands in ``band_range``: int64 [n_pairs, 2]. Buckets
    larger than ``max_bucket`` contribute a star and a chain (enough to connect them) instead
    of all their pairs."""
    n = len(sigs)
    if n < 2 or not len(band_range):
        return np.zeros((0, 2), dtype=np.int64)
    g = groups if groups is not None else np.zeros(n, dtype=np.int64)
    frames = [
        pl.DataFrame(
            {
                "band": np.full(n, b, dtype=np.int32),
                "key": _band_keys(sigs, rows, b),
                "g": g,
                "i": np.arange(n, dtype=np.int64),
            }
        )
        for b in band_range
    ]
    buckets = (
        pl.concat(frames)
        .group_by("band", "key", "g")
        .agg(pl.col("i").sort())
        .filter(pl.col("i").list.len() > 1)
    )
    small = (
        buckets.filter(pl.col("i").list.len() <= max_bucket)
        .with_row_index("bid")
        .select("bid", "i")
        .explode("i")
    )
    joined = small.join(small, on="bid", suffix="_r").filter(
        pl.col("i") < pl.col("i_r")
    )  # all pairs per bucket
    out = [np.stack([joined["i"].to_numpy(), joined["i_r"].to_numpy()], axis=1).astype(np.int64)]
    for members in buckets.filter(pl.col("i").list.len() > max_bucket)["i"].to_list():
        m = np.asarray(members, dtype=np.int64)  # a huge bucket: a star and a chain connect it
        out.append(np.stack([np.full(len(m) - 1, m[0]), m[1:]], axis=1))
        out.append(np.stack([m[:-1], m[1:]], axis=1))
    return union_pairs(out)


def union_pairs(parts: list[np.ndarray]) -> np.ndarray:
    """Sorted unique pairs (encoded as i * 2^32 + j for a fast 1-D unique)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return np.zeros((0, 2), dtype=np.int64)
    allp = np.concatenate(parts).astype(np.int64)
    code = np.unique((allp[:, 0] << 32) | allp[:, 1])
    return np.stack([code >> 32, code & 0xFFFFFFFF], axis=1)


def datasketch_pairs(
    sigs: np.ndarray,
    lean,
    threshold: float,
    num_perm: int,
    params: tuple[int, int],
    storage_config: dict | None = None,
) -> np.ndarray:
    """The same candidates through datasketch's MinHashLSH index."""
    from datasketch import MinHashLSH

    index = MinHashLSH(
        threshold=threshold, num_perm=num_perm, params=params, storage_config=storage_config
    )
    with index.insertion_session() as session:
        for i, s in enumerate(sigs):
            session.insert(i, lean(s), check_duplication=False)
    pairs = set()
    for i, s in enumerate(sigs):
        for j in index.query(lean(s)):
            if j != i:
                pairs.add((min(i, j), max(i, j)))
    return np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)

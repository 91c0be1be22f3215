"""MinHash signatures, computed in vectorized batches, compatible with datasketch.

``DatasketchBackend`` applies *datasketch's own* permutations (``MinHash(seed=1).permutations``,
scheme ``affine32``: murmur finalizer then ``a*h + b mod 2^32``) to all shingle hashes of a batch
of documents at once with numpy, and reduces with ``np.minimum.reduceat``; the result equals, bit
for bit, ``MinHash(hashfunc=shingle_hash).update_batch(shingles)`` and can be wrapped as a
``LeanMinHash`` for datasketch's ``MinHashLSH``. ``RensaBackend`` uses rensa's ``RMinHash``
(Rust) when installed: equivalent in distribution (different permutations), not bit-identical.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.dedup.shingles import batch_shingle_hashes, shingles


def lean_minhash(signature: np.ndarray, seed: int = 1):
    """A signature (of either backend) as datasketch's ``LeanMinHash``, for its LSH index."""
    from datasketch import LeanMinHash

    return LeanMinHash(seed=seed, hashvalues=signature, scheme="affine32")


class DatasketchBackend:
    name = "datasketch"

    def __init__(self, num_perm: int = 128, seed: int = 1, ngram: int = 5, mode: str = "word"):
        from datasketch import MinHash
        from datasketch.minhash import _fmix

        template = MinHash(num_perm=num_perm, seed=seed, hashfunc=lambda b: 0)
        if template.scheme != "affine32":  # pragma: no cover - datasketch default since 2.0
            raise RuntimeError(f"unsupported datasketch scheme {template.scheme}")
        self.a, self.b = (p.astype(np.uint32) for p in template.permutations)
        self.fmix = _fmix
        self.num_perm, self.seed, self.ngram, self.mode = num_perm, seed, ngram, mode

    def signatures(self, texts: Sequence[str], batch_shingles: int = 10_000) -> np.ndarray:
        """uint32 [n_docs, num_perm]; an empty document gets the all-max signature (datasketch's)."""
        flat, off = batch_shingle_hashes(list(texts), self.ngram, self.mode)
        out = np.full((len(texts), self.num_perm), np.iinfo(np.uint32).max, dtype=np.uint32)
        hv = self.fmix(flat, 32)  # [S] murmur finalizer, as datasketch's affine32 scheme
        counts = np.diff(off)
        start = 0
        while start < len(texts):  # slabs of ~batch_shingles rows keep [S, P] in cache
            stop = start + 1
            while stop < len(texts) and off[stop + 1] - off[start] <= batch_shingles:
                stop += 1
            docs = np.nonzero(counts[start:stop])[0] + start
            if len(docs):
                phv = (
                    hv[off[start] : off[stop], None] * self.a[None, :] + self.b[None, :]
                )  # [S, P] wraps mod 2^32
                out[docs] = np.minimum.reduceat(phv, off[docs] - off[start], axis=0)
            start = stop
        return out

    def lean(self, signature: np.ndarray):
        return lean_minhash(signature, self.seed)


class RensaBackend:
    name = "rensa"

    def __init__(self, num_perm: int = 128, seed: int = 1, ngram: int = 5, mode: str = "word"):
        import rensa  # noqa: F401 - fail fast when missing

        self.num_perm, self.seed, self.ngram, self.mode = num_perm, seed, ngram, mode

    def signatures(self, texts: Sequence[str]) -> np.ndarray:
        """The same shingle hashes as the datasketch backend, permuted and min-reduced in Rust."""
        from rensa import RMinHash

        flat, off = batch_shingle_hashes(list(texts), self.ngram, self.mode)
        counts = np.diff(off)
        if (counts == 0).any():  # an empty document hashes as one sentinel shingle
            flat = np.insert(flat, off[:-1][counts == 0], 0)
            off = np.concatenate([[0], np.cumsum(np.maximum(counts, 1))])
        m = RMinHash.digest_matrix_from_flat_token_hashes(
            flat.astype(np.uint64), off.astype(np.uint64), self.num_perm, self.seed
        )
        return np.asarray(m.to_rows(), dtype=np.uint64).astype(np.uint32)

    def lean(self, signature: np.ndarray):
        return lean_minhash(signature, self.seed)


def backend(name: str, num_perm: int = 128, seed: int = 1, ngram: int = 5, mode: str = "word"):
    if name == "datasketch":
        return DatasketchBackend(num_perm, seed, ngram, mode)
    if name == "rensa":
        return RensaBackend(num_perm, seed, ngram, mode)
    raise ValueError(f"unknown signature backend {name!r} (datasketch | rensa)")


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise fraction of equal signature slots: [n, P] x [n, P] -> [n]."""
    return (a == b).mean(axis=1)


def pair_jaccard(sigs: np.ndarray, pairs: np.ndarray, chunk: int = 50_000) -> np.ndarray:
    """Estimated Jaccard of index pairs [m, 2] over signatures [n, P], in bounded-memory chunks."""
    out = np.empty(len(pairs))
    for s in range(0, len(pairs), chunk):
        p = pairs[s : s + chunk]
        out[s : s + chunk] = (sigs[p[:, 0]] == sigs[p[:, 1]]).mean(axis=1)
    return out


def exact_jaccard(x: str, y: str, n: int = 5, mode: str = "word") -> float:
    sx, sy = set(shingles(x, n, mode)), set(shingles(y, n, mode))
    if not sx and not sy:
        return 1.0
    return len(sx & sy) / len(sx | sy)

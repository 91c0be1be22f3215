"""Text normalization and shingle hashing, vectorized over a batch of documents with Polars.

Each document is normalized (NFKC, lower case, punctuation to spaces), split into tokens (words
by default, or characters), and every n-gram window gets a 32-bit hash that combines its token
hashes (Polars' seeded hash, low 32 bits) with an FNV-style multiply-xor; a document shorter
than n gives one shingle of all its tokens. ``shingle_hash`` computes the same hash for one
shingle given as text, so a plain datasketch ``MinHash(hashfunc=shingle_hash)`` fed shingle by
shingle gives bit-identical signatures (tested). Polars documents its hash as stable within a
version only, so the Polars version is part of the signature key (``signature_key``).
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import polars as pl

FNV = 0x01000193
MASK = 0xFFFFFFFF
_NON_WORD = r"[^\w]+"  # punctuation and whitespace runs


def _normalized(col: pl.Expr) -> pl.Expr:
    return (
        col.str.normalize("NFKC")
        .str.to_lowercase()
        .str.replace_all(_NON_WORD, " ")
        .str.strip_chars()
    )


def normalize_text(text: str) -> str:
    """The normalization shingles see (for humans and tests)."""
    return pl.select(_normalized(pl.lit(text or ""))).item()


def _tokens(texts: list[str], mode: str) -> pl.DataFrame:
    """(doc, t, h, L) for every token, in document order; L is the document's token count."""
    df = pl.DataFrame({"t": texts}, schema={"t": pl.String}).with_row_index("doc")
    norm = _normalized(pl.col("t").fill_null(""))
    split = norm.str.split(" ") if mode == "word" else norm.str.split("")
    tok = (
        df.select("doc", t=split)
        .explode("t")
        .filter(pl.col("t").is_not_null() & (pl.col("t") != ""))
    )
    return tok.with_columns(
        h=pl.col("t").hash(seed=0) & pl.lit(MASK, dtype=pl.UInt64),
        L=pl.len().over("doc").cast(pl.Int64),
        pos=pl.int_range(pl.len()).over("doc"),
    )


def batch_shingle_hashes(
    texts: list[str], n: int = 5, mode: str = "word"
) -> tuple[np.ndarray, np.ndarray]:
    """Shingle hashes of every document, flat and in document order: (uint32 [S], offsets [D+1]).

    Repeated shingles are kept (a minimum does not care); ``shingles`` gives the set."""
    tok = _tokens(texts, mode)
    fnv, mask = pl.lit(FNV, dtype=pl.UInt64), pl.lit(MASK, dtype=pl.UInt64)
    h = pl.lit(0, dtype=pl.UInt64)
    for k in range(n):  # tokens are in document order, so a global shift is the next token
        h = (
            pl.when(pl.col("pos") + k < pl.col("L"))
            .then(((h * fnv) & mask) ^ pl.col("h").shift(-k))
            .otherwise(h)
        )
    sh = (
        tok.with_columns(s=h)
        .filter(pl.col("pos") <= pl.max_horizontal(pl.col("L") - n, 0))
        .select("doc", "s")
    )
    counts = np.bincount(sh["doc"].to_numpy(), minlength=len(texts))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return sh["s"].to_numpy().astype(np.uint32), offsets


def shingle_hashes(text: str, n: int = 5, mode: str = "word") -> np.ndarray:
    flat, off = batch_shingle_hashes([text], n, mode)
    return flat[off[0] : off[1]]


_NON_WORD_RE = re.compile(_NON_WORD)


def tokenize(text: str, mode: str = "word") -> list[str]:
    """The tokens ``batch_shingle_hashes`` sees, in pure Python (per-document reference path)."""
    norm = _NON_WORD_RE.sub(" ", unicodedata.normalize("NFKC", text or "").lower()).strip()
    if mode == "word":
        return [t for t in norm.split(" ") if t]
    return [c for c in norm if c]


def shingles(text: str, n: int = 5, mode: str = "word") -> list[str]:
    """The shingles as text (exact Jaccard, and the per-shingle reference path)."""
    tokens = tokenize(text, mode)
    if not tokens:
        return []
    k = min(n, len(tokens))
    sep = " " if mode == "word" else "\x00"
    return sorted({sep.join(tokens[i : i + k]) for i in range(len(tokens) - k + 1)})


def shingle_hash(shingle: str | bytes, mode: str = "word") -> int:
    """The hash ``batch_shingle_hashes`` gives this shingle: a datasketch ``hashfunc``."""
    if isinstance(shingle, bytes):
        shingle = shingle.decode("utf-8")
    parts = shingle.split(" ") if mode == "word" else shingle.split("\x00")
    hs = pl.Series(parts, dtype=pl.String).hash(seed=0).to_list()
    h = 0
    for t in hs:
        h = ((h * FNV) & MASK) ^ (t & MASK)
    return h

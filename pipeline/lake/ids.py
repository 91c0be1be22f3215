"""Deterministic ids: content hashes so the same content gets the same id in every run."""

from __future__ import annotations

import hashlib
import re
import unicodedata

import orjson

_WS = re.compile(r"\s+")


def digest(data: bytes, n: int = 16) -> str:
    """Hex blake2b of ``data`` (``n`` bytes = 2n hex chars); fast and stable across runs."""
    return hashlib.blake2b(data, digest_size=n).hexdigest()


def normalize_question(text: str | None) -> str:
    """NFKC, unify quotes and dashes, collapse whitespace: the same question from two sources,
    differing only in Unicode forms or spacing, normalizes to the same string."""
    if not text:
        return ""
    t = unicodedata.normalize("NFKC", text)
    t = t.translate(_QUOTES)
    return _WS.sub(" ", t).strip()


_QUOTES = str.maketrans(
    {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"}
)


def question_id(text: str | None) -> str:
    return digest(normalize_question(text).encode("utf-8"))


def content_id(obj: object) -> str:
    """Id of a JSON-able object by its canonical serialization (sorted keys)."""
    return digest(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS))


def record_id(file_sha256: str, index: int, sub: int = 0) -> str:
    return digest(f"{file_sha256}:{index}:{sub}".encode())

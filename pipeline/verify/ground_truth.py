"""Ground-truth normalization shared by readers and (later) the verifier.

Pools store answers differently (``#### 1,000`` text, ``27.0`` floats, ``"204"`` strings, LaTeX);
``normalize_answer`` gives one canonical text per answer and an ``answer_type``.
"""

from __future__ import annotations

import re

_NUM = re.compile(r"^[-+]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?$")


def canonical_number(text: str) -> str | None:
    """``"1,000"`` -> ``"1000"``, ``"27.0"`` -> ``"27"``, ``"0.50"`` -> ``"0.5"``; None if not a number."""
    t = text.strip().replace("$", "").strip()
    if not t or not _NUM.match(t) or t in {"+", "-", "."}:
        return None
    t = t.replace(",", "")
    if "." in t:
        t = t.rstrip("0").rstrip(".")
    if t.startswith("+"):
        t = t[1:]
    if t in ("-0", ""):
        t = "0"
    return t


def gsm8k_final(answer: str) -> str | None:
    """The number after ``####`` (GSM8K) or ``A:`` (GSM8K model solutions)."""
    m = re.search(r"####\s*(.+?)\s*$", answer) or re.search(r"(?:^|\n)A:\s*(.+?)\s*$", answer)
    return m.group(1) if m else None


def normalize_answer(raw: object) -> tuple[str | None, str | None]:
    """(normalized text, answer_type) for a raw pool answer."""
    if raw is None:
        return None, None
    if isinstance(raw, bool):
        return str(raw).lower(), "text"
    if isinstance(raw, int):
        return str(raw), "integer"
    if isinstance(raw, float):
        n = canonical_number(repr(raw))
        return n, "integer" if n and "." not in n else "number"
    text = str(raw).strip()
    if "####" in text:
        text = gsm8k_final(text) or text
    n = canonical_number(text)
    if n is not None:
        return n, "integer" if "." not in n else "number"
    if re.fullmatch(r"\(?[A-Ea-e]\)?", text):
        return text.strip("()").upper(), "letter"
    stripped = text.strip("$ ").strip()
    if "\\" in stripped or "^" in stripped or "{" in stripped:
        return stripped, "latex"
    return stripped, "text"

"""Is an answer correct? Ground truths normalized once (``ground_truth``), responses judged per
answer type (``verdict``), function calls by BFCL's rules, with or without their docs
(``calls``: the one function-call matcher)."""

from pipeline.verify.calls import calls_match, check, parse_calls
from pipeline.verify.verdict import (
    Verdict,
    extract_answer,
    last_boxed,
    letter_of,
    math_equal,
    numbers_equal,
    verify,
)

__all__ = [
    "Verdict",
    "calls_match",
    "check",
    "extract_answer",
    "last_boxed",
    "letter_of",
    "math_equal",
    "numbers_equal",
    "parse_calls",
    "verify",
]

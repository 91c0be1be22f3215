"""Is an answer correct? Ground truths normalized once (``ground_truth``), responses judged per
answer type (``verdict``), function calls without docs matched by value (``calls``)."""

from pipeline.verify.calls import call_matches, calls_match, parse_calls
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
    "call_matches",
    "calls_match",
    "extract_answer",
    "last_boxed",
    "letter_of",
    "math_equal",
    "numbers_equal",
    "parse_calls",
    "verify",
]

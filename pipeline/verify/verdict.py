"""Answer verification, pluggable per answer type: math (math-verify), numbers with tolerance,
multiple-choice letters, exact strings, and function calls (BFCL-style AST match).

``verify(response, ground_truth, answer_type)`` extracts the final answer from a model response
(``\\boxed{}``, ``#### n``, ``A: n``, "the answer is ...", the last number) and compares it with
the normalized ground truth of ``pipeline.verify.ground_truth``. math-verify's own timeouts use signals, which
fail outside the main thread, so they are disabled here (``parsing_timeout=None``); callers that
need a bound run verification in a worker process.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import orjson

from pipeline.verify.calls import calls_match
from pipeline.verify.ground_truth import canonical_number, gsm8k_final

logging.getLogger("math_verify").setLevel(logging.ERROR)

_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


@dataclass(frozen=True)
class Verdict:
    correct: bool
    extracted: str | None
    method: str


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces)."""
    i = text.rfind("\\boxed")
    if i < 0:
        return None
    j = text.find("{", i)
    if j < 0:
        return None
    depth = 0
    for k in range(j, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1 : k]
    return None


def extract_answer(text: str | None) -> str | None:
    if not text:
        return None
    for get in (last_boxed, gsm8k_final):
        found = get(text)
        if found:
            return found.strip()
    m = re.search(r"answer is[:\s]*\$?([^\n$]+?)\$?\s*\.?\s*$", text.strip(), re.I)
    if m:
        return m.group(1).strip()
    nums = _NUM.findall(text)
    return nums[-1] if nums else None


def numbers_equal(a: str | None, b: str | None, rel_tol: float = 1e-6) -> bool:
    x, y = canonical_number(a or ""), canonical_number(b or "")
    if x is None or y is None:
        return False
    fx, fy = float(x), float(y)
    return abs(fx - fy) <= rel_tol * max(1.0, abs(fy))


def math_equal(pred: str | None, gold: str | None) -> bool:
    if pred is None or gold is None:
        return False
    if numbers_equal(pred, gold):
        return True
    from math_verify import parse, verify

    try:
        g = parse("$" + gold + "$", parsing_timeout=None)
        p = parse("$" + pred + "$", parsing_timeout=None)
        return bool(g) and bool(p) and verify(g, p, timeout_seconds=None)
    except Exception:  # noqa: BLE001 - an unparsable answer is simply not equal
        return False


def letter_of(text: str | None) -> str | None:
    if not text:
        return None
    m = re.search(r"\b(?:answer|option)\s*(?:is|:)?\s*\(?([A-E])\)?\b", text, re.I) or re.search(
        r"^\s*\(?([A-E])\)?[.):\s]*$", text.strip().splitlines()[-1] if text.strip() else ""
    )
    return m.group(1).upper() if m else None


def verify(
    response: str | None, ground_truth: str | None, answer_type: str | None = None
) -> Verdict:
    """Is ``response`` a correct answer to a question with this ground truth?"""
    if ground_truth is None:
        return Verdict(False, None, "no_ground_truth")
    if answer_type == "function_calls":
        gt = orjson.loads(ground_truth)
        text = response or ""
        m = re.search(r"<tool_call>\s*(.*?)\s*</tool_call>", text, re.S)
        return Verdict(calls_match(m.group(1) if m else text, gt), text[:200], "function_calls")
    pred = extract_answer(response)
    if answer_type in ("integer", "number"):
        return Verdict(
            numbers_equal(pred, ground_truth) or math_equal(pred, ground_truth), pred, "number"
        )
    if answer_type == "letter":  # "the answer is (B)", or a boxed letter
        got = letter_of(response) or (
            pred.strip("() ").upper() if pred and re.fullmatch(r"\(?[A-Ea-e]\)?", pred) else None
        )
        return Verdict(got == ground_truth.strip("() ").upper(), got, "letter")
    if answer_type == "text":
        norm = lambda s: re.sub(r"\s+", " ", (s or "").strip().lower().rstrip("."))  # noqa: E731
        return Verdict(
            norm(pred) == norm(ground_truth) or norm(response) == norm(ground_truth), pred, "exact"
        )
    return Verdict(math_equal(pred, ground_truth), pred, "math")

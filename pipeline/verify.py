"""Answer verification, pluggable per answer type: math (math-verify), numbers with tolerance,
multiple-choice letters, exact strings, and function calls (BFCL-style AST match).

``verify(response, ground_truth, answer_type)`` extracts the final answer from a model response
(``\\boxed{}``, ``#### n``, ``A: n``, "the answer is ...", the last number) and compares it with
the normalized ground truth of ``pipeline.answers``. math-verify's own timeouts use signals, which
fail outside the main thread, so they are disabled here (``parsing_timeout=None``); callers that
need a bound run verification in a worker process.
"""

from __future__ import annotations

import ast
import logging
import re
from dataclasses import dataclass

import orjson

from pipeline.answers import canonical_number, gsm8k_final

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


# ---- function calls ----------------------------------------------------------------------------


def parse_calls(text: str) -> list[tuple[str, dict]]:
    """Calls from Python syntax (``f(a=1)``, a list of them) or JSON (``[{"f": {"a": 1}}]`` or
    ``{"name": ..., "arguments": ...}``)."""
    text = text.strip()
    try:
        obj = orjson.loads(text)
        items = obj if isinstance(obj, list) else [obj]
        calls = []
        for it in items:
            if isinstance(it, dict) and "name" in it:
                args = it.get("arguments", {})
                calls.append((it["name"], orjson.loads(args) if isinstance(args, str) else args))
            elif isinstance(it, dict) and len(it) == 1:
                ((name, args),) = it.items()
                calls.append((name, args))
        return calls
    except orjson.JSONDecodeError:
        pass
    tree = ast.parse(text if not text.startswith("[") else text, mode="eval")
    nodes = tree.body.elts if isinstance(tree.body, ast.List) else [tree.body]
    out = []
    for n in nodes:
        if not isinstance(n, ast.Call):
            raise ValueError("not a call")
        out.append((ast.unparse(n.func), {kw.arg: ast.literal_eval(kw.value) for kw in n.keywords}))
    return out


def _value_ok(value, allowed: list) -> bool:
    for a in allowed:
        if a == value or (
            isinstance(a, (int, float))
            and isinstance(value, (int, float))
            and abs(a - value) < 1e-9
        ):
            return True
        if (
            isinstance(a, str)
            and isinstance(value, str)
            and a.strip().lower() == value.strip().lower()
        ):
            return True
    return False


def call_matches(call: tuple[str, dict], expected: dict) -> bool:
    """One call against ``{func: {param: [acceptable values]}}``; ``""`` allows omission."""
    ((fname, params),) = expected.items()
    name, args = call
    if name != fname:
        return False
    for p, allowed in params.items():
        if p not in args:
            if "" not in allowed:
                return False
        elif not _value_ok(args[p], allowed):
            return False
    return all(p in params for p in args)


def calls_match(text: str, ground_truth: list) -> bool:
    """Every expected call matched by a distinct produced call (order-free) and nothing extra."""
    try:
        calls = parse_calls(text) if text.strip() else []
    except (ValueError, SyntaxError):
        return False
    if len(calls) != len(ground_truth):
        return False
    remaining = list(calls)
    for exp in ground_truth:
        hit = next((c for c in remaining if call_matches(c, exp)), None)
        if hit is None:
            return False
        remaining.remove(hit)
    return True


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
    if answer_type == "letter":
        return Verdict(
            letter_of(response) == ground_truth.strip().upper(), letter_of(response), "letter"
        )
    if answer_type == "text":
        norm = lambda s: re.sub(r"\s+", " ", (s or "").strip().lower().rstrip("."))  # noqa: E731
        return Verdict(
            norm(pred) == norm(ground_truth) or norm(response) == norm(ground_truth), pred, "exact"
        )
    return Verdict(math_equal(pred, ground_truth), pred, "math")

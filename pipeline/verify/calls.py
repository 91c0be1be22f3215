"""Function calls against a ground truth that carries no function docs: Python-syntax or JSON
calls matched order-free, each value against its acceptable list (BFCL's answer shape), used by
``verify`` for rows without tools. Rows with tools are judged by BFCL's checker
(``pipeline.evaluate.function_calls``)."""

from __future__ import annotations

import ast

import orjson


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

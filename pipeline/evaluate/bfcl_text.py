"""Raw model text judged two ways, for the agreement test and bench: by BFCL itself (its Qwen /
Hermes handler's ``decode_ast`` on the text after ``</think>``, then its format check and
``ast_checker``, or its relevance runner on irrelevance) and by the project (``decode_calls``
then ``check``, as labels, rewards and evaluation read an episode). ``renderings`` writes an
output the ways models write it: the template's exact form, and the slips BFCL's decoder reads
otherwise (no newline, spaces, CRLF, arguments as a JSON string or missing, a broken block
beside good ones, calls inside ``<think>``, an empty name, NaN)."""

from __future__ import annotations

import json

from pipeline.verify.calls import check
from pipeline.verify.decode import decode_calls

# ---- outputs built from a possible answer: ones BFCL accepts and ones it rejects -------------


def first(values: list):
    return next((v for v in values if v != ""), "")


def canonical(possible: list[dict], optional: bool = False) -> list[dict]:
    """The answer's first acceptable value per parameter; optional ones left out, or given
    their first value (``optional``)."""
    out = []
    for expected in possible:
        ((name, params),) = expected.items()
        args = {p: (first(v) if optional or not v else v[0]) for p, v in params.items()}
        out.append({name: {p: v for p, v in args.items() if v != ""}})
    return out


def other(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + " qq"
    if isinstance(value, list):
        return [*value, value[0]] if value else ["qq"]
    if isinstance(value, dict):
        return {**value, "qq": 1}
    return "qq"


def variants(possible: list[dict], functions: list[dict]) -> dict[str, list[dict]]:
    base = canonical(possible)
    out = {"canonical": base, "with_optional": canonical(possible, optional=True)}
    ((name, args),) = base[0].items()
    if args:
        p, v = next(iter(args.items()))
        out["wrong_value"] = [{name: {**args, p: other(v)}}, *base[1:]]
        out["missing_param"] = [{name: {k: x for k, x in args.items() if k != p}}, *base[1:]]
        out["as_string"] = [{name: {**args, p: str(v)}}, *base[1:]]
        if isinstance(v, str):
            styled = v.upper().replace(" ", "-") + "."
            out["string_style"] = [{name: {**args, p: styled}}, *base[1:]]
        if isinstance(v, float) and v.is_integer():
            out["int_for_float"] = [{name: {**args, p: int(v)}}, *base[1:]]
        if isinstance(v, list) and v:
            out["tuple"] = [{name: {**args, p: tuple(v)}}, *base[1:]]
    out["extra_param"] = [{name: {**args, "zz_extra": 1}}, *base[1:]]
    out["wrong_name"] = [{name + "_x": args}, *base[1:]]
    out["one_more_call"] = [*base, base[0]]
    if len(base) > 1:
        out["one_call_less"] = base[:-1]
        out["reordered"] = base[::-1]
    return out


def irrelevance_variants(functions: list[dict]) -> dict[str, list[dict]]:
    f = functions[0]
    args = {p: "x" for p in f["parameters"].get("required", [])}
    return {"no_call": [], "empty_call": [{}], "a_call": [{f["name"]: args}]}


# ---- raw text ------------------------------------------------------------------------------


def _block(name, arguments, key: str = "arguments", sep: str = "\n") -> str:
    body = {"name": name} if key is None else {"name": name, key: arguments}
    return f"<tool_call>{sep}{json.dumps(body)}{sep}</tool_call>"


def renderings(output: list[dict]) -> dict[str, str]:
    """``output`` ([{name: arguments}]) as model text, one rendering per way of writing it."""
    if any(not c for c in output):  # an empty call, written as an empty object
        return {"exact": "\n".join("<tool_call>\n{}\n</tool_call>" for _ in output)}
    calls = [next(iter(c.items())) for c in output]
    exact = "\n".join(_block(n, a) for n, a in calls)
    out = {
        "exact": exact,
        "after_prose": "I will call the function.\n" + exact,
        "after_think": "<think>\nThe user wants this.\n</think>\n\n" + exact,
        "inside_think": "<think>\n" + exact + "\n</think>\n\nNo call is needed.",
        "no_newlines": "".join(_block(n, a, sep="") for n, a in calls),
        "spaces": "\n".join(_block(n, a, sep=" ") for n, a in calls),
        "crlf": "\r\n".join(_block(n, a, sep="\r\n") for n, a in calls),
        "string_arguments": "\n".join(_block(n, json.dumps(a)) for n, a in calls),
        "no_arguments": "\n".join(_block(n, None, key=None) for n, _ in calls),
        "parameters_key": "\n".join(_block(n, a, key="parameters") for n, a in calls),
        "broken_beside": exact + '\n<tool_call>\n{"name": "f", "arguments": {\n</tool_call>',
    }
    if calls:
        (n0, a0), rest = calls[0], calls[1:]
        out["empty_name"] = "\n".join(_block(n, a) for n, a in [("", a0), *rest])
        if a0:
            k = next(iter(a0))
            out["nan"] = "\n".join(_block(n, a) for n, a in [(n0, {**a0, k: float("nan")}), *rest])
    return out


def ours(text: str, functions: list[dict], possible: list, category: str) -> bool:
    """The project's verdict on raw text, as an episode is judged (function_calls)."""
    calls = decode_calls(text)
    relevant = "irrelevance" not in category
    return (calls is not None or not relevant) and check(
        functions, calls or [], possible, category
    ).valid


def bfcl(text: str, functions: list[dict], possible: list, category: str) -> bool:
    """BFCL's verdict on raw text: its Qwen FC handler, format check and checker (bfcl-eval)."""
    from bfcl_eval.constants.enums import Language, ReturnFormat
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler
    from bfcl_eval.utils import is_empty_output, is_function_calling_format_output

    handler = object.__new__(QwenFCHandler)  # decode_ast reads nothing of the instance
    if "</think>" in text:  # QwenFCHandler._parse_query_response_prompting
        text = text.split("</think>")[-1].lstrip("\n")
    try:
        decoded = handler.decode_ast(text, ReturnFormat.PYTHON, False)
    except Exception:  # noqa: BLE001 - BFCL's "decoder failed", whatever raised it
        return "irrelevance" in category
    if "irrelevance" in category:
        return is_empty_output(decoded)
    if not is_function_calling_format_output(decoded):
        return False
    model = "Qwen/Qwen3-0.6B-FC"  # keeps the dots of function names, as the docs write them
    return ast_checker(functions, decoded, possible, Language.PYTHON, category, model)["valid"]

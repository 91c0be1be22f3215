"""The project's one function-call matcher, with BFCL's AST semantics (its Python categories:
simple, multiple, parallel, parallel_multiple, irrelevance and their live_ versions): labels,
rewards, evaluation and ``verify`` all judge calls here.

A decoded output is a list of calls ``[{name: {param: value}}]``; a possible answer is
``[{name: {param: [acceptable values]}}]`` where ``""`` among the values marks an optional
parameter. The rules are BFCL's (``bfcl_eval.eval_checker.ast_eval.ast_checker``), and
tests/test_bfcl.py checks every verdict against that checker on outputs covering each
category: required parameters present, no parameter the docs or the answer do not have, the
value's type as the docs declare it (an int where a float is declared is converted; a value of
the answer's own type is a "variable" and matched exactly), strings compared after dropping
spaces and ``,./-_*^`` and lowercasing, lists and dicts element by element, parallel calls
matched in any order. A ground truth without function docs (``calls_match``) is judged against
docs read off the answer itself (``docs_from_answer``)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

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


# BFCL's single-turn categories in the shared data, the ones these verdicts cover
CATEGORIES = (
    "simple",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
)
# the live_ categories of BFCL v3 beyond the shared data, judged by the same rules
SUPPORTED = {*CATEGORIES, "live_parallel", "live_parallel_multiple", "live_irrelevance"}


def supported(dataset: str | None) -> bool:
    """A BFCL single-turn Python category these verdicts cover (not Java, JavaScript, REST,
    relevance or multi-turn, whose answers are judged otherwise)."""
    return bool(dataset) and category_of(dataset) in SUPPORTED


TYPES = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
NESTED = ("array", "tuple")


@dataclass(frozen=True)
class CallVerdict:
    valid: bool
    error_type: str | None = None  # BFCL's error type names (wrong_count, missing_required...)
    error: str = ""


OK = CallVerdict(True)


def standardize(text: str) -> str:
    """BFCL's string normal form: no spaces or ``,./-_*^``, lowercase, ``'`` as ``"``."""
    return re.sub(r"[ ,./\-_*^]", "", text).lower().replace("'", '"')


def check(functions: list[dict], output: list[dict], possible: list[dict], category: str):
    """BFCL's verdict on one decoded output; ``functions``: the function docs offered."""
    if "irrelevance" in category:
        called = any(isinstance(c, dict) and c for c in output)
        return CallVerdict(False, "irrelevance_error:decoder_success") if called else OK
    if "parallel" in category:
        return _parallel(functions, output, possible)
    if len(output) != len(possible) or ("multiple" not in category and len(output) != 1):
        return CallVerdict(False, "wrong_count", "Wrong number of functions.")
    if "multiple" in category:
        return _call(_doc(functions, next(iter(possible[0]))), output[0], possible[0])
    return _call(functions[0], output[0], possible[0])


def bfcl_verdict(functions: list[dict], output: list[dict], possible: list, category: str) -> bool:
    """BFCL's own verdict (``bfcl-eval``'s ``ast_checker``; on irrelevance its relevance
    runner's ``is_empty_output``): the reference ``check`` is tested against. Needs bfcl-eval,
    which only the tests and bench/bfcl_agreement.py import."""
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.utils import is_empty_output

    if "irrelevance" in category:
        return is_empty_output(output)
    # a model whose function names keep their dots, as the offered docs write them
    return ast_checker(
        functions, output, possible, Language.PYTHON, category, "Qwen/Qwen3-0.6B-FC"
    )["valid"]


def _doc(functions: list[dict], name: str) -> dict | None:
    return next((f for f in functions if f.get("name") == name), None)


def _parallel(functions: list[dict], output: list[dict], possible: list[dict]) -> CallVerdict:
    """Every expected call matched by a distinct output call, in any order."""
    if len(output) != len(possible):
        return CallVerdict(False, "wrong_count", "Wrong number of functions.")
    used: set[int] = set()
    for expected in possible:
        doc = _doc(functions, next(iter(expected)))
        hit = next(
            (i for i, c in enumerate(output) if i not in used and _call(doc, c, expected).valid),
            None,
        )
        if hit is None:
            return CallVerdict(False, "cannot_find_match", f"no output call matches {expected}")
        used.add(hit)
    return OK


def _call(doc: dict, call: dict, expected: dict) -> CallVerdict:
    """One call against the docs of the function it should be and its acceptable values."""
    allowed = next(iter(expected.values()))
    name, props = doc["name"], doc["parameters"]["properties"]
    if name not in call:
        return CallVerdict(False, "wrong_func_name", f"{name!r} not called")
    args = call[name]
    for p in doc["parameters"].get("required", []):
        if p not in args:
            return CallVerdict(False, "missing_required", f"missing {p!r}")
    for p, value in args.items():
        if p not in props or p not in allowed:
            return CallVerdict(False, "unexpected_param", f"unexpected {p!r}")
        declared = props[p]["type"]
        want = TYPES[declared]
        inner = TYPES[props[p]["items"]["type"]] if declared in NESTED else None
        if declared == "tuple" and type(value) is tuple:
            value = list(value)
        if declared == "float" and type(value) is int:  # Python's own int -> float
            value = float(value)
        typed, variable = _type_ok(value, allowed[p], want, inner)
        if not typed:
            return CallVerdict(False, "type_error", f"{p!r}: {value!r} is not {declared}")
        if not variable:
            if want is dict:
                verdict = _dict_ok(value, allowed[p])
            elif want is list and inner is dict:
                verdict = _list_of_dicts_ok(value, allowed[p])
            elif want is str:
                verdict = _in(
                    standardize(value), [standardize(a) for a in allowed[p] if type(a) is str]
                )
            elif want is list:
                verdict = _in(_std_list(value), [_std_list(a) for a in allowed[p]])
            else:
                verdict = _in(value, allowed[p])
        else:
            verdict = _in(value, allowed[p])
        if not verdict:
            return CallVerdict(False, "value_error", f"{p!r}: {value!r} not in {allowed[p]}")
    for p, values in allowed.items():
        if p not in args and "" not in values:
            return CallVerdict(False, "missing_optional", f"{p!r} not given, and not optional")
    return OK


def _in(value, options: list) -> bool:
    return value in options


def _std_list(values) -> list:
    """Strings standardized, other items as they are (an optional ``""`` is the empty list)."""
    return [standardize(v) if type(v) is str else v for v in values]


def _answer_type(values: list):
    """The type of the answer's first non-optional value."""
    return next((type(a) for a in values if a != ""), None)


def _type_ok(value, allowed: list, want: type, inner: type | None) -> tuple[bool, bool]:
    """(the type is acceptable, the value is a "variable": of the answer's type rather than
    the declared one, so it is matched exactly)."""
    answer = _answer_type(allowed)
    variable = answer is not None and answer is not want
    if type(value) is want:
        if inner is None:
            return True, variable
        for option in allowed:  # each item of the value of the inner type (one level deep)
            if type(option) is not list or all(_type_ok(v, option, inner, None)[0] for v in value):
                return True, variable
        return False, variable
    if answer is not None and type(value) is answer:
        return True, True
    return False, False


def _dict_ok(value: dict, options: list) -> bool:
    for option in options:
        if option == "":
            continue
        if all(
            k in option
            and (standardize(v) if type(v) is str else v)
            in [standardize(a) if type(a) is str else a for a in option[k]]
            for k, v in value.items()
        ) and all(k in value or "" in vals for k, vals in option.items()):
            return True
    return False


def _list_of_dicts_ok(value: list, options: list) -> bool:
    return any(
        len(value) == len(option)
        and all(_dict_ok(v, [o]) for v, o in zip(value, option, strict=True))
        for option in options
    )


def category_of(dataset: str) -> str:
    """BFCL's category from the lake's dataset name (``bfcl_live_simple`` -> ``live_simple``);
    BFCL v4's names too (``simple_python`` is v3's ``simple``; ``simple_java`` and
    ``simple_javascript`` stay themselves, judged otherwise)."""
    category = dataset.split("/")[0].removeprefix("bfcl_").removeprefix("BFCL_v4_")
    return V4.get(category, category)


V4 = {"simple_python": "simple"}
"""BFCL v4 category names that are a v3 category under another name."""


JSON_TYPES = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "float",
    list: "array",
    dict: "dict",
}


def docs_from_answer(possible: list[dict]) -> list[dict]:
    """Function docs read off a possible answer, for a ground truth that carries none: each
    parameter typed by its first acceptable value (a list as an ``array``, as BFCL's docs
    mostly declare it), required where every expected call of the function requires it
    (``""`` not acceptable)."""
    docs: dict[str, dict] = {}
    for expected in possible:
        ((name, params),) = expected.items()
        doc = docs.setdefault(name, {"name": name, "parameters": {"properties": {}}})
        props = doc["parameters"]["properties"]
        required = {p for p, values in params.items() if "" not in values}
        doc["parameters"]["required"] = sorted(
            required if "required" not in doc["parameters"]
            else required & set(doc["parameters"]["required"])
        )  # fmt: skip
        for p, values in params.items():
            first = next((v for v in values if v != ""), "")
            spec = {"type": JSON_TYPES.get(type(first), "any")}
            if spec["type"] == "array":
                item = next((type(x) for v in values if isinstance(v, list) for x in v), str)
                spec["items"] = {"type": JSON_TYPES.get(item, "any")}
            props.setdefault(p, spec)
    return list(docs.values())


def calls_match(text: str, ground_truth: list, functions: list[dict] | None = None) -> bool:
    """Python-syntax or JSON calls in ``text`` against a possible answer, by BFCL's rules:
    ``functions`` (the docs offered), else docs read off the answer; an empty answer means no
    call is due (irrelevance), several calls are matched in any order."""
    try:
        calls = parse_calls(text) if text.strip() else []
    except (ValueError, SyntaxError):
        return False
    output = [{name: args} for name, args in calls]
    category = (
        "irrelevance" if not ground_truth else "parallel" if len(ground_truth) > 1 else "simple"
    )
    docs = functions or docs_from_answer(ground_truth)
    if category == "simple" and functions:
        category = "multiple"  # the answer's function among the offered ones
    return check(docs, output, ground_truth, category).valid

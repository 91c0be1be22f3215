"""Function-calling verdicts with BFCL's AST semantics (its Python categories: simple, multiple,
parallel, parallel_multiple, irrelevance and their live_ versions), and the metrics built on them.

A decoded output is a list of calls ``[{name: {param: value}}]``; a possible answer is
``[{name: {param: [acceptable values]}}]`` where ``""`` among the values marks an optional
parameter. The rules are BFCL's (``bfcl_eval.eval_checker.ast_eval.ast_checker``), and
tests/test_bfcl.py checks every verdict against that checker on outputs covering each
category: required parameters present, no parameter the docs or the answer do not have, the
value's type as the docs declare it (an int where a float is declared is converted; a value of
the answer's own type is a "variable" and matched exactly), strings compared after dropping
spaces and ``,./-_*^`` and lowercasing, lists and dicts element by element, parallel calls
matched in any order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

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


# ---- the policy on function-calling questions ---------------------------------------------


def category_of(dataset: str) -> str:
    """BFCL's category from the lake's dataset name (``bfcl_live_simple`` -> ``live_simple``)."""
    return dataset.split("/")[0].removeprefix("bfcl_")


def decoded(episode) -> tuple[list[dict], bool]:
    """(the first turn's calls as ``[{name: arguments}]``, every call block parsed)."""
    turn = next((m for m in episode.messages if m["role"] == "assistant"), None)
    calls = (turn or {}).get("tool_calls") or []
    return [{c["name"]: c["arguments"]} for c in calls], episode.malformed_calls == 0


def episode_verdict(question: dict, episode) -> dict:
    """What one episode scores on a function-calling question."""
    functions = [t["function"] for t in question["tools"]]
    offered = {f["name"] for f in functions}
    possible = question["possible"]
    category = category_of(question["dataset"])
    output, parsed = decoded(episode)
    names = [next(iter(c)) for c in output]
    relevant = "irrelevance" not in category
    # as BFCL: where a call is due, an output that does not decode fails; on irrelevance, what
    # does not decode is no call
    valid = (parsed or not relevant) and check(functions, output, possible, category).valid
    return {
        "correct": valid,
        "relevant": relevant,
        "format_ok": parsed and bool(output),
        "names_ok": sorted(names) == sorted(next(iter(e)) for e in possible),
        "calls": len(output),
        "hallucinated": sum(n not in offered for n in names),
        "no_call": not output,  # as BFCL: a block that does not decode is no call
    }


def metrics(verdicts: list[dict]) -> dict:
    """BFCL-style metrics over episodes: accuracy (AST match; no call on irrelevance), format
    accuracy and tool-name accuracy where a call is due, hallucinated-tool rate over calls,
    irrelevance detection, calls per task."""
    rel = [v for v in verdicts if v["relevant"]]
    irr = [v for v in verdicts if not v["relevant"]]
    calls = sum(v["calls"] for v in verdicts)

    def share(rows: list[dict], key: str) -> float:
        return sum(bool(r[key]) for r in rows) / len(rows) if rows else float("nan")

    return {
        "accuracy": share(verdicts, "correct"),
        "ast_accuracy": share(rel, "correct"),
        "format_accuracy": share(rel, "format_ok"),
        "tool_name_accuracy": share(rel, "names_ok"),
        "hallucinated_tool_rate": sum(v["hallucinated"] for v in verdicts) / calls
        if calls
        else 0.0,
        "irrelevance_detection": share(irr, "no_call"),
        "calls_per_task": calls / len(verdicts) if verdicts else float("nan"),
    }


def evaluate_function_calls(
    engine, questions: list[dict], k: int = 1, config=None, sampling=None, bootstrap: int = 1000
) -> dict:
    """The policy on function-calling questions, each offered its own function docs as tools
    (one turn: BFCL's single-turn categories are judged on the calls, nothing is executed).
    ``questions``: question_id, question, tools (OpenAI shape), ground_truth (the possible
    answer as JSON), dataset (``bfcl_<category>``). Returns the metrics of the whole set, their
    intervals (``ci``) and ``slices`` per category."""
    import orjson

    from pipeline.evaluate.estimators import bootstrap_ci
    from pipeline.rollout.agent import AgentConfig, run_episodes

    unknown = sorted({q["dataset"] for q in questions if not supported(q.get("dataset"))})
    if unknown:
        raise ValueError(
            f"no function-calling verdicts for {unknown}: supported are BFCL's "
            f"{', '.join(sorted(SUPPORTED))}"
        )
    config = config or AgentConfig(system_prompt=None)
    config = replace(config, max_turns=1, tool_format="hermes")
    qs = [q | {"possible": orjson.loads(q["ground_truth"])} for q in questions]
    eps = run_episodes(
        engine,
        engine.tokenizer,
        [(q["question_id"], q["question"], q["tools"]) for q in qs],
        k,
        config,
        sampling,
    )
    verdicts = [
        episode_verdict(q, e) for q, e in zip([q for q in qs for _ in range(k)], eps, strict=True)
    ]

    def part(idx: list[int]) -> dict:
        rows = [verdicts[i * k + j] for i in idx for j in range(k)]
        out = {"questions": len(idx), "k": k} | metrics(rows)
        per_q = [sum(verdicts[i * k + j]["correct"] for j in range(k)) / k for i in idx]
        out["ci"] = {"accuracy": list(bootstrap_ci(per_q, bootstrap))}
        return out

    result = part(list(range(len(qs))))
    result[f"average@{k}"] = result[
        "accuracy"
    ]  # the accuracy over all k samples, by its usual name
    result["ci"][f"average@{k}"] = result["ci"]["accuracy"]
    result["slices"] = {
        f"category={c}": part([i for i, q in enumerate(qs) if category_of(q["dataset"]) == c])
        for c in sorted({category_of(q["dataset"]) for q in qs})
    }
    return result


# ---- the function-calling reward ------------------------------------------------------------


def reward(
    functions: list[dict], output: list[dict], parsed: bool, possible: list, category: str
) -> float:
    """The reward of GRPO recipes for tool calling: format +1 (the calls parse, and there are
    some exactly when some are due), arguments +1 (the share of expected calls an output call
    matches, name and arguments; on irrelevance, no call), result +2 (BFCL's verdict). A right
    answer scores 4 and any wrong one below 2: the outcome dominates."""
    relevant = "irrelevance" not in category
    result = check(functions, output, possible, category).valid and (parsed or not relevant)
    fmt = parsed and (bool(output) == relevant)
    if not relevant:
        args = 0.0 if output else 1.0
    else:
        used: set[int] = set()
        for expected in possible:
            doc = _doc(functions, next(iter(expected)))
            hit = next(
                (
                    i
                    for i, c in enumerate(output)
                    if i not in used and doc and _call(doc, c, expected).valid
                ),
                None,
            )
            if hit is not None:
                used.add(hit)
        args = len(used) / len(possible) if possible else 0.0
        if len(output) > len(possible):  # extra calls are not free
            args *= len(possible) / len(output)
    return float(fmt) + args + 2.0 * result


def text_calls(text: str) -> tuple[list[dict], bool]:
    """(the Hermes ``<tool_call>`` calls of a completion as ``[{name: arguments}]``, every block
    parsed): what a framework's reward function sees is text."""
    from pipeline.rollout.agent import parse_calls

    calls, bad = parse_calls(text or "", "hermes")
    return [{c["name"]: c["arguments"]} for c in calls if c.get("name")], bad == 0


def question_reward(question: dict, output: list[dict], parsed: bool) -> float:
    """``reward`` for a question as the lake and the exports carry it: tools (OpenAI shape, or
    JSON text of it), ground_truth (JSON), and its BFCL category or ``bfcl_<category>`` dataset."""
    import orjson

    tools = question["tools"]
    tools = orjson.loads(tools) if isinstance(tools, str) else tools
    functions = [t.get("function", t) for t in tools or []]
    possible = orjson.loads(question["ground_truth"])
    category = category_of(question.get("category") or question.get("dataset") or "simple")
    return reward(functions, output, parsed, possible, category)

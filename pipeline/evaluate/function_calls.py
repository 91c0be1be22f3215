"""The policy on function-calling questions: an episode's verdict by BFCL's rules (the checker
is ``pipeline.verify.calls``, the project's one function-call matcher), the metrics built on
them, and the function-calling reward.

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

from dataclasses import replace

from pipeline.verify.calls import (  # noqa: F401 (the checker, re-exported for its users)
    CATEGORIES,
    SUPPORTED,
    CallVerdict,
    _call,
    _doc,
    bfcl_verdict,
    category_of,
    check,
    docs_from_answer,
    standardize,
    supported,
)

# ---- the policy on function-calling questions ---------------------------------------------


def decoded(episode) -> tuple[list[dict], bool]:
    """(the first turn's calls as ``[{name: arguments}]``, the decoder read it): the turn's raw
    text as BFCL's handler decodes it (``pipeline.verify.decode``)."""
    turn = next((m for m in episode.messages if m["role"] == "assistant"), None)
    return text_calls((turn or {}).get("content") or "")


def episode_verdict(question: dict, episode) -> dict:
    """What one episode scores on a function-calling question."""
    possible = question["possible"]
    offered_docs = [t.get("function", t) for t in question.get("tools") or []]
    functions = offered_docs or docs_from_answer(possible)  # no docs: read off the answer
    offered = {f["name"] for f in offered_docs}
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
    engine, questions: list[dict], k: int = 1, config=None, sampling=None
) -> dict:
    """The policy on function-calling questions, each offered its own function docs as tools
    (one turn: BFCL's single-turn categories are judged on the calls, nothing is executed).
    ``questions``: question_id, question, tools (OpenAI shape), ground_truth (the possible
    answer as JSON), dataset (``bfcl_<category>``). Returns the metrics of the whole set, their
    intervals (``ci``) and ``slices`` per category."""
    import orjson

    from pipeline.evaluate.estimators import ks_for, pass_at_k, pass_hat_k, wilson_ci
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
        right = [sum(verdicts[i * k + j]["correct"] for j in range(k)) for i in idx]
        out["ci"] = {"accuracy": list(wilson_ci([c / k for c in right], k))}
        for j in ks_for(k)[1:]:  # pass@j (any of j right) and tau-bench's pass^j (all j right)
            for name, fn in ((f"pass@{j}", pass_at_k), (f"pass^{j}", pass_hat_k)):
                vals = [fn(k, c, j) for c in right]
                out[name] = sum(vals) / len(vals) if vals else float("nan")
                out["ci"][name] = list(wilson_ci(vals))
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
    """(the calls of a completion as ``[{name: arguments}]``, the decoder read it), as BFCL's
    handler decodes the raw text: what a framework's reward function sees is text."""
    from pipeline.verify.decode import decode_calls

    calls = decode_calls(text or "")
    return (calls or [], calls is not None)


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

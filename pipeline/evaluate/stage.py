"""Evaluation through the same agent loop the policy trains in.

Accuracy (``estimators``): average@k, the unbiased pass@j for j = 1, 2, 4, ... k, and maj@k
(the most frequent extracted answer, ties: first seen), each with a 95% interval over
questions. Agent metrics: tool calls per rollout, tool-error rate, recovery rate (a tool error,
then a correct answer), the share of answers a tool printed first, response tokens, turns.
Everything also per slice (domain, source dataset, difficulty bin) where the questions carry
them. ``record`` keeps each result in the lake's ``evals`` table (model, stage, eval set, slice,
metric, value, interval, n, k), so ``flow query "SELECT * FROM evals"`` compares checkpoints
across runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from pipeline.evaluate.errors import EvalError
from pipeline.evaluate.estimators import accuracy
from pipeline.rollout.agent import AgentConfig, run_episodes
from pipeline.rollout.engines import Sampling
from pipeline.verify import verify

SLICES = ("domain", "dataset", "difficulty")  # the breakdowns, where questions carry them


def record(
    lake,
    result: dict,
    model: str,
    stage: str,
    eval_set: str,
    now: datetime | None = None,
    eval_id: str | None = None,
) -> str:
    """Store an ``evaluate`` result in the lake's ``evals`` table (one row per metric and slice,
    with its interval where it has one; one part per evaluation); returns the evaluation's id
    (``eval_id``: a content key, so a rerun of the same evaluation finds it instead of adding it
    twice)."""
    import pyarrow as pa

    from schemas import TABLES

    now = now or datetime.now(UTC)
    eval_id = eval_id or uuid.uuid4().hex[:16]
    rows = []
    for name, part in [("all", result), *result.get("slices", {}).items()]:
        ci = part.get("ci", {})
        for metric, value in part.items():
            if metric in ("questions", "k") or not isinstance(value, (int, float)):
                continue
            lo, hi = ci.get(metric, (None, None))
            rows.append(
                {
                    "eval_id": eval_id,
                    "model": model,
                    "stage": stage,
                    "eval_set": eval_set,
                    "slice": name,
                    "metric": metric,
                    "value": float(value),
                    "ci_low": lo,
                    "ci_high": hi,
                    "n": part["questions"],
                    "k": part["k"],
                    "evaluated_at": now,
                }
            )
    lake.write_part(
        "evals",
        eval_id,
        pa.Table.from_pylist(rows, schema=TABLES["evals"]),
    )
    return eval_id


def recorded(lake, eval_id: str) -> dict | None:
    """The result stored under ``eval_id`` (the shape ``evaluate`` returns), or None."""
    if eval_id not in lake.parts("evals"):
        return None
    t = lake.read_part("evals", eval_id).to_pylist()
    out: dict = {}
    for r in t:
        name = r.get("slice") or "all"
        part = out if name == "all" else out.setdefault("slices", {}).setdefault(name, {})
        part |= {"questions": r["n"], "k": r["k"], r["metric"]: r["value"]}
        if r.get("ci_low") is not None:
            part.setdefault("ci", {})[r["metric"]] = [r["ci_low"], r["ci_high"]]
    return out


def evaluate(
    engine,
    questions: list[dict],
    k: int = 4,
    config: AgentConfig | None = None,
    sampling: Sampling | None = None,
    slices: tuple[str, ...] = SLICES,
    on_done: Callable[[int, int], None] | None = None,
) -> dict:
    """``questions``: dicts with question_id, question, ground_truth, answer_type (and, for the
    breakdowns, any of ``slices``: domain, dataset, difficulty); ``on_done(done, total)``: each
    episode's end, for progress. Returns the flat metrics of
    the whole set, ``ci`` {metric: [low, high]} and ``slices`` {"domain=math": metrics}.
    Function-calling questions (their own tools) are judged by BFCL's rules instead
    (``function_calls.evaluate_function_calls``)."""
    calls = [q for q in questions if q.get("answer_type") == "function_calls" and q.get("tools")]
    if calls and len(calls) < len(questions):
        raise EvalError(
            f"the set mixes {len(calls)} function-calling questions (judged by BFCL's rules, "
            f"one turn) with {len(questions) - len(calls)} others (judged by the verifier, "
            "through the agent loop): evaluate them as separate sets"
        )
    if calls:
        from pipeline.evaluate.function_calls import evaluate_function_calls

        return evaluate_function_calls(engine, questions, k, config, sampling)
    eps = run_episodes(
        engine,
        engine.tokenizer,
        [(q["question_id"], q["question"]) for q in questions],
        k,
        config,
        sampling,
        on_done=on_done,
    )
    per_q, agent = score_groups(questions, eps, k)
    result = summary(per_q, agent, k)
    result["slices"] = {}
    for key in slices:
        for value in sorted({str(q[key]) for q in questions if q.get(key) is not None}):
            idx = [i for i, q in enumerate(questions) if str(q.get(key)) == value]
            part = summary(
                [per_q[i] for i in idx],
                [agent[i * k + j] for i in idx for j in range(k)],
                k,
            )
            result["slices"][f"{key}={value}"] = part
    return result


def score_groups(questions: list[dict], eps: list, k: int) -> tuple[list, list[dict]]:
    """Per question (k, correct, maj@k right) and per episode its agent metrics; ``eps`` holds
    each question's k episodes in a row."""
    per_q, agent = [], []
    for i, q in enumerate(questions):
        group = eps[i * k : (i + 1) * k]
        verdicts = [verify(e.final_text, q["ground_truth"], q.get("answer_type")) for e in group]
        majority = majority_answer([v.extracted for v in verdicts], q.get("answer_type"))
        maj_ok = (
            majority is not None
            and verify(f"\\boxed{{{majority}}}", q["ground_truth"], q.get("answer_type")).correct
        )
        per_q.append((k, sum(v.correct for v in verdicts), maj_ok))
        agent += [episode_metrics(e, v) for e, v in zip(group, verdicts, strict=True)]
    return per_q, agent


def majority_answer(answers: list[str | None], answer_type: str | None) -> str | None:
    """The answer most samples gave, answers the verifier finds equal voting together ('7.0'
    and '7', '\\frac{1}{2}' and '0.5'); ties: the first seen."""
    groups: list[list[str]] = []
    for a in answers:
        if a is None:
            continue
        home = next(
            (
                g
                for g in groups
                if g[0] == a or verify(f"\\boxed{{{a}}}", g[0], answer_type).correct
            ),
            None,
        )
        if home is None:
            groups.append([a])
        else:
            home.append(a)
    return max(groups, key=len)[0] if groups else None  # max keeps the first of equal sizes


def episode_metrics(e, verdict) -> dict:
    """What an episode says about the agent besides its answer."""
    outputs = [m["content"] for m in e.messages if m["role"] == "tool"]
    answer = verdict.extracted
    return {
        "tool_calls": e.tool_calls,
        "tool_errors": e.tool_errors,
        "format_errors": e.format_errors,
        "turns": e.turns,
        "response_tokens": sum(e.mask),
        "correct": verdict.correct,
        "formatted": "\\boxed{" in (e.final_text or ""),  # the answer where the verifier reads it
        # the final answer was printed by a tool call before the policy gave it
        "verified": bool(answer) and any(answer in (o or "") for o in outputs),
    }


def summary(per_q: list[tuple[int, int, bool]], agent: list[dict], k: int) -> dict:
    """Accuracy estimators with intervals, then the agent metrics (means over episodes)."""
    acc = accuracy(per_q, k)
    n_ep = max(1, len(agent))
    calls = sum(a["tool_calls"] for a in agent)
    failed = [a for a in agent if a["tool_errors"] > 0]
    out: dict = {"questions": len(per_q), "k": k}
    out |= {m: v for m, (v, _, _) in acc.items()}
    out |= {
        "tool_calls_per_rollout": calls / n_ep,
        "tool_error_rate": sum(a["tool_errors"] for a in agent) / calls if calls else 0.0,
        # episodes that hit a tool error and still answered correctly
        "recovery_rate": sum(a["correct"] for a in failed) / len(failed)
        if failed
        else float("nan"),
        "verified_by_tool": sum(a["verified"] for a in agent) / n_ep,
        "format_rate": sum(a["formatted"] for a in agent) / n_ep,
        # rollouts with a turn BFCL's decoder reads otherwise than the loop ran it
        "format_error_rate": sum(a["format_errors"] > 0 for a in agent) / n_ep,
        "response_tokens": sum(a["response_tokens"] for a in agent) / n_ep,
        "turns": sum(a["turns"] for a in agent) / n_ep,
    }
    out["ci"] = {m: [lo, hi] for m, (_, lo, hi) in acc.items()}
    return out

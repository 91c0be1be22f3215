"""Evaluation through the same agent loop: average@k, maj@k and pass@k on a question set.

average@k: mean correctness over all k samples; pass@k: questions with at least one correct
sample; maj@k: the most frequent extracted answer (ties: first seen) is correct. ``record``
keeps each result in the lake's ``evals`` table (model, stage, eval set, metric, value, n, k),
so ``flow query "SELECT * FROM evals"`` compares checkpoints across runs.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime

from pipeline.rollout.agent import AgentConfig, run_episodes
from pipeline.rollout.engines import Sampling
from pipeline.verify import verify


def record(
    lake,
    result: dict,
    model: str,
    stage: str,
    eval_set: str,
    now: datetime | None = None,
    eval_id: str | None = None,
) -> str:
    """Store an ``evaluate`` result in the lake's ``evals`` table (one row per metric, one part
    per evaluation); returns the evaluation's id (``eval_id``: a content key, so a rerun of the
    same evaluation finds it instead of adding it twice)."""
    import pyarrow as pa

    from schemas import TABLES

    now = now or datetime.now(UTC)
    eval_id = eval_id or uuid.uuid4().hex[:16]
    rows = [
        {
            "eval_id": eval_id,
            "model": model,
            "stage": stage,
            "eval_set": eval_set,
            "metric": metric,
            "value": float(value),
            "n": result["questions"],
            "k": result["k"],
            "evaluated_at": now,
        }
        for metric, value in result.items()
        if metric not in ("questions", "k")
    ]
    lake.write_part(
        "evals",
        eval_id,
        pa.Table.from_pylist(rows, schema=TABLES["evals"]),
    )
    return eval_id


def recorded(lake, eval_id: str) -> dict | None:
    """The result stored under ``eval_id``, or None."""
    if eval_id not in lake.parts("evals"):
        return None
    t = lake.read_columns("evals", eval_id, ["metric", "value", "n", "k"]).to_pylist()
    return {"questions": t[0]["n"], "k": t[0]["k"]} | {r["metric"]: r["value"] for r in t}


def evaluate(
    engine,
    questions: list[dict],
    k: int = 4,
    config: AgentConfig | None = None,
    sampling: Sampling | None = None,
) -> dict:
    """``questions``: dicts with question_id, question, ground_truth, answer_type."""
    eps = run_episodes(
        engine,
        engine.tokenizer,
        [(q["question_id"], q["question"]) for q in questions],
        k,
        config,
        sampling,
    )
    per_q = []
    for i, q in enumerate(questions):
        group = eps[i * k : (i + 1) * k]
        verdicts = [verify(e.final_text, q["ground_truth"], q.get("answer_type")) for e in group]
        answers = [v.extracted for v in verdicts if v.extracted is not None]
        majority = Counter(answers).most_common(1)[0][0] if answers else None
        maj_ok = (
            majority is not None
            and verify(f"\\boxed{{{majority}}}", q["ground_truth"], q.get("answer_type")).correct
        )
        per_q.append(
            (sum(v.correct for v in verdicts) / k, any(v.correct for v in verdicts), maj_ok)
        )
    n = max(1, len(per_q))
    return {
        "questions": len(per_q),
        "k": k,
        f"average@{k}": sum(a for a, _, _ in per_q) / n,
        f"pass@{k}": sum(p for _, p, _ in per_q) / n,
        f"maj@{k}": sum(m for _, _, m in per_q) / n,
        "tool_calls_per_rollout": sum(e.tool_calls for e in eps) / max(1, len(eps)),
    }

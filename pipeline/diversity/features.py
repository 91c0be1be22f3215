"""The feature store: per unique question, the features its diversity is measured on, from the
question itself (domain, source, tool pattern) and from the behaviour of its recorded
trajectories and live rollouts (``pipeline.diversity.behaviour.features``): reactive or deliberative, how
many calls, error recovery, verification, response length.

Categorical values are strings so every dimension counts alike; ``unknown`` means the question
has no trajectory or rollout to read a behaviour from. A question's behaviour is the majority
over its trajectories and rollouts (ties: the first in sorted order); error recovery and
verification are ``yes`` when any of them shows it (rare behaviours would vanish in a majority).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pyarrow as pa

from pipeline.diversity.behaviour import features
from pipeline.lake import Lake
from pipeline.lake.query import query
from schemas import QUESTION_FEATURES

QUESTIONS_SQL = """
WITH traj AS (
  SELECT c.representative_id AS question_id, avg(t.num_tool_calls) AS calls
  FROM valid_trajectories t JOIN dedup_clusters c ON c.scope = 'question' AND c.member_id = t.question_id
  GROUP BY 1)
SELECT u.question_id, coalesce(u.domain, 'unknown') AS domain, coalesce(u.sources[1], 'unknown') AS source,
       CASE WHEN traj.calls IS NULL THEN 'unknown' WHEN traj.calls = 0 THEN 'none'
            WHEN traj.calls <= 1 THEN 'single' ELSE 'multi' END AS tool_pattern
FROM unique_questions u LEFT JOIN traj USING (question_id)
ORDER BY u.question_id
"""

TRAJECTORIES_SQL = """
SELECT c.representative_id AS question_id, t.messages, t.final_answer, t.is_correct, t.reward
FROM valid_trajectories t JOIN dedup_clusters c ON c.scope = 'question' AND c.member_id = t.question_id
"""


def calls_bucket(n: int) -> str:
    return str(n) if n < 3 else "3+"


def length_bucket(chars: int) -> str:
    """The policy's own text per trajectory: short (< 200 characters), medium (< 1000), long."""
    return "short" if chars < 200 else "medium" if chars < 1000 else "long"


def with_call_ids(messages: list[dict]) -> list[dict]:
    """Rollout messages carry calls without ids: number them, and give each tool result the id
    of the call it answers (results follow their turn's calls in order)."""
    out, pending, n = [], [], 0
    for m in messages:
        m = dict(m)
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                n += 1
                calls.append({"id": c.get("id") or f"c{n}", "name": c.get("name") or ""})
            m["tool_calls"] = calls
            pending = [c["id"] for c in calls]
        elif m.get("role") == "tool" and not m.get("tool_call_id") and pending:
            m["tool_call_id"] = pending.pop(0)
        out.append(m)
    return out


def behaviour(messages: list[dict], final_answer, is_correct, reward) -> dict[str, str]:
    f = features(messages, final_answer, is_correct, reward)
    chars = sum(
        len(m.get("content") or "") + len(m.get("reasoning") or "")
        for m in messages
        if m.get("role") == "assistant"
    )
    return {
        "behaviour": f["pattern"],
        "tool_calls": calls_bucket(f["tool_calls"]),
        "error_recovery": "yes" if f["error_recovery"] else "no",
        "verification": "yes" if f["verification"] else "no",
        "length": length_bucket(chars),
    }


def _majority(values: list[str]) -> str:
    counts = Counter(values)
    return min(counts, key=lambda v: (-counts[v], v))


def question_features(lake: Lake) -> pa.Table:
    """One row per unique question (schemas.QUESTION_FEATURES), in question_id order."""
    if not lake.parts("unique_questions"):
        return QUESTION_FEATURES.empty_table()
    seen: dict[str, list[dict[str, str]]] = defaultdict(list)
    n_traj: Counter = Counter()
    n_roll: Counter = Counter()
    for t in query(lake, TRAJECTORIES_SQL).to_pylist():
        seen[t["question_id"]].append(
            behaviour(t["messages"], t["final_answer"], t["is_correct"], t["reward"])
        )
        n_traj[t["question_id"]] += 1
    if lake.parts("rollouts"):
        for r in query(
            lake, "SELECT question_id, messages, extracted, correct FROM rollouts"
        ).to_pylist():
            msgs = with_call_ids(json.loads(r["messages"]))
            seen[r["question_id"]].append(behaviour(msgs, r["extracted"], r["correct"], None))
            n_roll[r["question_id"]] += 1
    rows = []
    for q in query(lake, QUESTIONS_SQL).to_pylist():
        got = seen.get(q["question_id"], [])
        b = {
            "behaviour": _majority([g["behaviour"] for g in got]) if got else "unknown",
            "tool_calls": _majority([g["tool_calls"] for g in got]) if got else "unknown",
            "error_recovery": (
                "yes" if any(g["error_recovery"] == "yes" for g in got) else "no"
            ) if got else "unknown",
            "verification": (
                "yes" if any(g["verification"] == "yes" for g in got) else "no"
            ) if got else "unknown",
            "length": _majority([g["length"] for g in got]) if got else "unknown",
        }  # fmt: skip
        rows.append(
            q
            | b
            | {"n_trajectories": n_traj[q["question_id"]], "n_rollouts": n_roll[q["question_id"]]}
        )
    return pa.Table.from_pylist(rows, schema=QUESTION_FEATURES)


def write_question_features(lake: Lake) -> int:
    """Rewrite ``question_features`` whole (a derived table, like ``unique_questions``); the
    number of questions."""
    table = question_features(lake)
    lake.write_part("question_features", "current", table)
    return table.num_rows

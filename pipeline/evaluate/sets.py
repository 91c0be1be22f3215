"""Which questions an evaluation asks (an evaluation set by name, split or prefix) and the key
that makes a rerun of the same evaluation find its results in the ``evals`` table."""

from __future__ import annotations

from dataclasses import asdict

import orjson

from pipeline.lake import Lake
from pipeline.lake.ids import digest
from pipeline.rollout.agent import AgentConfig
from pipeline.rollout.engines import Sampling


def eval_key(
    model: str,
    eval_set: str,
    questions: list[dict],
    k: int,
    agent: AgentConfig,
    sampling: Sampling,
    backend: str,
) -> str:
    """The model's weights, the very questions and every setting of the evaluation."""
    from pipeline.label import model_revision

    blob = {
        "revision": model_revision(model),
        "eval_set": eval_set,
        "questions": sorted(q["question_id"] for q in questions),
        "backend": backend,
        "k": k,
        "agent": asdict(agent),
        "sampling": asdict(sampling),
    }
    return "eval-" + digest(orjson.dumps(blob, default=str, option=orjson.OPT_SORT_KEYS), 8)


def held_out(lake: Lake, eval_set: str, limit: int | None) -> list[dict]:
    """An evaluation set's questions in a stable order (``dataset``, ``dataset/split``, or a
    ``prefix*`` of datasets: ``bfcl_*``), with what the breakdowns need: domain, dataset, and
    the difficulty bin where the lake has labels for the question."""
    from pipeline.build.select import SelectConfig, pass_rate_bin
    from pipeline.lake.query import query, sql_string

    name, _, split = eval_set.partition("/")
    if name.endswith("*"):
        pattern = name[:-1].replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%")
        where = f"dataset LIKE {sql_string(pattern + '%')} ESCAPE '\\'"
    else:
        where = f"dataset = {sql_string(name)}"
    where += f" AND split = {sql_string(split)}" if split else ""
    sql = (
        "SELECT question_id, question, ground_truth, answer_type, domain, dataset, tools "
        f"FROM valid_questions WHERE {where} AND ground_truth IS NOT NULL ORDER BY question_id"
    )
    rows = query(lake, sql).to_pylist()[:limit]
    rates = {}
    if lake.parts("labels"):
        rates = {
            r["question_id"]: r["p"]
            for r in query(
                lake, "SELECT question_id, avg(pass_rate) p FROM labels GROUP BY 1"
            ).to_pylist()
        }
    for r in rows:
        r["tools"] = orjson.loads(r["tools"]) if r["tools"] else None
        p = rates.get(r["question_id"])
        r["difficulty"] = None if p is None else pass_rate_bin(p, SelectConfig())
    return rows

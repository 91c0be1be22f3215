"""The judge stage: every trajectory (or rollout) of the lake judged once per judge revision,
into the ``judgements`` table; a rerun judges only what is new (the cache key is the target and
the judge's revision: its weights, template and sampling)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa

from pipeline.judge.config import TARGETS
from pipeline.judge.judge import Case, Judge
from pipeline.judge.parse import MAX_CHARS
from pipeline.judge.prompt import TEMPLATE_VERSION
from pipeline.lake import Lake, run_time


@dataclass
class JudgeResult:
    target: str
    judge: str
    revision: str
    candidates: int = 0
    judged: int = 0
    cached: int = 0  # judged before by this revision
    status: Counter = field(default_factory=Counter)  # ok | partial | failed
    reasons: Counter = field(default_factory=Counter)  # why parses failed
    score_mean: float | None = None
    note: str = ""

    def as_dict(self) -> dict:
        d = self.__dict__ | {"status": dict(self.status), "reasons": dict(self.reasons)}
        return d


def judgement_id(target: str, target_id: str, revision: str) -> str:
    return hashlib.sha256(f"{target}|{target_id}|{revision}".encode()).hexdigest()[:32]


def _cases(lake: Lake, target: str, limit: int | None) -> list[tuple[Case, str]]:
    from pipeline.lake.query import connect

    con = connect(lake)
    lim = f" LIMIT {int(limit)}" if limit else ""
    if target == "trajectories":
        rows = con.execute(
            "SELECT trajectory_id, question_id, question, tools, to_json(messages) "
            f"FROM valid_trajectories ORDER BY trajectory_id{lim}"
        ).fetchall()
    else:
        rows = con.execute(
            "SELECT r.rollout_id, r.question_id, coalesce(q.question, ''), q.tools, r.messages "
            "FROM rollouts r LEFT JOIN (SELECT question_id, any_value(question) AS question, "
            "any_value(tools) AS tools FROM questions GROUP BY 1) q USING (question_id) "
            f"ORDER BY r.rollout_id{lim}"
        ).fetchall()
    out = []
    for tid, qid, question, tools, messages in rows:
        msgs = json.loads(messages) if isinstance(messages, str) else messages
        out.append((Case(tid, question or "", json.loads(tools) if tools else None, msgs), qid))
    return out


def judge_lake(
    lake: Lake,
    judge: Judge,
    target: str = "trajectories",
    limit: int | None = None,
    batch: int = 64,
    now: datetime | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> JudgeResult:
    """Judge the lake's ``target`` rows not yet judged by this judge; one part per batch."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, not {target!r}")
    kind = {"trajectories": "trajectory", "rollouts": "rollout"}[target]
    res = JudgeResult(target, judge.name, judge.revision)
    todo = _cases(lake, target, limit)
    res.candidates = len(todo)
    done = set()
    if lake.parts("judgements"):
        done = set(lake.read_table("judgements").column("judgement_id").to_pylist())
    todo = [(c, q) for c, q in todo if judgement_id(kind, c.target_id, judge.revision) not in done]
    res.cached = res.candidates - len(todo)
    scores = []
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        verdicts = judge.judge([c for c, _ in chunk])
        stamp = now or run_time()
        rows = []
        for (case, qid), v in zip(chunk, verdicts, strict=True):
            p = v.parsed
            res.status[p.status] += 1
            if p.status == "failed":
                res.reasons[(p.reason or "").split(";")[0]] += 1
            if p.score is not None:
                scores.append(p.score)
            rows.append(
                {
                    "judgement_id": judgement_id(kind, case.target_id, judge.revision),
                    "target": kind,
                    "target_id": case.target_id,
                    "question_id": qid,
                    "judge_model": judge.name,
                    "judge_revision": judge.revision,
                    "template_version": TEMPLATE_VERSION,
                    "think": p.think,
                    "critique": p.critique,
                    "score": p.score,
                    "parse_status": p.status,
                    "parse_reason": p.reason,
                    "raw": v.raw[:MAX_CHARS],
                    "judged_at": stamp,
                }
            )
        ids = "".join(r["judgement_id"] for r in rows)
        part = f"{kind}-{hashlib.sha256(ids.encode()).hexdigest()[:24]}"
        from schemas import TABLES

        lake.write_part("judgements", part, pa.Table.from_pylist(rows, schema=TABLES["judgements"]))
        res.judged += len(rows)
        if on_batch:
            on_batch(res.judged, len(todo))
    res.score_mean = sum(scores) / len(scores) if scores else None
    if not res.candidates:
        res.note = (
            f"nothing to judge: the lake has no {'valid trajectories' if kind == 'trajectory' else 'rollouts'}"
            + (
                " (run flow validate first)"
                if kind == "trajectory"
                else " (run flow label --model first)"
            )
        )
    elif not todo:
        res.note = f"nothing to judge: all {res.candidates} already judged by this judge revision"
    return res

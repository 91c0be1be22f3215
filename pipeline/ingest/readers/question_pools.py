"""RL question pools with verifiable answers: GSM8K (``question``/``answer`` with ``####``),
MATH-500 (``problem``/``answer``/``subject``/``level``), AIME (string answers), AMC (float
answers) and any ``{problem|question, answer}`` JSONL.

The dataset name is the file's folder (``questions/gsm8k/test.jsonl`` -> ``gsm8k``) and the split
its stem. Answers are normalized by ``pipeline.verify.ground_truth.normalize_answer``; the raw answer is kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader
from pipeline.ingest.records import QuestionRec, Rec
from pipeline.verify.ground_truth import normalize_answer

_META_KEYS = (
    "id",
    "subject",
    "level",
    "url",
    "math_test_idx",
    "contest",
    "problem_number",
    "unique_id",
)


class QuestionPoolReader(Reader):
    name = "question_pool"
    description = "Question pools {question|problem, answer} (GSM8K, MATH-500, AIME, AMC, ...)"

    def sniff(self, sample: Any, path: str) -> bool:
        if not isinstance(sample, dict) or "answer" not in sample:
            return False
        if not ("question" in sample or "problem" in sample):
            return False
        # Attempt files also carry question+answer; they have per-sample lists.
        return not any(k in sample for k in ("score", "code", "messages", "conversations"))

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        if not isinstance(value, dict):
            raise RecordError(Reason.NOT_AN_OBJECT, "record is not an object")
        q = value.get("problem") if isinstance(value.get("problem"), str) else value.get("question")
        if not isinstance(q, str):
            raise RecordError(Reason.MISSING_FIELD, "record has no question/problem text")
        if "answer" not in value or value["answer"] is None:
            raise RecordError(Reason.MISSING_FIELD, "record has no answer")
        raw = value["answer"]
        gt, kind = normalize_answer(raw)
        parts = ctx.parts
        dataset = parts[-2] if len(parts) >= 2 else "questions"
        split = parts[-1].split(".")[0] if parts else None
        yield QuestionRec(
            question=q,
            ground_truth=gt,
            ground_truth_raw=raw if isinstance(raw, str) else repr(raw),
            answer_type=kind,
            dataset=dataset,
            split=split,
            domain="math",
            metadata={k: value[k] for k in _META_KEYS if k in value},
        )

"""Multi-attempt files: several recorded solutions per question with their correctness, the raw
material for recorded pass rates.

* Qwen2.5-Math rollouts: ``response``/``pred``/``score``/``pred_score`` lists aligned per sample
  (group size 8); ``pred_score`` holds 1-element lists (reward-model scores), kept in metadata.
* GSM8K model solutions: one key per policy (``6b_finetuning`` …) holding
  ``{is_correct, solution}``; the final answer line is ``A: <n>``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader, has_keys
from pipeline.ingest.records import AttemptRec, Rec, require
from pipeline.verify.ground_truth import gsm8k_final, normalize_answer


def recorded_policy(value: dict, ctx: Context) -> str:
    """Who made the samples: the record's own ``model`` / ``policy`` field, else the file it came
    from (``file:<folder>/<name>``). A name never claims a model the file does not name."""
    for key in ("model", "policy", "model_name"):
        if isinstance(value.get(key), str) and value[key].strip():
            return value[key].strip()
    return "file:" + "/".join(ctx.parts[-2:])


class SampledRolloutsReader(Reader):
    name = "sampled_rollouts"
    description = (
        "Per-question sample lists with correctness (Qwen2.5-Math eval: response/pred/score)"
    )

    def sniff(self, sample: Any, path: str) -> bool:
        return has_keys(sample, "question", "response", "score") and isinstance(
            sample.get("score"), list
        )

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        question = require(value, "question", str)
        responses = require(value, "response", list)
        scores = require(value, "score", list)
        preds = value.get("pred") if isinstance(value.get("pred"), list) else []
        rm = value.get("pred_score") if isinstance(value.get("pred_score"), list) else []
        if len(scores) != len(responses):
            raise RecordError(
                Reason.WRONG_TYPE,
                f"score has {len(scores)} items but response has {len(responses)}",
            )
        gt, _ = normalize_answer(value.get("gt", value.get("answer")))
        policy = recorded_policy(value, ctx)
        for k, (resp, ok) in enumerate(zip(responses, scores, strict=True)):
            if not isinstance(ok, bool):
                raise RecordError(
                    Reason.WRONG_TYPE, f"score[{k}] is {type(ok).__name__}, expected bool"
                )
            rm_k = rm[k][0] if k < len(rm) and isinstance(rm[k], list) and rm[k] else None
            yield AttemptRec(
                question=question,
                ground_truth=gt,
                policy=policy,
                attempt_index=k,
                response=resp if isinstance(resp, str) else None,
                prediction=str(preds[k]) if k < len(preds) and preds[k] is not None else None,
                score=1.0 if ok else 0.0,
                is_correct=ok,
                domain="math",
                metadata={"idx": value.get("idx"), "level": value.get("level"), "rm_score": rm_k},
            )


class KeyedSolutionsReader(Reader):
    name = "keyed_solutions"
    description = (
        "One key per policy holding {is_correct, solution} (GSM8K example model solutions)"
    )

    def sniff(self, sample: Any, path: str) -> bool:
        return has_keys(sample, "question", "ground_truth") and any(
            isinstance(v, dict) and "is_correct" in v for v in sample.values()
        )

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        question = require(value, "question", str)
        raw_gt = require(value, "ground_truth", str)
        gt, _ = normalize_answer(gsm8k_final(raw_gt) or raw_gt)
        policies = sorted(k for k, v in value.items() if isinstance(v, dict) and "is_correct" in v)
        for k, policy in enumerate(policies):
            sol = value[policy]
            ok = sol.get("is_correct")
            if not isinstance(ok, bool):
                raise RecordError(Reason.WRONG_TYPE, f"{policy}.is_correct is not a bool")
            text = sol.get("solution") if isinstance(sol.get("solution"), str) else None
            pred = gsm8k_final(text) if text else None
            yield AttemptRec(
                question=question,
                ground_truth=gt,
                policy=policy,
                attempt_index=k,
                response=text,
                prediction=pred,
                score=1.0 if ok else 0.0,
                is_correct=ok,
                domain="math",
            )

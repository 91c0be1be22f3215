"""Reward entry points for the frameworks the exports feed, both backed by ``pipeline.verify``.

* verl: ``reward.custom_reward_function.path=pkg://pipeline.exports.rewards`` and
  ``reward.custom_reward_function.name=compute_score``; verl calls
  ``compute_score(data_source, solution_str, ground_truth, extra_info)`` per response.
* TRL: ``GRPOTrainer(reward_funcs=[trl_reward])`` on ``trl_grpo.parquet``; TRL passes the
  ``ground_truth`` and ``answer_type`` columns as keyword arguments.
"""

from __future__ import annotations

from pipeline.verify import verify


def compute_score(
    data_source: str | None,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    **kwargs,
) -> float:
    """1.0 when the response's final answer verifies against the ground truth, else 0.0. The
    answer type (integer, latex, letter, function_calls, ...) comes from ``extra_info``."""
    answer_type = (extra_info or {}).get("answer_type")
    return 1.0 if verify(solution_str, ground_truth, answer_type).correct else 0.0


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")


def trl_reward(
    completions: list, ground_truth: list[str], answer_type: list[str], **kwargs
) -> list[float]:
    """TRL reward function: one score per completion (text or assistant messages)."""
    return [
        compute_score(None, _text(c), gt, {"answer_type": at})
        for c, gt, at in zip(completions, ground_truth, answer_type, strict=True)
    ]

"""Reward entry points for the frameworks the exports feed, both backed by ``pipeline.verify``.

* verl: ``reward.custom_reward_function.path=pkg://pipeline.exports.rewards`` and
  ``reward.custom_reward_function.name=compute_score``; verl calls
  ``compute_score(data_source, solution_str, ground_truth, extra_info)`` per response.
* TRL: ``GRPOTrainer(reward_funcs=[trl_reward])`` on ``trl_grpo.parquet``; TRL passes the
  ``ground_truth`` and ``answer_type`` columns as keyword arguments. On function-calling rows,
  ``trl_function_call_reward`` (also reads ``tools`` and ``category``).
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


def trl_function_call_reward(
    completions: list,
    ground_truth: list[str],
    answer_type: list[str],
    tools: list[str | None],
    category: list[str | None],
    **kwargs,
) -> list[float]:
    """TRL reward function for function-calling rows: format +1, arguments +1, result +2 (BFCL's
    rules), the reward ``flow train`` uses on them; other rows score their verified outcome
    (1 or 0)."""
    from pipeline.evaluate.function_calls import question_reward, text_calls

    out = []
    for c, gt, at, t, cat in zip(
        completions, ground_truth, answer_type, tools, category, strict=True
    ):
        text = _text(c)
        if at == "function_calls" and t:
            output, parsed = text_calls(text)
            q = {"tools": t, "ground_truth": gt, "category": cat}
            out.append(question_reward(q, output, parsed))
        else:
            out.append(compute_score(None, text, gt, {"answer_type": at}))
    return out

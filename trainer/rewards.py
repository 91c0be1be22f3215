"""Composable rewards. Each takes an episode's text/length facts and returns a float; ``compose``
adds them with weights. The outcome reward dominates: the tool bonus is bounded below it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.verify import verify


def outcome(final_text: str, ground_truth: str | None, answer_type: str | None) -> float:
    """+1 if the verifier accepts the final answer, else -1."""
    return 1.0 if verify(final_text, ground_truth, answer_type).correct else -1.0


def overlong(length: int, l_max: int, l_cache: int) -> float:
    """DAPO overlong shaping: 0 up to L_max - L_cache, then linearly to -1 at L_max, -1 beyond."""
    l_exp = l_max - l_cache
    if length <= l_exp:
        return 0.0
    if length <= l_max:
        return (l_exp - length) / l_cache
    return -1.0


def tool_bonus(tool_calls: int, tool_errors: int, per_call: float = 0.1, cap: float = 0.2) -> float:
    """A small bonus for successful tool calls, capped well below the outcome's +/-1 range."""
    return min(cap, per_call * max(0, tool_calls - tool_errors))


def tool_bonus_paper(tool_calls: int, per_call: float = 0.1, cap_calls: int = 5) -> float:
    """The paper's tool bonus: 0.1 * min(tool_calls, 5), up to +0.5 (off by default)."""
    return per_call * min(max(0, tool_calls), cap_calls)


def format_reward(final_text: str) -> float:
    """+0.1 when the answer is in \\boxed{} (the format the verifier reads best)."""
    return 0.1 if "\\boxed{" in (final_text or "") else 0.0


@dataclass
class ExternalScorer:
    """A reward model or judge: ``fn(question, response) -> (score in [0, 1], critique)``, mixed
    with weight ``lam``: R = (1 - lam) * R_outcome + lam * (2 * score - 1)."""

    fn: Callable[[str, str], tuple[float, str]]
    lam: float = 0.2

    def mix(self, r_outcome: float, question: str, response: str) -> tuple[float, str]:
        score, critique = self.fn(question, response)
        score = min(1.0, max(0.0, score))
        return (1 - self.lam) * r_outcome + self.lam * (2 * score - 1), critique


def with_judge(rule: list[float], scores: list[float | None], lam: float) -> list[float]:
    """Reagent-R: R = R_rule + λ·score, the judge's score in [0, 1]. A judgement that did not
    parse (None) adds nothing to its episode's reward and is counted by the trainer as failed,
    never read as a score of 0."""
    return [r + (lam * s if s is not None else 0.0) for r, s in zip(rule, scores, strict=True)]

"""Which questions may enter the RL split: only those whose exported reward
(``pipeline.exports.rewards.compute_score``, by answer type) can verify an honest answer.

A ground truth that is an environment's outcome, such as tau-bench's list of expected actions
(``{"actions": [...], "outputs": [...]}``), is not an answer: the scored trials came from the
benchmark's own environment, which no exported reward reproduces, while echoing the hidden JSON
scores 1. Such rows are left out of RL and counted by reason (their trajectories can still be
SFT rows)."""

from __future__ import annotations

from collections import Counter

import orjson

ENVIRONMENT_OUTCOME = "unverifiable_environment_outcome"


def why_unverifiable(ground_truth: str | None, answer_type: str | None) -> str | None:
    """The reason no exported reward can verify an honest answer to this question, or None."""
    if answer_type == "function_calls" or not ground_truth:
        return None  # calls are checked call by call; no ground truth never reaches here
    text = ground_truth.strip()
    if not text.startswith(("{", "[")):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    objects = isinstance(value, dict) or (
        isinstance(value, list) and value and all(isinstance(v, dict) for v in value)
    )
    return ENVIRONMENT_OUTCOME if objects else None


def verifiable(items: list[dict]) -> tuple[list[dict], Counter]:
    """(the items an exported reward can verify, counts of the others by reason)."""
    kept, left = [], Counter()
    for it in items:
        why = why_unverifiable(it.get("ground_truth"), it.get("answer_type"))
        if why:
            left[why] += 1
        else:
            kept.append(it)
    return kept, left

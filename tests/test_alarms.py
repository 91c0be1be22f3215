"""Reward-hacking alarms on constructed metric histories, one per alarm, each with its quiet
counterpart (the same reward curve when accuracy rises with it)."""

from __future__ import annotations

import pytest

from pipeline.evaluate.alarms import alarms, best_checkpoint


def history(n: int = 20, **curves) -> list[dict]:
    """Per-step metrics; each curve goes linearly from its first to its last value."""
    rows = []
    for i in range(n):
        t = i / (n - 1)
        rows.append({"step": i + 1} | {k: a + (b - a) * t for k, (a, b) in curves.items()})
    return rows


def names(found) -> set[str]:
    return {a.name for a in found}


def test_reward_rising_while_held_out_accuracy_stays_flat():
    h = history(reward_mean=(-0.2, 0.6), accuracy=(0.3, 0.32))
    held = [(0, 0.41), (10, 0.40), (20, 0.40)]
    (a,) = alarms(h, held)
    assert a.name == "reward_without_accuracy" and "held-out accuracy 0.410 -> 0.400" in a.message
    assert alarms(h, [(0, 0.41), (20, 0.55)]) == []  # the held-out set rose with it
    # without a held-out set the training accuracy stands in
    assert names(alarms(h)) == {"reward_without_accuracy"}
    assert alarms(history(reward_mean=(-0.2, 0.6), accuracy=(0.3, 0.7))) == []


def test_tool_calls_rising_without_accuracy():
    h = history(reward_mean=(0.1, 0.12), accuracy=(0.5, 0.5), tool_calls=(1.0, 3.0))
    assert names(alarms(h)) == {"tool_calls_without_accuracy"}
    assert alarms(history(accuracy=(0.5, 0.7), tool_calls=(1.0, 3.0))) == []
    assert alarms(history(accuracy=(0.5, 0.5), tool_calls=(1.0, 1.2))) == []  # a small drift


def test_format_saturating_while_outcome_does_not():
    h = history(accuracy=(0.2, 0.21), format_rate=(0.6, 1.0))
    (a,) = alarms(h)
    assert a.name == "format_without_outcome" and "96%" in a.message  # the last 5 steps
    assert alarms(history(accuracy=(0.2, 0.5), format_rate=(0.6, 1.0))) == []
    assert alarms(history(accuracy=(0.2, 0.21), format_rate=(0.6, 0.8))) == []


def test_short_runs_ring_nothing_and_the_best_checkpoint_is_by_held_out_accuracy():
    assert alarms(history(n=6, reward_mean=(-1, 1), accuracy=(0.3, 0.3))) == []
    ckpts = [("step-10", 0.42), ("step-20", 0.51), ("step-30", 0.47)]
    assert best_checkpoint(ckpts) == "step-20"  # not the last, not the highest reward
    assert best_checkpoint([("a", 0.5), ("b", 0.5)]) == "b"
    with pytest.raises(ValueError):
        best_checkpoint([])

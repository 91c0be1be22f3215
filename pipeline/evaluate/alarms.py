"""Reward-hacking alarms over a training run's metric history (``metrics.jsonl`` rows) and its
held-out evaluations.

Reward hacking shows up before anything else as the reward climbing while what the reward is
meant to stand for does not:

* ``reward_without_accuracy``: the training reward rises while held-out accuracy (or, without a
  held-out set, the training accuracy) stays flat or falls;
* ``tool_calls_without_accuracy``: tool calls per episode rise while accuracy does not (a tool
  bonus being farmed, or loops of calls);
* ``format_without_outcome``: the format term saturates (nearly every answer well-formed)
  while accuracy stays low and flat (the policy learned the wrapper, not the task).

Each compares the mean of the first and the last ``window`` steps, so one noisy step does not
ring it. ``best_checkpoint`` picks a checkpoint by held-out accuracy, never by reward.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AlarmConfig:
    window: int = 5
    """Steps averaged at each end of the run."""
    reward_rise: float = 0.1
    """The reward went up by at least this..."""
    accuracy_flat: float = 0.02
    """...while accuracy went up by no more than this."""
    tool_rise: float = 0.5
    """Tool calls per episode up by this fraction (and +0.5 calls)."""
    format_saturated: float = 0.95
    """Share of well-formed answers."""
    accuracy_low: float = 0.8
    """Accuracy below this while the format saturates."""


@dataclass(frozen=True)
class Alarm:
    name: str
    message: str
    evidence: dict


def _ends(history: list[dict], key: str, window: int) -> tuple[float, float] | None:
    values = [h[key] for h in history if isinstance(h.get(key), (int, float))]
    if len(values) < 2 * window:
        return None
    return sum(values[:window]) / window, sum(values[-window:]) / window


def alarms(
    history: list[dict],
    held_out: list[tuple[int, float]] | None = None,
    config: AlarmConfig | None = None,
) -> list[Alarm]:
    """``history``: per-step metrics (reward_mean, accuracy, tool_calls, format_rate);
    ``held_out``: (step, held-out accuracy) pairs, first and last compared."""
    c = config or AlarmConfig()
    out = []
    reward = _ends(history, "reward_mean", c.window)
    acc = _ends(history, "accuracy", c.window)
    if held_out and len(held_out) >= 2:
        held = (held_out[0][1], held_out[-1][1])
        measure = "held-out accuracy"
    else:
        held, measure = acc, "training accuracy"
    if (
        reward
        and held
        and reward[1] - reward[0] >= c.reward_rise
        and held[1] - held[0] <= c.accuracy_flat
    ):
        out.append(
            Alarm(
                "reward_without_accuracy",
                f"reward {reward[0]:.3f} -> {reward[1]:.3f} while {measure} "
                f"{held[0]:.3f} -> {held[1]:.3f}",
                {"reward": reward, measure: held},
            )
        )
    calls = _ends(history, "tool_calls", c.window)
    if (
        calls
        and acc
        and calls[1] >= calls[0] * (1 + c.tool_rise)
        and calls[1] - calls[0] >= 0.5
        and acc[1] - acc[0] <= c.accuracy_flat
    ):
        out.append(
            Alarm(
                "tool_calls_without_accuracy",
                f"tool calls per episode {calls[0]:.2f} -> {calls[1]:.2f} while training "
                f"accuracy {acc[0]:.3f} -> {acc[1]:.3f}",
                {"tool_calls": calls, "accuracy": acc},
            )
        )
    fmt = _ends(history, "format_rate", c.window)
    if (
        fmt
        and acc
        and fmt[1] >= c.format_saturated
        and acc[1] < c.accuracy_low
        and acc[1] - acc[0] <= c.accuracy_flat
    ):
        out.append(
            Alarm(
                "format_without_outcome",
                f"well-formed answers {fmt[1]:.0%} while training accuracy "
                f"{acc[0]:.3f} -> {acc[1]:.3f}",
                {"format_rate": fmt, "accuracy": acc},
            )
        )
    return out


def best_checkpoint(evaluated: list[tuple[str, float]]) -> str:
    """The checkpoint with the highest held-out accuracy (the later one on a tie)."""
    if not evaluated:
        raise ValueError("no evaluated checkpoint to choose from")
    return max(enumerate(evaluated), key=lambda x: (x[1][1], x[0]))[1][0]

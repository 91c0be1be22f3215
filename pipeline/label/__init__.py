"""The label stage: pass rates from recorded attempts or K live rollouts of a policy."""

from pipeline.label.config import LabelConfig
from pipeline.label.errors import LabelError
from pipeline.label.stage import (
    judge_signal,
    label,
    model_revision,
    pass_rate_histogram,
    planned,
    recorded_labels,
    rollout_labels,
    shards,
)

__all__ = [
    "LabelConfig",
    "LabelError",
    "judge_signal",
    "label",
    "model_revision",
    "pass_rate_histogram",
    "planned",
    "recorded_labels",
    "rollout_labels",
    "shards",
]

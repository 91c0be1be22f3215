"""The label stage: pass rates from recorded attempts or K live rollouts of a policy."""

from pipeline.label.config import LabelConfig
from pipeline.label.errors import LabelError

__all__ = [
    "Checkpointed",
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


_STAGE = {
    "Checkpointed",
    "judge_signal",
    "label",
    "model_revision",
    "pass_rate_histogram",
    "planned",
    "recorded_labels",
    "rollout_labels",
    "shards",
}


def __getattr__(attr: str):
    """The stage loads on first use: importing the config (the command line does, for its
    options) does not load the stage's libraries."""
    if attr in _STAGE:
        import importlib

        return getattr(importlib.import_module("pipeline.label.stage"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

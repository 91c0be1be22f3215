"""The evaluate stage: a policy on held-out questions through the agent loop it trains in;
estimators with intervals (``estimators``), the run (``stage``), results in the lake's
``evals`` table."""

from pipeline.evaluate.estimators import bootstrap_ci, pass_at_k

__all__ = ["bootstrap_ci", "evaluate", "pass_at_k", "record", "recorded"]


_STAGE = {"evaluate", "record", "recorded"}


def __getattr__(attr: str):
    """The stage loads on first use: importing the config (the command line does, for its
    options) does not load the stage's libraries."""
    if attr in _STAGE:
        import importlib

        return getattr(importlib.import_module("pipeline.evaluate.stage"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

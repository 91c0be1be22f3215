"""The evaluate stage: a policy on held-out questions through the agent loop it trains in;
estimators with intervals (``estimators``), the run (``stage``), results in the lake's
``evals`` table."""

from pipeline.evaluate.estimators import bootstrap_ci, pass_at_k
from pipeline.evaluate.stage import evaluate, record, recorded

__all__ = ["bootstrap_ci", "evaluate", "pass_at_k", "record", "recorded"]

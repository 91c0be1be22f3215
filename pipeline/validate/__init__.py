"""Validate: Great Expectations suites over the lake tables, failing rows quarantined by rule."""

from pipeline.validate.config import ValidateConfig
from pipeline.validate.errors import ValidateError

__all__ = ["ValidateConfig", "ValidateError", "ValidateResult", "summary_markdown", "validate"]


_STAGE = {"ValidateResult", "summary_markdown", "validate"}


def __getattr__(attr: str):
    """The stage loads on first use: importing the config (the command line does, for its
    options) does not load the stage's libraries."""
    if attr in _STAGE:
        import importlib

        return getattr(importlib.import_module("pipeline.validate.stage"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

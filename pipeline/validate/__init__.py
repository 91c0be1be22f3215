"""Validate: Great Expectations suites over the lake tables, failing rows quarantined by rule."""

from pipeline.validate.config import ValidateConfig
from pipeline.validate.errors import ValidateError
from pipeline.validate.stage import ValidateResult, summary_markdown, validate

__all__ = ["ValidateConfig", "ValidateError", "ValidateResult", "summary_markdown", "validate"]

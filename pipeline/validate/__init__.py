"""Validate: Great Expectations suites over the lake tables, failing rows quarantined by rule."""

from pipeline.validate.stage import ValidateConfig, ValidateResult, summary_markdown, validate

__all__ = ["ValidateConfig", "ValidateResult", "summary_markdown", "validate"]

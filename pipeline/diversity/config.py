"""Options of the diversity measure: which features count, and how many bits are enough."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.diversity.errors import DiversityError

# Every feature the store holds per question (schemas.QUESTION_FEATURES), in report order.
DIMENSIONS = (
    "domain",
    "source",
    "tool_pattern",
    "behaviour",
    "tool_calls",
    "error_recovery",
    "verification",
    "length",
)


@dataclass(frozen=True)
class DiversityConfig:
    """``target_bits`` applies to the joint entropy of ``dimensions`` (the paper's advice: above
    2.5 when training does not converge); a dimension is *short* when the selection holds less
    than ``min_dimension_bits`` of it."""

    dimensions: tuple[str, ...] = DIMENSIONS
    """The feature dimensions whose joint entropy is measured and maximised (default: all of
    question_features).
    """
    target_bits: float = 2.5
    """Joint entropy (bits) of the dimensions below which the build warns."""
    min_dimension_bits: float = 1.0
    """A dimension is short when the selection holds less than this many bits of it."""

    def __post_init__(self) -> None:
        unknown = [d for d in self.dimensions if d not in DIMENSIONS]
        if unknown or not self.dimensions:
            raise DiversityError(
                f"unknown diversity dimension(s) {unknown or '(none given)'}; "
                f"the feature store has: {', '.join(DIMENSIONS)}"
            )
        if self.target_bits < 0 or self.min_dimension_bits < 0:
            raise DiversityError("target_bits and min_dimension_bits are bit counts (>= 0)")

"""What the diversity stage refuses, said plainly."""

from __future__ import annotations


class DiversityError(ValueError):
    """A dimension the feature store does not have, or a target that cannot be a bit count."""

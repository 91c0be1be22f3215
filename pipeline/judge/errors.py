"""What the judge refuses, said plainly."""

from __future__ import annotations


class JudgeError(RuntimeError):
    """A judge that cannot run: a missing model folder, an endpoint that does not answer."""

"""What the dedup stage refuses."""


class DedupError(ValueError):
    """Dedup options that cannot work (the message names the option and what it accepts)."""

"""What the validate stage refuses."""


class ValidateError(ValueError):
    """Validate options that cannot work (the message names the option and what it accepts)."""

"""What the evaluate stage refuses."""


class EvalError(ValueError):
    """An evaluation that cannot be run as asked (the message says what to change)."""

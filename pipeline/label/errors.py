"""What the label stage refuses."""


class LabelError(ValueError):
    """A label request that cannot be carried out as asked (the message says what to change)."""

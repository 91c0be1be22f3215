"""What the build stage refuses."""


class BuildError(ValueError):
    """A build request that cannot be carried out as asked (the message says what to change)."""

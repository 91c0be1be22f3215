"""Why the sandbox refuses to run model code."""


class SandboxUnavailable(RuntimeError):
    """Kernel isolation cannot be set up on this machine. Model code is never run without it:
    the caller gets this error, not a weaker sandbox."""

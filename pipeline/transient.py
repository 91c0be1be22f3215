"""Which failures are worth a retry: storage hiccups, timeouts, an engine or sandbox pool that
failed to start. A bad config, a missing file or a bug fails at once, with its reason."""

from __future__ import annotations


class TransientError(RuntimeError):
    """A failure that may pass on retry (engine start, sandbox pool start)."""


PERMANENT_OS_ERRORS = (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)


def is_transient(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    if isinstance(exc, TransientError | TimeoutError | ConnectionError):
        return True
    return isinstance(exc, OSError) and not isinstance(exc, PERMANENT_OS_ERRORS)

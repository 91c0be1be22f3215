"""What the recorder refuses to do, said plainly."""

from __future__ import annotations


class RecorderError(RuntimeError):
    """A recorder setup problem the user fixes (a remote lake without a local log, a second proxy
    on the same log)."""


class RecorderConfigError(RecorderError, ValueError):
    """An option of the recorder that cannot work as given (the message names it)."""


class InstanceBusy(RecorderError):
    """Another live process writes this instance's log; two writers would interleave segments."""

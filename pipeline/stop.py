"""A stop request (SIGTERM) that long stages honour at their next safe point.

The CLI sets it from its signal handler; ingest checks it between records and files, labelling
between batches. What was committed stays committed, what was being written is discarded (parts
appear atomically), and a rerun continues from there.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_requested = threading.Event()


class Stopped(Exception):  # noqa: N818 - a request honoured, not an error
    """Raised at a safe point after a stop was requested."""


def request() -> None:
    _requested.set()


def clear() -> None:
    _requested.clear()


def requested() -> bool:
    return _requested.is_set()


def check(where: str) -> None:
    if _requested.is_set():
        raise Stopped(f"stopped on request at a safe point ({where}); rerun to continue")


@contextlib.contextmanager
def on_sigterm() -> Iterator[None]:
    """While inside: a SIGTERM also requests the stop, then runs the handler that was there
    (Prefect's, inside a flow run, which raises in the main thread only: the worker threads
    learn of it here). Outside the main thread this does nothing."""
    try:
        previous = signal.getsignal(signal.SIGTERM)
    except ValueError:
        yield
        return

    def handler(signum, frame):
        request()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)

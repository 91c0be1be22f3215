"""A stop request (SIGTERM) that long stages honour at their next safe point.

The CLI sets it from its signal handler; ingest checks it between records and files, labelling
between batches. What was committed stays committed, what was being written is discarded (parts
appear atomically), and a rerun continues from there.
"""

from __future__ import annotations

import threading

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

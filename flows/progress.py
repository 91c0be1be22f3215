"""A process-local progress hook: the CLI installs a callback, flows report through it.

Flow parameters must be serializable, so a progress bar cannot be passed in as one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_hook: Callable[[str, Any], None] | None = None


def set_hook(fn: Callable[[str, Any], None] | None) -> None:
    global _hook
    _hook = fn


def report(event: str, payload: Any = None) -> None:
    if _hook is not None:
        _hook(event, payload)

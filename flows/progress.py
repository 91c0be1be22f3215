"""A process-local progress hook: the CLI installs a callback, flows report through it.

Flow parameters must be serializable, so a progress bar cannot be passed in as one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_hook: Callable[[str, Any], None] | None = None


def set_hook(fn: Callable[[str, Any], None] | None) -> None:
    global _hook
    _hook = fn


def get_hook() -> Callable[[str, Any], None] | None:
    return _hook


def report(event: str, payload: Any = None) -> None:
    if _hook is not None:
        _hook(event, payload)


def writer_lock(lake: Any, timeout: float | None = None) -> Any:
    """The lake's writer lock, announcing a wait (to the CLI hook and the flow run's log)."""

    def on_wait(holder: str) -> None:
        msg = f"waiting for the lake lock on {lake.root}: held by {holder}"
        report("wait", msg)
        try:
            from prefect import get_run_logger

            get_run_logger().warning(msg)
        except Exception:  # noqa: BLE001 - outside a run there is no run logger
            pass

    return lake.lock(timeout=timeout, on_wait=on_wait)


def locked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a flow function holding the writer lock of its ``lake`` parameter (reentrant, so the
    pipeline flow and its stage subflows share one hold); a SIGTERM meanwhile also asks its
    worker threads to stop at their next safe point."""
    import functools
    import inspect

    from pipeline import stop
    from pipeline.lake import Lake

    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        with writer_lock(Lake(bound.arguments.get("lake"))), stop.on_sigterm():
            return fn(*args, **kwargs)

    # the signature with its annotations resolved in fn's own module: Prefect validates the
    # parameters in the wrapper's module, which does not import fn's types (MissionConfig, ...)
    wrapper.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    return wrapper


def log_upstream(lake: Any, stage: str) -> None:
    """Log in the flow run what ``stage`` misses from the stages before it (pipeline.upstream)."""
    from pipeline.upstream import problems

    errors, warnings = problems(lake, stage)
    if not errors and not warnings:
        return
    try:
        from prefect import get_run_logger

        log = get_run_logger()
    except Exception:  # noqa: BLE001 - outside a run there is no run logger
        return
    for msg in errors + warnings:
        log.warning(f"{stage}: {msg}")

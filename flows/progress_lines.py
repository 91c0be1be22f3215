"""Progress where no bar can be drawn: with stdout not a terminal (CI, ``nohup``, a scheduled
deployment's log) a long stage prints one plain line every ``FLOW_PROGRESS_SECONDS`` (30 by
default), so a 20-minute SFT is not 20 minutes of silence:

    sft step 1200/3000 (40%): 6.1 steps/s, about 4 min 55 s left; loss 0.412

On a terminal it prints nothing (the CLI's own spinner or bar shows the same)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def _measure(event: str, payload: Any) -> tuple[str, int, int | None, str] | None:
    """(what, done, total, detail) of one progress event, or None if it has no count."""
    if not isinstance(payload, dict):
        return None
    if event in ("sft", "train") and "step" in payload:
        key = "loss" if event == "sft" else "accuracy"
        value = payload.get(key)
        detail = f"{key} {value:.3f}" if isinstance(value, int | float) else ""
        return f"{event} step", int(payload["step"]), payload.get("steps"), detail
    if event == "label" and "done" in payload:
        return "label", int(payload["done"]), payload.get("total"), "episodes"
    if event == "eval" and "done" in payload:
        return "eval", int(payload["done"]), payload.get("total"), "episodes"
    return None


class ProgressLines:
    """Turns the flows' progress events into periodic plain lines for a log."""

    def __init__(
        self,
        write: Callable[[str], None],
        enabled: bool,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.write, self.enabled, self.clock = write, enabled, clock
        self.every = (
            float(os.environ.get("FLOW_PROGRESS_SECONDS", "30")) if every is None else every
        )
        self._what: str | None = None
        self._stage: object = None
        self._start = self._last = 0.0
        self._first_done = 0

    def __call__(self, event: str, payload: Any) -> None:
        if not self.enabled:
            return
        if event == "stage":
            if payload != self._stage:  # the pipeline and the stage's own flow both say it
                self.write(f"{payload}: started")
            self._stage, self._what = payload, None
            return
        m = _measure(event, payload)
        if m is None:
            return
        what, done, total, detail = m
        now = self.clock()
        if what != self._what:  # a new count: its rate starts here
            self._what, self._start, self._last, self._first_done = what, now, now, done
            return
        finished = total is not None and done >= total
        if now - self._last < self.every and not finished:
            return
        self._last = now
        rate = (done - self._first_done) / max(now - self._start, 1e-9)
        line = f"{what} {done}" + (f"/{total} ({100 * done // max(total, 1)}%)" if total else "")
        unit = "steps" if "step" in what else detail
        line += f": {rate:.2f} {unit}/s"
        if total and rate > 0 and not finished:
            line += f", about {_duration((total - done) / rate)} left"
        self.write(line + (f"; {detail}" if detail and unit == "steps" else ""))

"""The ``flow`` command line: one module per group of commands, in pipeline order. Every
command takes ``--lake ROOT`` (or ``FLOW_LAKE``)."""

from __future__ import annotations

import os
import signal
import sys

# Prefect reads this at import (its other defaults are in flows/__init__): quiet logs under a
# progress bar.
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
# vLLM must not reconfigure logging under Prefect's handlers (a deadlock: rollout/engines.py)
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
# torch's C++ warnings (NUMA binding at every vLLM CPU engine start) say nothing a user acts on;
# read once when torch loads, so set before anything imports it
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
# transformers' own bars ("Loading weights", "Writing model shards", GGUF conversion) follow this
# switch: a second each, printed into every stage's log; the commands report their own progress
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# the bars that ignore that switch (transformers' GGUF conversion calls tqdm itself) write one line
# per redraw into a log; where stderr is not a terminal (CI, nohup, a deployment) tqdm is off and
# the commands' own progress lines say the same (flows/progress_lines.py)
if not sys.stderr.isatty():
    os.environ.setdefault("TQDM_DISABLE", "1")

# the command modules register their commands on ``app`` in this order (``flow --help``)
# isort: off
from flows.cli import data, record, label, train, model, query, mission  # noqa: E402, F401

# isort: on
from flows.cli.common import app, err  # noqa: E402
from flows.cli.examples import add_examples  # noqa: E402
from pipeline import stop  # noqa: E402
from pipeline.terminal import esc  # noqa: E402

__all__ = ["app", "main"]

add_examples(app)  # `flow COMMAND -h` ends with copy-paste examples


def _on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM: stop at the next safe point (between records, files, batches); SIGKILL is the
    way to stop at once. (Prefect re-delivers the signal to this handler after its own.)"""
    stop.request()


def main() -> None:
    """The console script: the CLI, with a clear message when Prefect's local server cannot start."""
    from flows.progress import set_hook

    set_hook(
        lambda event, payload: (
            err.print(f"[yellow]{esc(payload)}[/yellow]") if event == "wait" else None
        )
    )
    signal.signal(signal.SIGTERM, _on_sigterm)
    import logging

    # vLLM's start-up warnings (no tcmalloc, thread binding, ...) say nothing a user acts on
    logging.getLogger("vllm").setLevel(os.environ.get("FLOW_VLLM_LOG_LEVEL", "ERROR"))
    try:
        app()
    except BaseException as e:
        if isinstance(e, SystemExit) and e.code in (0, None):
            raise  # the command finished (a server that drained on SIGTERM says so itself)
        if isinstance(e, KeyboardInterrupt) or (isinstance(e, SystemExit) and e.code == 130):
            # (typer turns Ctrl-C into exit 130, silently)
            err.print(
                "[yellow]interrupted[/yellow] (Ctrl-C): what was committed stays (lake parts, "
                "a training run's last checkpoint), what was being written was discarded; rerun "
                "the same command to continue"
            )
            raise SystemExit(130) from None
        if stop.requested():  # whatever the stop looked like on its way out (Prefect's own
            # TerminationSignal, Stopped, a failed flow): one clear message and 128 + SIGTERM
            err.print(
                "[yellow]stopped[/yellow] on SIGTERM at a safe point: what was committed stays, "
                "what was being written was discarded; rerun to continue"
            )
            raise SystemExit(143) from None
        if not isinstance(e, RuntimeError) or "ephemeral Prefect API server" not in str(e):
            raise
        home = os.environ.get("PREFECT_HOME", "~/.prefect")
        err.print(
            f"[red]error:[/red] Prefect's local server did not start ({esc(e)}).\n"
            f"Its database lives in {esc(home)}; one written by another Prefect version cannot be migrated back. "
            "Point PREFECT_HOME at a fresh folder (e.g. export PREFECT_HOME=$PWD/.prefect) or move the old one away."
        )
        raise SystemExit(1) from None

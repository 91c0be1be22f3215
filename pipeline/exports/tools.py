"""The python tool as a plain function, for trainers that take tools as callables (TRL's
``GRPOTrainer(tools=[python])``) and for ``verl_tools.py``. Code runs in the project's
bubblewrap sandbox (no network, no host files, time and memory limits), one warm pool of
interpreters per process; never in the trainer's process.
"""

from __future__ import annotations

import atexit
import threading

from pipeline.sandbox import Sandbox, SandboxConfig

_lock = threading.Lock()
_sandbox: Sandbox | None = None


def _box() -> Sandbox:
    global _sandbox
    with _lock:
        if _sandbox is None:
            _sandbox = Sandbox(SandboxConfig(wall_seconds=10, cpu_seconds=5), workers=2)
            atexit.register(close)
        return _sandbox


def python(code: str) -> str:
    """Run Python code in a sandbox; returns what it prints.

    Args:
        code: The Python program to run.
    """
    return _box().run(code).as_tool_output()


def close() -> None:
    """Stop the sandbox workers (they also stop when the process exits)."""
    global _sandbox
    with _lock:
        if _sandbox is not None:
            _sandbox.close()
            _sandbox = None

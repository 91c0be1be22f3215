"""Prefect's temporary local server dies with the process that started it.

Without ``PREFECT_API_URL``, Prefect 3 starts a uvicorn server as a child process and stops it
from an ``atexit`` hook, which never runs on ``kill -9`` (nor on a SIGTERM that Python does not
handle): every such kill orphaned a ~330 MB server. Here the server's command line gains a small
bootstrap that polls for its parent and exits when the parent is gone. Polling the parent pid,
not ``PR_SET_PDEATHSIG``: the death signal follows the *thread* that started the child, and
Prefect may start its server from any thread.

A server shared on purpose (``prefect server start``, ``PREFECT_API_URL``) is not touched.
"""

from __future__ import annotations

import os
import subprocess
import sys

WATCHDOG = """
import os, runpy, sys, threading, time
parent = int(sys.argv.pop(1))
def watch():
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)  # the process that started this server is gone: so is the server
threading.Thread(target=watch, daemon=True, name="parent-watch").start()
sys.argv[0] = "uvicorn"
runpy.run_module("uvicorn", run_name="__main__", alter_sys=True)
"""


class _Subprocess:
    """What ``prefect.server.api.server`` sees as ``subprocess``: the real module, except that
    its uvicorn command runs under the watchdog. Local to that module, so thread-safe."""

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args, **kwargs):  # noqa: N802 - the name Prefect calls
        if list(args[:3]) == [sys.executable, "-m", "uvicorn"]:
            args = [sys.executable, "-c", WATCHDOG, str(os.getpid()), *args[3:]]
        return subprocess.Popen(args, **kwargs)


def install() -> None:
    """Start Prefect's temporary server under the watchdog (idempotent)."""
    from prefect.server.api import server

    if not isinstance(server.subprocess, _Subprocess):
        server.subprocess = _Subprocess()

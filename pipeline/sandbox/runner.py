"""Run model-written Python: warm isolated interpreters, one program at a time each.

``Sandbox`` keeps ``workers`` warm interpreters, each in its own bubblewrap namespaces
(isolation.py), each forking a fresh child per program (zygote.py). ``run`` is thread-safe and
blocks while every worker is busy (back-pressure). Anything a program does to its own worker
(killing it, stopping it) costs only that call: the worker is replaced before its next use.
``run_python`` is the one-shot form: a fresh isolated interpreter for a single program.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline.sandbox import zygote
from pipeline.sandbox.config import SandboxConfig, SandboxResult
from pipeline.sandbox.errors import SandboxUnavailable
from pipeline.sandbox.isolation import INSTALL_HINT, launch

ZYGOTE_SOURCE = Path(zygote.__file__).read_text(encoding="utf-8")
GRACE_SECONDS = 3.0  # past the wall limit, the host stops waiting for a worker and kills it
_SIGNAL_REASONS = {
    signal.SIGXCPU: "cpu_limit",
    signal.SIGXFSZ: "file_size_limit",
    signal.SIGKILL: "killed",
}

# bubblewrap's --die-with-parent fires when the *thread* that started it ends, so every worker
# is started from one long-lived thread per process, never from a caller's short-lived thread
_spawner: tuple[int, ThreadPoolExecutor] | None = None
_spawner_lock = threading.Lock()


def _spawn(argv: list[str], host_uid: int | None) -> subprocess.Popen:
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner[0] != os.getpid():  # a forked child needs its own
            _spawner = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="sandbox-spawn"))
        pool = _spawner[1]
    drop = {} if host_uid is None else {"user": host_uid, "group": host_uid, "extra_groups": []}
    return pool.submit(
        subprocess.Popen,
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
        **drop,
    ).result()


def _limits(config: SandboxConfig) -> dict:
    keys = ("wall_seconds", "cpu_seconds", "memory_mb", "file_mb", "max_processes")
    limits = {k: getattr(config, k) for k in keys}
    limits["max_processes"] += 1  # the warm interpreter (PID 1) shares the program's uid
    limits.update(
        max_open_files=config.max_open_files,
        max_output_chars=config.max_output_chars,
        max_output_mb=config.max_output_mb,
    )
    return limits


def _cap(text: str, n: int) -> tuple[str, bool]:
    return (text[:n], True) if len(text) > n else (text, False)


def _result(res: dict, config: SandboxConfig, call_id: str, seconds: float) -> SandboxResult:
    code, reason = res["exit_code"], res["reason"]
    stdout, t1 = _cap(res["stdout"], config.max_output_chars)
    stderr, t2 = _cap(res["stderr"], config.max_output_chars)
    if reason is None and code < 0:
        sig = -code
        reason = _SIGNAL_REASONS.get(sig) or f"signal_{signal.Signals(sig).name}"
    elif reason is None and code != 0:
        reason = "memory_limit" if "MemoryError" in stderr else "error"
    truncated = bool(res["truncated"] or t1 or t2)
    return SandboxResult(reason is None, stdout, stderr, code, reason, seconds, truncated, call_id)


class _Worker:
    """One warm interpreter inside its own namespaces."""

    def __init__(self, config: SandboxConfig):
        self.config = config
        spec = launch(config, ZYGOTE_SOURCE)
        try:
            self.proc = _spawn(spec.argv, spec.host_uid)
        except OSError as e:
            raise SandboxUnavailable(f"cannot start bubblewrap: {e}: {INSTALL_HINT}") from e
        try:
            ready = zygote.read_frame(
                self.proc.stdout.fileno(), time.monotonic() + config.start_seconds
            )
        except (TimeoutError, ValueError):
            ready = None
        if not ready or not ready.get("ready"):
            self.kill()
            err = self.proc.stderr.read(4000).decode("utf-8", "replace").strip()
            raise SandboxUnavailable(
                f"bubblewrap could not start the sandbox ({err or 'no message'}): {INSTALL_HINT}"
            )
        if ready.get("seccomp_error") or ready.get("pid") != 1:
            self.kill()
            why = ready.get("seccomp_error") or f"the interpreter is PID {ready.get('pid')}, not 1"
            raise SandboxUnavailable(
                f"the sandbox cannot hold programs to their limits ({why}); it needs a kernel "
                f"with seccomp filters and bubblewrap >= 0.3 (--as-pid-1): {INSTALL_HINT}"
            )
        self.preload_failures: dict[str, str] = ready["failed"]

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, code: str) -> SandboxResult:
        call_id = uuid.uuid4().hex
        t0 = time.perf_counter()
        req = {"id": call_id, "code": code, "limits": _limits(self.config)}
        try:
            zygote.write_frame(self.proc.stdin.fileno(), req)
            deadline = time.monotonic() + self.config.wall_seconds + GRACE_SECONDS
            res = zygote.read_frame(self.proc.stdout.fileno(), deadline)
            reason = None if res is not None and res.get("id") == call_id else "sandbox_lost"
        except TimeoutError:  # the worker stopped answering (a stopped or wedged interpreter)
            res, reason = None, "timeout"
        except (OSError, ValueError):  # a broken pipe or a garbled frame: the worker is gone
            res, reason = None, "sandbox_lost"
        seconds = time.perf_counter() - t0
        if reason is not None:
            self.kill()
            return SandboxResult(False, "", "", None, reason, seconds, False, call_id)
        if "retire" in res:  # its cleanup failed: it exits, and is replaced before the next call
            self.kill()
        return _result(res, self.config, call_id, seconds)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # the interpreter's read ends: it exits, bubblewrap with it
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        self.kill()
        for f in (self.proc.stdout, self.proc.stderr):
            f.close()


class Sandbox:
    """``workers`` warm isolated interpreters; ``run`` is thread-safe and blocks while all are
    busy. Raises ``SandboxUnavailable`` when the isolation cannot be set up."""

    def __init__(self, config: SandboxConfig | None = None, workers: int = 2):
        if workers < 1:
            raise ValueError(f"a sandbox needs at least one worker, got {workers}")
        self.config = config or SandboxConfig()
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        self._closed = False
        self._lock = threading.Lock()
        self._all: list[_Worker] = []
        self.calls = 0  # programs run, for the caller's metrics
        try:
            for _ in range(workers):
                self._idle.put(self._start())
        except BaseException:
            self.close()
            raise

    def _start(self) -> _Worker:
        w = _Worker(self.config)
        with self._lock:
            self._all.append(w)
        return w

    def run(self, code: str) -> SandboxResult:
        if self._closed:
            raise RuntimeError("the sandbox is closed")
        w = self._idle.get()
        self.calls += 1
        try:
            if w is None or not w.alive:  # lost by an earlier program: start a fresh one
                with self._lock:
                    if w in self._all:
                        self._all.remove(w)
                w = None
                w = self._start()
            return w.run(code)
        finally:
            self._idle.put(w)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            workers, self._all = self._all, []
        for w in workers:
            w.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_python(code: str, config: SandboxConfig | None = None) -> SandboxResult:
    """Run one program in a fresh isolated interpreter (a warm ``Sandbox`` is far faster for
    many calls)."""
    with Sandbox(config, workers=1) as box:
        return box.run(code)

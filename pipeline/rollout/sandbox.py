"""A sandbox for model-written Python: one fresh process per call, contained by the kernel where
possible and by a Python audit hook everywhere.

Layers (each documented in docs/sandbox.md):

* **process**: a new session and process group (``start_new_session``), killed as a group on
  timeout; a private temporary directory as cwd and HOME; a minimal environment (no secrets);
  ``python -I`` (isolated: no user site, no PYTHON* variables);
* **resource limits** (``setrlimit`` before exec): CPU seconds, address space, file size, open
  files, processes, no core dumps;
* **identity** (when started as root): the child runs as a dedicated unprivileged uid
  (65000 + slot), so it cannot signal or read the parent's files, and the number-of-processes
  limit applies; after each call every process left with that uid is killed;
* **network**: a new, empty network namespace (``unshare(CLONE_NEWNET)``) when permitted;
* **audit hook** (installed before user code, cannot be removed from Python): refuses sockets,
  ``ctypes``/``cffi`` loading, writes outside the sandbox directory, signals to other processes,
  and reads of the parent's home directory.

Every hostile outcome comes back as a ``SandboxResult`` with ``ok=False`` and a reason; the
caller never sees an exception from the sandboxed code.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

CLONE_NEWNET = 0x40000000
_UID_BASE = 65000
_slot_lock = threading.Lock()
_slot = 0

PRELUDE = r"""
import os, sys
_ROOT = os.path.realpath(os.getcwd())
_DENY_READ = [p for p in sys.argv[2].split(os.pathsep) if p]
sys.path.extend(p for p in sys.argv[3].split(os.pathsep) if p)
_BLOCK_FORK = sys.argv[4] == "1"
_PID = os.getpid()

def _inside(path):
    try:
        p = os.path.realpath(os.fsdecode(path))
    except Exception:
        return False
    return p == _ROOT or p.startswith(_ROOT + os.sep) or p.startswith("/dev/null")

def _from_user_code():
    # the first frame outside ctypes/cffi: is it the model's code (main.py)?
    f = sys._getframe(2)
    while f is not None and ("/ctypes/" in f.f_code.co_filename or "/cffi/" in f.f_code.co_filename):
        f = f.f_back
    return f is not None and f.f_code.co_filename == "main.py"

def _hook(event, args):
    if event.startswith("socket."):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event in ("ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "cffi.dlopen") and _from_user_code():
        raise PermissionError(f"sandbox: {event} from model code is not allowed")
    if event == "open":
        path, mode = args[0], args[1] or "r"
        if isinstance(path, int):
            return
        if any(c in str(mode) for c in "wax+") and not _inside(path):
            raise PermissionError(f"sandbox: writing outside the sandbox directory is not allowed: {path}")
        p = os.path.realpath(os.fsdecode(path))
        if any(p == d or p.startswith(d + os.sep) for d in _DENY_READ):
            raise PermissionError(f"sandbox: reading {path} is not allowed")
    elif event in ("os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.symlink", "os.link", "os.chmod", "os.chown", "os.truncate", "shutil.rmtree", "shutil.copyfile", "shutil.move"):
        for a in args:
            if isinstance(a, (str, bytes, os.PathLike)) and not _inside(a):
                raise PermissionError(f"sandbox: {event} outside the sandbox directory is not allowed")
    elif event in ("os.kill", "os.killpg"):
        if args[0] not in (0, _PID) and args[0] != os.getpgid(0):
            raise PermissionError("sandbox: signals to other processes are not allowed")
    elif event in ("os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "os.system"):
        raise PermissionError(f"sandbox: {event} is not allowed")
    elif event == "os.fork" and _BLOCK_FORK:
        raise PermissionError("sandbox: fork is not allowed without a process limit")

sys.addaudithook(_hook)
del _hook
_src = sys.stdin.read() if sys.argv[1] == "-" else open(sys.argv[1], encoding="utf-8").read()
sys.argv = ["main.py"]
exec(compile(_src, "main.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""


@dataclass(frozen=True)
class SandboxConfig:
    """Limits of one call."""

    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_mb: int = 1024  # address space
    file_mb: int = 16  # largest file the code may write (stdout/stderr files included)
    max_processes: int = 32  # enforced when the child runs under its own uid (started as root)
    max_open_files: int = 64
    max_output_chars: int = 4_000  # stdout/stderr returned to the caller
    python: str | None = (
        None  # default: this interpreter if the sandbox uid can run it, else /usr/bin/python3
    )
    network_namespace: bool = True  # unshare the network when permitted
    drop_privileges: bool = True  # run as a dedicated uid when started as root


@dataclass
class SandboxResult:
    ok: bool
    stdout: str
    stderr: str
    exit_code: int | None
    reason: (
        str | None
    )  # timeout | killed_by_signal | nonzero_exit | output_truncated? | start_failed
    seconds: float
    truncated: bool = False

    def as_tool_output(self) -> str:
        """What the agent sees: stdout, then the error, if any."""
        text = self.stdout
        if not self.ok:
            err = self.stderr.strip().splitlines()[-3:] if self.stderr.strip() else []
            text += (
                ("\n" if text else "")
                + f"[error: {self.reason}]"
                + ("\n" + "\n".join(err) if err else "")
            )
        return text


def _world_accessible(path: str) -> bool:
    """Can an unprivileged uid reach (and execute/read) ``path``?"""
    p = os.path.realpath(path)
    parts = p.split(os.sep)
    for i in range(2, len(parts)):
        d = os.sep.join(parts[:i])
        if d and not (os.stat(d).st_mode & 0o001):
            return False
    return bool(os.stat(p).st_mode & 0o005)


def _interpreter(config: SandboxConfig, dropping: bool) -> tuple[str, str]:
    """(python executable, extra sys.path) for the child."""
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    if config.python:
        return config.python, site if not dropping or _world_accessible(site) else ""
    if not dropping or _world_accessible(sys.executable):
        return sys.executable, site
    fallback = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    # same minor version: the environment's pure-Python and compiled packages load too
    same = fallback and os.path.basename(os.path.realpath(fallback)).startswith(
        f"python{sys.version_info.major}.{sys.version_info.minor}"
    )
    return fallback, site if same and _world_accessible(site) else ""


def _next_uid() -> int:
    global _slot
    with _slot_lock:
        _slot = (_slot + 1) % 1000
        return _UID_BASE + _slot


def _unshare_net() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.unshare(CLONE_NEWNET) == 0
    except (OSError, AttributeError):
        return False


def _limits(config: SandboxConfig, uid: int | None):
    def apply() -> None:
        if config.network_namespace:
            _unshare_net()  # best effort: the audit hook refuses sockets anyway
        mb = 1 << 20
        resource.setrlimit(resource.RLIMIT_CPU, (config.cpu_seconds, config.cpu_seconds + 1))
        resource.setrlimit(resource.RLIMIT_AS, (config.memory_mb * mb, config.memory_mb * mb))
        resource.setrlimit(resource.RLIMIT_FSIZE, (config.file_mb * mb, config.file_mb * mb))
        resource.setrlimit(resource.RLIMIT_NOFILE, (config.max_open_files, config.max_open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if uid is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (config.max_processes, config.max_processes))
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)

    return apply


def _alive(pid: str) -> bool:
    """Running or sleeping, not a zombie waiting for init to reap it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def live_pids(uid_from: int, uid_to: int) -> list[int]:
    """Live processes whose uid is in [uid_from, uid_to)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            with contextlib.suppress(OSError):
                if uid_from <= os.stat(f"/proc/{d}").st_uid < uid_to and _alive(d):
                    out.append(int(d))
    return out


def _pids_of_uid(uid: int) -> list[int]:
    return live_pids(uid, uid + 1)


def _reap_uid(uid: int) -> int:
    """Kill every process left running under the sandbox uid (escaped grandchildren)."""
    killed = 0
    for _ in range(20):
        pids = _pids_of_uid(uid)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.01)
    return killed


def _read_capped(path: str, cap: int) -> tuple[str, bool]:
    with open(path, "rb") as f:
        data = f.read(cap * 4 + 1)
    text = data.decode("utf-8", errors="replace")
    return (text[:cap], True) if len(text) > cap else (text, False)


@dataclass
class _Warm:
    """A sandboxed interpreter started with its limits, waiting for its one program on stdin."""

    proc: subprocess.Popen
    workdir: str
    uid: int | None
    out_path: str
    err_path: str


def _spawn(config: SandboxConfig) -> _Warm:
    workdir = tempfile.mkdtemp(prefix="flow-sandbox-")
    uid = _next_uid() if (config.drop_privileges and os.geteuid() == 0) else None
    if uid is not None:
        os.chown(workdir, uid, uid)
    out_path, err_path = os.path.join(workdir, ".stdout"), os.path.join(workdir, ".stderr")
    deny = os.pathsep.join(
        sorted({os.path.expanduser("~"), "/root", "/proc/1", f"/proc/{os.getpid()}"})
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
    }
    python, extra_path = _interpreter(config, uid is not None)
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        if uid is not None:
            os.fchown(out.fileno(), uid, uid)
            os.fchown(err.fileno(), uid, uid)
        proc = subprocess.Popen(
            [python, "-I", "-c", PRELUDE, "-", deny, extra_path, "0" if uid is not None else "1"],
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            start_new_session=True,
            preexec_fn=_limits(config, uid),
            close_fds=True,
        )
    return _Warm(proc, workdir, uid, out_path, err_path)


def _finish(warm: _Warm, code: str, config: SandboxConfig, t0: float) -> SandboxResult:
    """Hand ``code`` to a warm interpreter, enforce the wall clock, collect, clean up."""
    proc = warm.proc
    try:
        reason = None
        try:
            proc.stdin.write(code.encode("utf-8"))
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the interpreter died before reading: its exit status says why
        try:
            status = proc.wait(timeout=config.wall_seconds)
        except subprocess.TimeoutExpired:
            reason = "timeout"
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            status = proc.wait()
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # background children of a finished call
        if warm.uid is not None:
            _reap_uid(warm.uid)
        stdout, t1 = _read_capped(warm.out_path, config.max_output_chars)
        stderr, t2 = _read_capped(warm.err_path, config.max_output_chars)
        if reason is None and status is not None and status < 0:
            sig = -status
            reason = {
                signal.SIGXCPU: "cpu_limit",
                signal.SIGXFSZ: "file_size_limit",
                signal.SIGKILL: "killed",
            }.get(sig, f"signal_{signal.Signals(sig).name}")
        elif reason is None and status != 0:
            reason = "memory_limit" if "MemoryError" in stderr else "error"
        return SandboxResult(
            reason is None, stdout, stderr, status, reason, time.perf_counter() - t0, t1 or t2
        )
    finally:
        shutil.rmtree(warm.workdir, ignore_errors=True)


def run_python(code: str, config: SandboxConfig | None = None) -> SandboxResult:
    """Run ``code`` in a fresh sandboxed interpreter and return what happened."""
    config = config or SandboxConfig()
    t0 = time.perf_counter()
    try:
        warm = _spawn(config)
    except OSError as e:
        return SandboxResult(False, "", str(e), None, "start_failed", time.perf_counter() - t0)
    return _finish(warm, code, config, t0)


def _discard(w: _Warm) -> None:
    with contextlib.suppress(OSError):
        os.killpg(w.proc.pid, signal.SIGKILL)
    w.proc.wait()
    if w.uid is not None:
        _reap_uid(w.uid)
    shutil.rmtree(w.workdir, ignore_errors=True)


class SandboxPool:
    """Pre-started sandboxed interpreters: each still runs exactly one program and exits (the
    isolation of a fresh process per call), but its start-up (exec, imports, limits) is paid
    ahead of time, off the agent's critical path."""

    def __init__(self, size: int = 4, config: SandboxConfig | None = None):
        import queue

        self.config = config or SandboxConfig()
        self.ready: queue.Queue[_Warm] = queue.Queue()
        self.size = size
        self._lock = threading.Lock()
        self._closed = False
        self._threads: list[threading.Thread] = []
        for _ in range(size):
            self._refill()

    def _refill(self) -> None:
        def start() -> None:
            with contextlib.suppress(OSError):
                warm = _spawn(self.config)
                with self._lock:
                    if not self._closed:
                        self.ready.put(warm)
                        return
                _discard(warm)  # the pool closed while this one was starting

        t = threading.Thread(target=start, daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def run(self, code: str) -> SandboxResult:
        t0 = time.perf_counter()
        try:
            warm = self.ready.get(timeout=30)
        except Exception:  # noqa: BLE001 - no warm worker: start one now
            warm = _spawn(self.config)
        self._refill()
        return _finish(warm, code, self.config, t0)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for t in threads:  # spawns in flight discard themselves once closed
            t.join(timeout=30)
        while not self.ready.empty():
            _discard(self.ready.get_nowait())

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

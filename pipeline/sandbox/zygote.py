"""The warm interpreter that runs inside the isolation and forks one fresh child per program.

This file is the sandbox's side of the protocol. It runs as ``python -I -c <this source>``
inside bubblewrap (its own user, mount, PID, network, IPC and UTS namespaces), so it may use
the standard library only. The host imports it only for ``read_frame``/``write_frame``.

This interpreter is the namespace's PID 1 (bubblewrap's ``--as-pid-1``): the kernel delivers
no signal to it from inside that it has not asked for, so no program can kill or stop it, and
every process a program leaves behind is reparented to it, killed and reaped here.

Per program: fork (the child is a copy of this pre-imported interpreter, which never runs model
code itself, so nothing is left from an earlier program), set the limits in the child before
its code runs (it cannot raise hard limits) and install the seccomp filter (seccomp.py: no
ptrace, process_vm_*, pidfd_getfd, keyrings, memfd, SysV shm), collect stdout/stderr through
pipes with size caps, enforce the wall clock and the program's CPU and memory summed over all
its processes, then kill every other process in the PID namespace and wipe /tmp, /dev/shm and
SysV IPC objects. The interpreter is not dumpable, so a program running under the same uid can
neither ptrace it nor open its /proc entries (its control pipes).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import resource
import select
import signal
import struct
import sys
import time
import types

WORK = "/tmp/work"
_WARMUP = """
import math
class A:
    def f(self, x: int) -> float:
        return [i * x for i in range(3) if i][0] / 2
try:
    print(f"{A().f(2):.2f}", {"k": (1, 2)}, lambda y: y ** 2)
except (ValueError, KeyError) as e:
    raise RuntimeError(e) from None
"""
MAX_FRAME = 64 << 20
TICK_SECONDS = 0.01  # how often the program's CPU and memory totals are checked
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_HEADER = struct.Struct(">I")


def write_frame(fd: int, obj: dict) -> None:
    data = json.dumps(obj).encode("utf-8")
    data = _HEADER.pack(len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no answer from the sandbox in time")
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_frame(fd: int, deadline: float | None = None) -> dict | None:
    """One length-prefixed JSON frame; None at end of stream."""
    head = _read_exact(fd, _HEADER.size, deadline)
    if head is None:
        return None
    (n,) = _HEADER.unpack(head)
    if n > MAX_FRAME:
        raise ValueError(f"sandbox frame of {n} bytes exceeds {MAX_FRAME}")
    body = _read_exact(fd, n, deadline)
    if body is None:
        return None
    return json.loads(body)


_libc = None


def _c():
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _prctl_dumpable(value: int) -> None:
    _c().prctl(4, value, 0, 0, 0)  # PR_SET_DUMPABLE


def _install_seccomp(prog: bytes) -> None:
    """Filter this process and everything it starts (irreversible; needs no privilege)."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = _c()
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


_SECCOMP: bytes = b""  # set by main() from the host's arguments


def _close_from(low: int) -> None:
    """Close every fd >= ``low`` (the control pipes among them): one close_range(2) syscall,
    else the open ones listed in /proc (os.closerange over 64k numbers costs 3 ms)."""
    if _c().close_range(low, 0xFFFFFFFF, 0) == 0:
        return
    for fd in [int(x) for x in os.listdir("/proc/self/fd")]:
        if fd >= low:
            with contextlib.suppress(OSError):
                os.close(fd)


def _child(req: dict, out_w: int, err_w: int) -> None:
    """In the forked child: become the program (never returns)."""
    status = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # PID 1 runs without it
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        _close_from(3)
        os.chdir(WORK)
        mb = 1 << 20
        lim = req["limits"]
        for res, value in (
            (resource.RLIMIT_CPU, (lim["cpu_seconds"], lim["cpu_seconds"] + 1)),
            (resource.RLIMIT_AS, (lim["memory_mb"] * mb,) * 2),
            (resource.RLIMIT_FSIZE, (lim["file_mb"] * mb,) * 2),
            (resource.RLIMIT_NOFILE, (lim["max_open_files"],) * 2),
            (resource.RLIMIT_NPROC, (lim["max_processes"],) * 2),
            (resource.RLIMIT_CORE, (0, 0)),
            (resource.RLIMIT_MSGQUEUE, (0, 0)),  # POSIX message queues would outlive it
        ):
            resource.setrlimit(res, value)
        _prctl_dumpable(1)  # its own /proc entries readable to itself (and its totals to us)
        _install_seccomp(_SECCOMP)
        atexit._clear()
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace"
        )
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False),
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
        )
        sys.argv = ["main.py"]
        sys.path.insert(0, WORK)
        with open("main.py", "w", encoding="utf-8") as f:
            f.write(req["code"])  # so tracebacks show the program's lines
        main = types.ModuleType("__main__")
        main.__file__ = os.path.join(WORK, "main.py")
        main.__builtins__ = __builtins__
        sys.modules["__main__"] = main
        try:
            exec(compile(req["code"], main.__file__, "exec"), main.__dict__)
            status = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                status = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                status = 1
        except BaseException as e:  # noqa: BLE001 - the program's error, shown as Python would
            import traceback

            # from the program's frame on: the zygote's own frame is not the program's business
            traceback.print_exception(type(e), e, e.__traceback__.tb_next)
            status = 1
        try:
            if "threading" in sys.modules:  # wait for non-daemon threads, as interpreter exit does
                sys.modules["threading"]._shutdown()
            atexit._run_exitfuncs()
        except BaseException:  # noqa: BLE001
            pass
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):  # e.g. the file-size limit
                stream.flush()
    finally:
        os._exit(status & 0xFF if isinstance(status, int) else 1)


_reaped: dict[int, tuple[int, float]] = {}  # pid -> (wait status, CPU seconds) not yet taken


def _reap() -> float:
    """Reap every finished child (as PID 1, every orphan is ours); CPU seconds they used."""
    cpu = 0.0
    while True:
        try:
            pid, status, ru = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return cpu
        if pid == 0:
            return cpu
        used = ru.ru_utime + ru.ru_stime
        _reaped[pid] = (status, used)
        cpu += used


def _usage() -> tuple[float, int]:
    """(CPU seconds, bytes of memory) of every live process of the program, each counted once:
    a process's own and its reaped children's CPU time; its proportional share of resident
    pages (or all of them, if it hid its smaps); plus what it keeps in /tmp and /dev/shm."""
    cpu, mem, me = 0.0, 0, os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        cpu += sum(int(x) for x in fields[11:15]) / _CLK_TCK  # utime stime cutime cstime
        if fields[0] in (b"Z", b"X"):
            continue
        try:
            with open(f"/proc/{d}/smaps_rollup", "rb") as f:
                pss = next(ln for ln in f.read().splitlines() if ln.startswith(b"Pss:"))
            mem += int(pss.split()[1]) << 10
        except (OSError, StopIteration, ValueError):
            try:
                with open(f"/proc/{d}/statm", "rb") as f:
                    mem += int(f.read().split()[1]) * _PAGE
            except (OSError, IndexError, ValueError):
                continue
    for path in ("/tmp", "/dev/shm"):
        st = os.statvfs(path)
        mem += (st.f_blocks - st.f_bfree) * st.f_frsize
    return cpu, mem


def _others() -> list[int]:
    """Live processes of this PID namespace other than its init (1) and this interpreter."""
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) not in (1, me):
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                out.append(int(d))
    return out


def _kill_all() -> None:
    """SIGKILL everything in the namespace but init and us; kill(-1) reaches exactly that set."""
    for _ in range(200):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            _reap()
            return  # nothing was left to signal
        _reap()
        if not _others():
            return
        time.sleep(0.002)


def _wipe(path: str) -> None:
    """Remove everything under ``path``, whatever modes the program left on it."""
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            os.chmod(entry.path, 0o700)
            _wipe(entry.path)
            os.rmdir(entry.path)
        else:
            os.unlink(entry.path)


def _drop_ipc() -> None:
    """Remove SysV shared memory, semaphores and message queues: they outlive processes."""
    libc = _c()
    for table, rm in (("shm", libc.shmctl), ("sem", libc.semctl), ("msg", libc.msgctl)):
        try:
            with open(f"/proc/sysvipc/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            ident = int(row.split()[1])
            if table == "sem":
                rm(ident, 0, 0)  # IPC_RMID = 0
            else:
                rm(ident, 0, None)


def _collect(pid: int, out_r: int, err_r: int, req: dict, t0: float) -> dict:
    lim = req["limits"]
    deadline = t0 + lim["wall_seconds"]
    cap = lim["max_output_chars"] * 4 + 4  # bytes: enough for that many UTF-8 characters
    hard = lim["max_output_mb"] << 20
    mem_cap = lim["memory_mb"] << 20
    bufs = {out_r: bytearray(), err_r: bytearray()}
    total, status, reason = 0, None, None
    reaped_cpu = 0.0  # CPU seconds of the program's processes already reaped here
    pidfd = os.pidfd_open(pid)
    poll = select.poll()
    for fd in (out_r, err_r, pidfd):
        poll.register(fd, select.POLLIN)
    open_fds = {out_r, err_r}

    def read(fd: int) -> None:
        nonlocal total, reason
        data = os.read(fd, 1 << 16)
        if not data:
            poll.unregister(fd)
            open_fds.discard(fd)
            return
        total += len(data)
        room = cap - len(bufs[fd])
        if room > 0:
            bufs[fd] += data[:room]
        if total > hard:
            reason = "output_limit"

    def check() -> None:
        """Reap what finished, then hold the whole program to its CPU and memory limits."""
        nonlocal status, reaped_cpu, reason
        reaped_cpu += _reap()
        if status is None and pid in _reaped:
            status = _reaped.pop(pid)[0]
        cpu, mem = _usage()
        if cpu + reaped_cpu > lim["cpu_seconds"]:
            reason = "cpu_limit"
        elif mem > mem_cap:
            reason = "memory_limit"

    next_check = time.monotonic() + TICK_SECONDS
    while reason is None and (status is None or open_fds):
        if status is not None:  # exited: take what is already in the pipes, not what daemons add
            ready = [fd for fd, _ in poll.poll(0) if fd in open_fds]
            if not ready:
                break
            for fd in ready:
                read(fd)
            continue
        now = time.monotonic()
        if now >= deadline:
            reason = "timeout"
            break
        if now >= next_check:
            check()
            next_check = now + TICK_SECONDS
            continue
        for fd, _ in poll.poll(max(1, int((min(deadline, next_check) - now) * 1000))):
            if fd == pidfd:
                poll.unregister(pidfd)
                reaped_cpu += _reap()
                if pid in _reaped:
                    status = _reaped.pop(pid)[0]
            else:
                read(fd)
    seconds = time.monotonic() - t0
    _kill_all()
    if status is None:
        status = _reaped.pop(pid)[0] if pid in _reaped else os.waitpid(pid, 0)[1]
    _reaped.clear()
    for fd in (out_r, err_r, pidfd):
        os.close(fd)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return {
        "id": req["id"],
        "exit_code": code,
        "reason": reason,
        "seconds": seconds,
        "stdout": bufs[out_r].decode("utf-8", "replace"),
        "stderr": bufs[err_r].decode("utf-8", "replace"),
        "truncated": total > len(bufs[out_r]) + len(bufs[err_r]),
    }


def run_one(req: dict) -> dict:
    os.makedirs(WORK, mode=0o700, exist_ok=True)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(req, out_w, err_w)
    os.close(out_w)
    os.close(err_w)
    try:
        result = _collect(pid, out_r, err_r, req, t0)
    finally:
        _kill_all()
    try:
        for path in ("/tmp", "/dev/shm"):
            _wipe(path)
        _drop_ipc()
    except Exception as e:  # noqa: BLE001 - e.g. a tree too deep to walk: whatever is left could
        # reach the next program, so this worker retires (its tmpfs goes with it)
        result["retire"] = f"cleanup failed: {type(e).__name__}: {e}"
    return result


def _seccomp_works() -> str | None:
    """Install the filter in a throwaway child: None if it took, else why not."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            _install_seccomp(_SECCOMP)
            os.write(w, b"ok")
        except BaseException as e:  # noqa: BLE001
            os.write(w, f"{type(e).__name__}: {e}".encode()[:500])
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    msg = os.read(r, 600).decode("utf-8", "replace")
    os.close(r)
    return None if msg == "ok" else msg or "no answer"


def main() -> None:
    global _SECCOMP
    args = json.loads(sys.argv[1])
    _SECCOMP = bytes.fromhex(args["seccomp"])
    # as PID 1, a signal with the default action is never delivered from inside the namespace;
    # Python's own SIGINT handler would make this process interruptible by any program
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # the control pipes move off 0/1 so no child can inherit them by accident
    ctl_in, ctl_out = os.dup(0), os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    _prctl_dumpable(0)
    sys.path.extend(args["path"])
    failed = {}
    for name in args["preload"]:
        try:
            __import__(name)
        except Exception as e:  # noqa: BLE001 - a missing optional module is reported, not fatal
            failed[name] = f"{type(e).__name__}: {e}"
    _c()
    compile(_WARMUP, "warmup.py", "exec")  # the compiler's first use costs ~1 ms: pay it once
    import gc

    gc.freeze()  # children then touch (and copy) fewer of the parent's pages
    ready = {"ready": True, "python": sys.version.split()[0], "failed": failed}
    ready["pid"] = os.getpid()
    ready["seccomp_error"] = _seccomp_works()
    write_frame(ctl_out, ready)
    if ready["seccomp_error"] or ready["pid"] != 1:
        return
    while True:
        req = read_frame(ctl_in)
        if req is None:
            return
        result = run_one(req)
        write_frame(ctl_out, result)
        if "retire" in result:
            return


if __name__ == "__main__":
    main()

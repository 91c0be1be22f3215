"""The bubblewrap command line: what the sandbox can see, and nothing else.

The root file system is built from nothing: the shared libraries under /usr/lib, the one
Python interpreter, the site-packages folders (all read-only), a fresh /proc of its own PID
namespace, a minimal read-only /dev, and two size-bounded tmpfs (/tmp with the work folder,
/dev/shm).
No lake, home folder, project folder, /etc, /run or host /tmp exists inside. Every namespace is
unshared (user, mount, PID, network, IPC, UTS, cgroup), so no host process is visible or
signallable, and no socket of any kind reaches the host (a fresh network namespace has only its
own loopback, and no host unix-socket path is mounted). Started as root, bubblewrap itself runs
as an unprivileged host uid, so nothing inside is root on the host either.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from pipeline.sandbox import seccomp
from pipeline.sandbox.config import SandboxConfig
from pipeline.sandbox.errors import SandboxUnavailable

SITE_MOUNT = "/opt/site"
INSTALL_HINT = (
    "the sandbox needs bubblewrap (kernel namespaces) and will not run model code without it. "
    "Install it with `apt-get install bubblewrap` (Debian/Ubuntu; `dnf install bubblewrap` on "
    "Fedora), or set SandboxConfig.bwrap to its path. If it is installed but cannot start, the "
    "kernel may forbid unprivileged user namespaces: enable them (sysctl "
    "kernel.unprivileged_userns_clone=1, or on Ubuntu 24.04+ an AppArmor profile for bwrap) or "
    "run the sandbox on a machine that allows them."
)


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    host_uid: int | None  # the uid bubblewrap runs as, when we drop root


def find_bwrap(config: SandboxConfig) -> str:
    path = shutil.which(config.bwrap)
    if path is None:
        raise SandboxUnavailable(f"bubblewrap not found ({config.bwrap!r}): {INSTALL_HINT}")
    return path


def _readable_by_others(path: str) -> bool:
    """Can an unprivileged uid reach and read ``path`` (every parent folder searchable)?"""
    p = Path(os.path.realpath(path))
    for parent in list(p.parents)[:-1]:
        if not parent.stat().st_mode & 0o001:
            return False
    return bool(p.stat().st_mode & 0o004)


def interpreter(config: SandboxConfig) -> tuple[str, list[str]]:
    """(the interpreter's path inside the sandbox, host folders to bind read-only for it)."""
    if config.python:
        exe = os.path.realpath(config.python)
    else:
        system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
        # same minor version as ours: this environment's compiled packages load there too
        exe = system if os.path.exists(system) else os.path.realpath(sys.executable)
    if exe.startswith("/usr/"):
        return exe, []
    prefix = str(Path(exe).parent.parent)  # e.g. /opt/python3.11 for /opt/python3.11/bin/python3
    return exe, [prefix]


def default_site_packages() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(dict.fromkeys(p for p in (paths["purelib"], paths["platlib"]) if os.path.isdir(p)))


def launch(config: SandboxConfig, zygote_source: str) -> Launch:
    """The argv that starts one warm interpreter inside a fresh set of namespaces."""
    bwrap = find_bwrap(config)
    exe, prefixes = interpreter(config)
    dropping = os.geteuid() == 0
    site = default_site_packages() if config.site_packages is None else config.site_packages
    if dropping:
        for p in [exe, *prefixes]:
            if not _readable_by_others(p):
                raise SandboxUnavailable(
                    f"the sandbox's interpreter {p} is not readable by the unprivileged uid "
                    f"{config.host_uid}: set SandboxConfig.python to a world-readable Python "
                    f"{sys.version_info.major}.{sys.version_info.minor} (e.g. /usr/bin/python3)"
                )
        site = tuple(p for p in site if _readable_by_others(p))
    if not seccomp.supported():
        raise SandboxUnavailable(
            f"the sandbox has no seccomp syscall table for {os.uname().machine!r} "
            f"(supported: {', '.join(seccomp.SYSCALLS)}) and will not run model code without it"
        )
    argv = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent"]
    # the warm interpreter is the namespace's PID 1: no bubblewrap init holding the control
    # pipes, unkillable from inside, and the reaper of everything a program leaves
    argv += ["--as-pid-1"]
    argv += ["--new-session", "--hostname", "sandbox", "--uid", "1000", "--gid", "1000"]
    argv += ["--ro-bind", "/usr/lib", "/usr/lib"]
    if os.path.isdir("/usr/lib64"):
        argv += ["--ro-bind", "/usr/lib64", "/usr/lib64"]
    for top in ("lib", "lib64", "lib32"):
        host = f"/{top}"
        if os.path.islink(host):
            argv += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            argv += ["--ro-bind", host, host]
    argv += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    if exe.startswith("/usr/"):
        argv += ["--ro-bind", exe, exe]
        for alias in ("/usr/bin/python3", "/usr/bin/python"):
            if alias != exe:
                argv += ["--symlink", os.path.basename(exe), alias]
    for prefix in prefixes:
        argv += ["--ro-bind", prefix, prefix]
    mounts = []
    for i, p in enumerate(site):
        mounts.append(f"{SITE_MOUNT}/{i}")
        argv += ["--ro-bind", p, mounts[-1]]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", str(config.tmp_mb << 20), "--tmpfs", "/tmp"]
    argv += ["--size", str(config.shm_mb << 20), "--tmpfs", "/dev/shm"]
    # /dev is a tmpfs of bubblewrap's: read-only, so nothing written there outlives a call
    # (/dev/shm is its own bounded tmpfs, wiped after every program)
    argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
    argv += ["--clearenv", "--chdir", "/tmp"]
    for k, v in {
        "PATH": "/usr/bin",
        "HOME": "/tmp/work",
        "TMPDIR": "/tmp/work",
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }.items():
        argv += ["--setenv", k, v]
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # set on CPUs where OpenBLAS needs them
        if k in os.environ:
            argv += ["--setenv", k, os.environ[k]]
    args = json.dumps(
        {"path": mounts, "preload": list(config.preload), "seccomp": seccomp.program().hex()}
    )
    argv += ["--", exe, "-I", "-B", "-c", zygote_source, args]
    return Launch(argv, config.host_uid if dropping else None)

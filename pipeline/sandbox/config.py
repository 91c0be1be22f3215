"""Limits of one sandboxed program, and what it reports back."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxConfig:
    """Limits of one call, all enforced from outside the program (see docs/reliability.md)."""

    wall_seconds: float = 10.0
    """Wall-clock seconds a program may run before it is killed."""
    cpu_seconds: int = 10
    """CPU seconds of the whole program (every process it starts, together)."""
    memory_mb: int = 1024
    """Address space of the program (RLIMIT_AS)."""
    tmp_mb: int = 64
    """The private /tmp (work folder included): a tmpfs of this size."""
    shm_mb: int = 16
    """The private /dev/shm: a tmpfs of this size."""
    file_mb: int = 16
    """Largest file the program may write (RLIMIT_FSIZE)."""
    max_processes: int = 32
    """Processes and threads of the program (RLIMIT_NPROC)."""
    max_open_files: int = 64
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    max_output_chars: int = 4_000
    """Stdout/stderr returned to the caller, each."""
    max_output_mb: int = 8
    """The program is killed once it writes more than this to stdout+stderr."""
    python: str | None = None
    """The interpreter inside the sandbox; default: /usr/bin/python3.<this minor>, else this one."""
    site_packages: tuple[str, ...] | None = None
    """Host folders bound read-only and put on sys.path (default: this environment's site-packages,
    so numpy or sympy import as they do here); () for none.
    """
    preload: tuple[str, ...] = (
        "math",
        "cmath",
        "fractions",
        "decimal",
        "itertools",
        "functools",
        "collections",
        "statistics",
        "random",
        "re",
        "json",
        "string",
        "datetime",
        "heapq",
        "bisect",
        "traceback",
    )
    """Imported once by the warm interpreter, so each program starts with them loaded."""
    bwrap: str = "bwrap"
    """The bubblewrap executable (a name on PATH or a path)."""
    host_uid: int = 65500
    """When started as root, bubblewrap itself runs as this unprivileged uid."""
    start_seconds: float = 60.0
    """How long a warm interpreter may take to start (preloads)."""


@dataclass
class SandboxResult:
    ok: bool
    stdout: str
    stderr: str
    exit_code: int | None  # as subprocess reports it: negative for a signal
    # None | timeout | cpu_limit | memory_limit | file_size_limit | output_limit | killed |
    # signal_<NAME> | error | sandbox_lost (the program took its sandbox down with it)
    reason: str | None
    seconds: float
    truncated: bool = False
    call_id: str = ""

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

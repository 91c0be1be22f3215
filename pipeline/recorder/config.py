"""Options of the recorder: the proxy in front of an upstream, and the commit into the lake."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from pipeline.lake import Lake
from pipeline.recorder.errors import RecorderConfigError, RecorderError

SESSION_HEADER = "x-flow-session"  # groups calls into one episode stream (else: prefix continuity)
ANSWER_HEADER = (
    "x-flow-answer"  # the ground truth of the episode's question, when the client knows it
)
DOMAIN_HEADER = "x-flow-domain"
REQUEST_ID_HEADER = "x-flow-request-id"  # set on every proxied response: the call's id in the log


@dataclass
class RecorderConfig:
    """The proxy: where it listens, what it forwards to, where its log lives."""

    upstream: str = "http://127.0.0.1:8000/v1"
    """An OpenAI-compatible base URL (vllm serve, ...)."""
    host: str = "127.0.0.1"
    """Address the proxy listens on (loopback by default: agents on this machine)."""
    port: int = 8100
    """Port the proxy listens on; agents use http://HOST:PORT/v1 as their base URL."""
    instance: str | None = None
    """The log's name; default <hostname>-<port>, stable across restarts."""
    wal: str | None = None
    """Log folder; default ROOT/recorder/wal (the lake must then be local)."""
    segment_bytes: int = 64 << 20
    """A log segment is sealed and a new one started past this size."""
    timeout: float = 600.0
    """Seconds an upstream call may take."""
    fsync: bool = True
    """Durable before acknowledged; off only for benchmarks of the rest."""
    max_request_mb: float = 32.0
    """A larger request body (in MB, 10^6 bytes) is refused (413), counted as it streams in."""
    header_seconds: float = 10.0
    """A connection whose request headers take longer is closed."""
    body_seconds: float = 120.0
    """A request whose body takes longer to arrive is refused (408)."""
    max_connections: int = 512
    """Open connections at once; more are refused (503)."""
    allowed_origins: tuple[str, ...] = ()
    """Browsers send Origin; agents do not. A request with an Origin not listed here is refused, so
    a web page cannot post trajectories into the lake (CSRF).
    """
    allowed_hosts: tuple[str, ...] | None = None
    """Host headers accepted (DNS rebinding); default: loopback names when listening on loopback,
    any host otherwise.
    """

    def __post_init__(self) -> None:
        for name in ("max_request_mb", "header_seconds", "body_seconds", "max_connections"):
            if getattr(self, name) <= 0:
                raise RecorderConfigError(f"{name} must be positive, got {getattr(self, name)}")

    @property
    def max_request_bytes(self) -> int:
        return int(self.max_request_mb * 1e6)

    def hosts(self) -> tuple[str, ...] | None:
        """Host header names accepted (None: any)."""
        if self.allowed_hosts is not None:
            return self.allowed_hosts
        if self.host in ("127.0.0.1", "localhost", "::1") or self.host.startswith("127."):
            return ("127.0.0.1", "localhost", "[::1]", self.host)
        return None

    def instance_name(self) -> str:
        return self.instance or f"{socket.gethostname()}-{self.port}"


@dataclass
class CommitConfig:
    """The commit: which episodes are complete enough to enter the lake."""

    idle_seconds: float = 600.0
    """An open episode with no call for this long is committed as is."""
    flush: bool = False
    """Commit every episode now, open or not (e.g. before a shutdown)."""
    source: str = "recorded"
    """The source name the committed episodes get in the lake."""
    archive: bool = True
    """Move log segments whose calls are all committed to ROOT/recorder/archive."""
    wal: str | None = None
    """The recorder's log folder; default ROOT/recorder/wal (a remote lake needs a local one)."""


def wal_dir(lake: Lake, wal: str | None = None) -> str:
    """The log folder: given, or inside a local lake. fsync needs a local disk, so a remote lake
    needs ``--wal``."""
    if wal:
        return os.path.abspath(wal)
    if not lake.is_local:
        raise RecorderError(
            f"the lake {lake.root} is not on local disk; give the recorder a local log folder "
            "(--wal DIR) and commit it with `flow record-commit --wal DIR`"
        )
    return lake.path("recorder", "wal")

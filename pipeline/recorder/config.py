"""Options of the recorder: the proxy in front of an upstream, and the commit into the lake."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from pipeline.lake import Lake
from pipeline.recorder.errors import RecorderError

SESSION_HEADER = "x-flow-session"  # groups calls into one episode stream (else: prefix continuity)
ANSWER_HEADER = (
    "x-flow-answer"  # the ground truth of the episode's question, when the client knows it
)
DOMAIN_HEADER = "x-flow-domain"
REQUEST_ID_HEADER = "x-flow-request-id"  # set on every proxied response: the call's id in the log


@dataclass
class RecorderConfig:
    """The proxy: where it listens, what it forwards to, where its log lives."""

    upstream: str = "http://127.0.0.1:8000/v1"  # an OpenAI-compatible base URL (vllm serve, ...)
    host: str = "127.0.0.1"
    port: int = 8100
    instance: str | None = None  # the log's name; default <hostname>-<port>, stable across restarts
    wal: str | None = None  # log folder; default ROOT/recorder/wal (the lake must then be local)
    segment_bytes: int = 64 << 20  # a log segment is sealed and a new one started past this size
    timeout: float = 600.0  # seconds an upstream call may take
    fsync: bool = True  # durable before acknowledged; off only for benchmarks of the rest
    max_request_bytes: int = 32 << 20  # a larger request body is refused (413) unread
    header_seconds: float = 10.0  # a connection whose request headers take longer is closed
    body_seconds: float = 120.0  # a request whose body takes longer to arrive is refused (408)
    max_connections: int = 512  # open connections at once; more are refused (503)
    # browsers send Origin; agents do not. A request with an Origin not listed here is refused,
    # so a web page cannot post trajectories into the lake (CSRF)
    allowed_origins: tuple[str, ...] = ()
    # Host headers accepted (DNS rebinding); default: loopback names when listening on loopback,
    # any host otherwise
    allowed_hosts: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("max_request_bytes", "header_seconds", "body_seconds", "max_connections"):
            if getattr(self, name) <= 0:
                raise RecorderError(f"{name} must be positive, got {getattr(self, name)}")

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

    idle_seconds: float = 600.0  # an open episode with no call for this long is committed as is
    flush: bool = False  # commit every episode now, open or not (e.g. before a shutdown)
    source: str = "recorded"
    archive: bool = True  # move log segments whose calls are all committed to ROOT/recorder/archive


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

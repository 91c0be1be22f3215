"""A query in a process of its own, bounded from outside: resident memory and wall time.

DuckDB's ``memory_limit`` covers its buffer manager, and its interrupt is honoured between
vectors, but some operators ignore both: ``length(repeat('x', 1000000000))`` builds a 1 GB string
and ran for 30 s at 2 GB of resident memory under ``memory_limit 500MB, timeout 3 s``. So the
command line runs each query in a child process (``python -m pipeline.lake.query_process``) that
streams Arrow IPC back, and a watchdog here kills it when its resident set passes the memory
limit plus the interpreter's own allowance, or when it runs past the timeout. The parent's own
memory stays bounded too: batches are read one at a time.

URL lakes that live in this process only (``memory://``) cannot be seen from a child; they are
queried in-process, bounded by DuckDB alone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pyarrow as pa

from pipeline.lake import Lake
from pipeline.lake.query import QueryConfig, QueryError, QueryTimeout, stream

BASE_ALLOWANCE = 512 << 20  # the child's interpreter, DuckDB, Arrow and their libraries
WATCH_SECONDS = 0.02  # how often the child's resident memory is read
GRACE_SECONDS = 1.0  # past the timeout, DuckDB's own interrupt has this long before the kill
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS |= {"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}


class QueryMemoryExceeded(QueryError):
    """The query's process passed its memory bound and was killed."""


def parse_bytes(text: str) -> int:
    """DuckDB's size syntax (``500MB``, ``2GB``, ``1GiB``) in bytes."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise QueryError(f"cannot read the memory limit {text!r} (use e.g. 500MB or 2GB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def process_bound(config: QueryConfig) -> int:
    """Resident bytes the query's process may use: DuckDB's limit plus the base allowance."""
    return parse_bytes(config.memory_limit or "2GB") + BASE_ALLOWANCE


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


class _Watchdog(threading.Thread):
    """Kills the child past its memory bound or its deadline; says which."""

    def __init__(self, proc: subprocess.Popen, bound: int, seconds: float | None):
        super().__init__(daemon=True, name="query-watchdog")
        self.proc, self.bound, self.reason, self.peak = proc, bound, None, 0
        self.deadline = None if not seconds else time.monotonic() + seconds + GRACE_SECONDS
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.wait(WATCH_SECONDS) and self.proc.poll() is None:
            rss = _rss(self.proc.pid)
            self.peak = max(self.peak, rss)
            if rss > self.bound:
                self.reason = "memory"
            elif self.deadline is not None and time.monotonic() > self.deadline:
                self.reason = "timeout"
            if self.reason:
                self.proc.kill()
                return

    def stop(self) -> None:
        self._stop.set()


def bounded_stream(
    lake: Lake, sql: str, config: QueryConfig | None = None
) -> Iterator[pa.RecordBatch]:
    """``query.stream`` run in a child process held to ``process_bound(config)`` resident bytes
    and ``config.timeout_seconds`` of wall time (plus a second's grace for DuckDB's own
    interrupt). The first batch is the schema, as in ``stream``."""
    config = config or QueryConfig()
    if not lake.is_local and "memory" in (lake.fs.protocol or ()):
        yield from stream(lake, sql, config)  # only this process can see the lake
        return
    bound = process_bound(config)
    request = {
        "root": lake.root,
        "sql": sql,
        "memory_limit": config.memory_limit,
        "threads": config.threads,
        "timeout_seconds": config.timeout_seconds,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.lake.query_process"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    dog = _Watchdog(proc, bound, config.timeout_seconds)
    dog.start()
    try:
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
        try:
            reader = pa.ipc.open_stream(proc.stdout)
            yield pa.RecordBatch.from_pylist([], schema=reader.schema)
            yield from reader
        except (pa.ArrowInvalid, OSError):
            pass  # the child ended without a (whole) stream: its status says why
        proc.wait()
        err = proc.stderr.read().decode("utf-8", "replace")
        if dog.reason == "memory":
            raise QueryMemoryExceeded(
                f"the query's process passed {bound / 1e6:.0f} MB of memory (the memory limit "
                f"{config.memory_limit or '2GB'} plus {BASE_ALLOWANCE >> 20} MB for the "
                "interpreter) and was stopped; raise --memory-limit or select less"
            )
        if dog.reason == "timeout":
            raise QueryTimeout(f"the query ran past its time limit of {config.timeout_seconds:g} s")
        if proc.returncode != 0:
            _raise_child_error(err, proc.returncode)
    finally:
        dog.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            f.close()


def _raise_child_error(err: str, code: int) -> None:
    last = err.strip().splitlines()[-1] if err.strip() else ""
    try:
        info = json.loads(last)
    except ValueError:
        raise RuntimeError(f"the query's process failed (exit {code}): {last[-500:]}") from None
    kinds = {"QueryTimeout": QueryTimeout, "QueryError": QueryError}
    raise kinds.get(info.get("kind"), RuntimeError)(info.get("message", "query failed"))


def main() -> None:
    """The child: read the request from stdin, stream the result as Arrow IPC to stdout."""
    req = json.loads(sys.stdin.read())
    config = QueryConfig(req["memory_limit"], req["threads"], req["timeout_seconds"])
    out = pa.output_stream(sys.stdout.buffer)
    writer = None
    try:
        for batch in stream(Lake(req["root"]), req["sql"], config):
            if writer is None:
                writer = pa.ipc.new_stream(out, batch.schema)
            if batch.num_rows:
                writer.write_batch(batch)
        if writer is not None:
            writer.close()
    except QueryError as e:
        sys.stderr.write("\n" + json.dumps({"kind": type(e).__name__, "message": str(e)}) + "\n")
        sys.exit(2)
    except Exception as e:  # noqa: BLE001 - the user's SQL failed: say how, plainly
        sys.stderr.write("\n" + json.dumps({"kind": "error", "message": str(e)}) + "\n")
        sys.exit(1)


if __name__ == "__main__":
    main()

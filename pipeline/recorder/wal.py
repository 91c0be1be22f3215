"""The write-ahead log: every recorded call is one JSON line, durable before it is acknowledged.

One folder per proxy instance (``<wal>/<instance>/``) holding numbered segments
(``000001.jsonl``, ...). A single writer thread takes whatever records are queued, writes them in
one ``write`` and one ``fsync`` (group commit: concurrent calls share the disk flush), then
resolves their futures; the proxy answers the client only after that. A crash can leave at most
a torn last line, which was never acknowledged: the next open truncates it (counted), and readers
stop before it. The instance folder's ``.lock`` (an OS lock, released by the kernel on kill -9)
says whether a live writer owns the last segment.

Beside the calls, the proxy logs each answer's delivery (``{"delivery_of": <request id>, "seen":
bool}``) once the whole response is handed to the client's connection, or the client is gone.
The call line says it waits for one (``"delivery": "pending"``); ``read_log`` settles it: seen,
unseen, ``in_flight`` (a live writer, no outcome yet) or ``lost`` (the writer died first: kill -9
between the log write and the response).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import orjson

from pipeline.recorder.errors import InstanceBusy

SUFFIX = ".jsonl"
DONE = "committed"  # <instance>/committed/: segments whose calls are all in the lake


def segments(folder: str) -> list[str]:
    """An instance's segment paths, oldest first."""
    if not os.path.isdir(folder):
        return []
    names = sorted(n for n in os.listdir(folder) if n.endswith(SUFFIX) and n[:-6].isdigit())
    return [os.path.join(folder, n) for n in names]


def instances(wal: str) -> list[str]:
    """The instance folders under a log folder."""
    if not os.path.isdir(wal):
        return []
    return sorted(
        os.path.join(wal, n)
        for n in os.listdir(wal)
        if not n.startswith(".") and os.path.isdir(os.path.join(wal, n))
    )


def _try_lock(folder: str, wait: float = 0.0) -> int | None:
    """The instance lock's fd if this process could take it within ``wait`` seconds (no live
    writer), else None. (A commit holds a dead instance's lock for a moment while it reads.)"""
    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.05)


def _holder(folder: str) -> str:
    try:
        with open(os.path.join(folder, ".lock")) as f:
            return f.read().strip() or "another process"
    except OSError:
        return "another process"


@dataclass
class SegmentRead:
    records: list[dict]
    torn_bytes: int  # an unfinished last line (never acknowledged)
    corrupt_lines: int  # complete lines that are not JSON objects (disk damage): counted, skipped


def read_segment(path: str) -> SegmentRead:
    with open(path, "rb") as f:
        data = f.read()
    end = data.rfind(b"\n") + 1
    records, corrupt = [], 0
    for line in data[:end].splitlines():
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            corrupt += 1
            continue
        if isinstance(rec, dict):
            records.append(rec)
        else:
            corrupt += 1
    return SegmentRead(records, len(data) - end, corrupt)


def repair(path: str) -> int:
    """Truncate a torn last line; returns the bytes cut. Only for segments no live writer owns."""
    with open(path, "rb+") as f:
        data = f.read()
        keep = data.rfind(b"\n") + 1
        if keep == len(data):
            return 0
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
        return len(data) - keep


class WAL:
    """The log of one instance, opened by its only writer.

    ``append`` returns a future that resolves once the record is on disk; ``append_async`` awaits
    it from an event loop. ``recovered``: records already in the log when it was opened (earlier
    runs, kept for the commit); ``torn_bytes``: what was cut from torn tails."""

    def __init__(
        self, wal: str, instance: str, segment_bytes: int = 64 << 20, fsync: bool = True
    ) -> None:
        if not instance or "/" in instance or instance.startswith("."):
            raise ValueError(f"invalid instance name {instance!r}")
        self.folder = os.path.join(wal, instance)
        self.instance = instance
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self._lock_fd = _try_lock(self.folder, wait=10.0)
        if self._lock_fd is None:
            raise InstanceBusy(
                f"the recorder log {self.folder} is held by {_holder(self.folder)}; "
                "give this one another --instance (or --port)"
            )
        os.ftruncate(self._lock_fd, 0)
        os.write(self._lock_fd, f"pid {os.getpid()}\n".encode())
        self.recovered = self.torn_bytes = 0
        existing = segments(self.folder)
        pending: dict[str, None] = {}
        for path in existing:
            self.torn_bytes += repair(path)
            for r in read_segment(path).records:
                self.recovered += "request_id" in r
                if r.get("delivery") == "pending":
                    pending[r["request_id"]] = None
                elif isinstance(r.get("delivery_of"), str):
                    pending.pop(r["delivery_of"], None)
        for path in segments(os.path.join(self.folder, DONE)) if pending else []:
            for r in read_segment(path).records:  # a call's line archived before the call
                if isinstance(r.get("delivery_of"), str):
                    pending.pop(r["delivery_of"], None)
        archived = segments(os.path.join(self.folder, DONE))  # numbers are never reused
        self._seq = max(int(os.path.basename(p)[:-6]) for p in [*existing, *archived, "0.jsonl"])
        self._fd = -1
        self._size = 0
        self._open_segment()
        self.appended = 0
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._writer, name=f"wal-{instance}", daemon=True)
        self._thread.start()
        # answers an earlier run logged but died before handing over (kill -9): never seen
        self.lost = len(pending)
        for rid in pending:
            self.append({"delivery_of": rid, "seen": False, "writer_died": True})

    # ---- writing -----------------------------------------------------------------------------
    def _open_segment(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._seq += 1
        path = os.path.join(self.folder, f"{self._seq:06d}{SUFFIX}")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        dfd = os.open(self.folder, os.O_RDONLY)  # the new name itself must survive a crash
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _writer(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while True:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(nxt)
            try:
                data = b"".join(line for line, _, _ in batch)
                if self._size and self._size + len(data) > self.segment_bytes:
                    self._open_segment()
                view = memoryview(data)
                try:
                    while view:
                        n = os.write(self._fd, view)
                        view = view[n:]
                    if self.fsync and any(sync for _, _, sync in batch):
                        os.fsync(self._fd)
                except OSError:
                    # a short write (disk full) must not leave a fragment for the next batch to
                    # be glued to; what was written of this batch is cut, and it is failed
                    with contextlib.suppress(OSError):
                        os.ftruncate(self._fd, self._size)
                    raise
                self._size += len(data)
                self.appended += len(batch)
                for _, fut, _ in batch:
                    fut.set_result(None)
            except BaseException as e:  # noqa: BLE001 - every waiting call learns it was not stored
                for _, fut, _ in batch:
                    if not fut.done():
                        fut.set_exception(e)

    def append(self, record: dict, sync: bool = True) -> Future:
        """Queue one record; the future resolves when it is durable (raises if it cannot be).
        ``sync=False``: written, not flushed on its own (it survives kill -9, not a power cut;
        the next synced batch flushes it)."""
        fut: Future = Future()
        fut.set_running_or_notify_cancel()  # an awaiting task's cancel cannot cancel the write
        if self._fd < 0:
            fut.set_exception(RuntimeError("the recorder log is closed"))
            return fut
        self._queue.put((orjson.dumps(record) + b"\n", fut, sync))
        return fut

    async def append_async(self, record: dict) -> None:
        await asyncio.wrap_future(self.append(record))

    def close(self) -> None:
        """Write what is queued, then release the log (its last segment is sealed)."""
        if self._fd < 0:
            return
        self._queue.put(None)
        self._thread.join()
        os.close(self._fd)
        self._fd = -1
        os.close(self._lock_fd)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def __enter__(self) -> WAL:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class LogState:
    """What the log holds, for the commit."""

    records: list[dict]
    sealed: list[str]  # segments no live writer will append to
    torn_bytes: int
    corrupt_lines: int
    segment_of: dict[str, str]  # request_id -> segment path
    outcome_segment_of: dict[str, str] = field(default_factory=dict)  # delivery lines' segments


def _outcome(line: dict) -> str:
    """A delivery line's outcome: seen, unseen, or lost (written by the next writer for a call
    its dead predecessor never handed over)."""
    return "lost" if line.get("writer_died") else ("seen" if line.get("seen") else "unseen")


def settle_delivery(records: list[dict], outcomes: dict[str, str], live: set[str]) -> None:
    """Each call waiting for a delivery line gets its outcome: the line's (``seen``, ``unseen``,
    or ``lost`` where the next writer found none), ``in_flight`` when its instance's writer is
    alive and has not written it yet, else ``lost`` (the writer died between the log write and
    the response)."""
    for rec in records:
        if rec.get("delivery") != "pending":
            continue
        rid = rec["request_id"]
        if rid in outcomes:
            rec["delivery"] = outcomes[rid]
        else:
            rec["delivery"] = "in_flight" if rec.get("instance") in live else "lost"


def read_log(wal: str) -> LogState:
    """Every complete record in the log. A live instance's last segment is read up to its last
    full line and is not sealed; instances without a writer have torn tails repaired first."""
    records: list[dict] = []
    sealed: list[str] = []
    torn = corrupt = 0
    seg_of: dict[str, str] = {}
    outcomes: dict[str, str] = {}
    outcome_seg: dict[str, str] = {}
    live: set[str] = set()
    for folder in instances(wal):
        fd = _try_lock(folder)
        if fd is None:
            live.add(os.path.basename(folder))
        try:
            segs = segments(folder)
            for i, path in enumerate(segs):
                live_tail = fd is None and i == len(segs) - 1
                if not live_tail:
                    torn += repair(path) if fd is not None else 0
                    sealed.append(path)
                r = read_segment(path)
                if not live_tail:
                    torn += r.torn_bytes
                corrupt += r.corrupt_lines
                for rec in r.records:
                    if isinstance(rec.get("delivery_of"), str):
                        outcomes[rec["delivery_of"]] = _outcome(rec)
                        outcome_seg.setdefault(rec["delivery_of"], path)
                        continue
                    rid = rec.get("request_id")
                    if isinstance(rid, str) and rid not in seg_of:
                        seg_of[rid] = path
                        records.append(rec)
        finally:
            if fd is not None:
                os.close(fd)
    if any(r.get("delivery") == "pending" and r["request_id"] not in outcomes for r in records):
        for folder in instances(wal):  # a line archived with a segment its call was not in
            for path in segments(os.path.join(folder, DONE)):
                for rec in read_segment(path).records:
                    rid = rec.get("delivery_of")
                    if isinstance(rid, str) and rid not in outcomes:
                        outcomes[rid] = _outcome(rec)
    settle_delivery(records, outcomes, live)
    return LogState(records, sealed, torn, corrupt, seg_of, outcome_seg)

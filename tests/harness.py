"""Harness code shared by tests and bench scripts: real sample records per reader, byte-level
mutations and the invariant check of one ingest (fuzzing); a content snapshot of a lake (crash
and concurrency checks); the live processes of the machine (nothing-left-running checks); local
servers (a free port, waiting until one answers, stopping its process group)."""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import orjson
import pyarrow.parquet as pq

from pipeline.ingest import IngestConfig, ingest
from pipeline.ingest.containers import iter_records, sniff_container
from pipeline.ingest.registry import detect
from pipeline.ingest.stage import FileReport, discover
from pipeline.lake import Lake
from pipeline.lake.query import query


def sample_records(*folders: Path) -> dict[str, tuple[str, bytes]]:
    """The first record of the first file each reader detects: {reader: (suffix, bytes)}."""
    out: dict[str, tuple[str, bytes]] = {}
    for path, _ in discover([str(f) for f in folders if f.is_dir()]):
        try:
            container = sniff_container(path, 64 << 20)
            rec = next(
                (r for r in iter_records(path, container, 64 << 20) if r.error is None), None
            )
        except Exception:  # noqa: BLE001 - an unreadable file has no sample
            continue
        if rec is None:
            continue
        reader = detect(rec.value, path)
        if reader is None or reader.name in out:
            continue
        if reader.whole_file:
            data = Path(path).read_bytes()
            if path.endswith(".gz"):
                data = gzip.decompress(data)
            if len(data) > 2 << 20:
                continue
            out[reader.name] = (Path(path.removesuffix(".gz")).suffix or ".json", data)
        else:
            out[reader.name] = (".jsonl", orjson.dumps(rec.value))
    return out


# ---- mutations: bytes -> bytes -------------------------------------------------------------


def _truncate(b: bytes, rng: random.Random) -> bytes:
    return b[: rng.randrange(len(b) + 1)]


def _bitflip(b: bytes, rng: random.Random) -> bytes:
    if not b:
        return b
    i = rng.randrange(len(b))
    return b[:i] + bytes([b[i] ^ (1 << rng.randrange(8))]) + b[i + 1 :]


WRONG = [0, -1, 2**80, 1.5, float("inf"), True, None, "", "x", [], {}, [None], {"": None}]


def _paths(v: object, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, (*path, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += _paths(x, (*path, i))
    return out


def _set(v: object, path: tuple, new: object) -> object:
    if not path:
        return new
    v[path[0]] = _set(v[path[0]], path[1:], new)  # type: ignore[index]
    return v


def _parse(b: bytes) -> object | None:
    try:
        return orjson.loads(b)
    except orjson.JSONDecodeError:
        return None


def _dump(v: object) -> bytes:
    return orjson.dumps(v, default=str, option=orjson.OPT_SERIALIZE_NUMPY)


def _retype(b: bytes, rng: random.Random) -> bytes:
    v = _parse(b)
    if v is None:
        return b
    path = rng.choice(_paths(v))
    new = rng.choice(WRONG)
    if isinstance(new, int) and abs(new) > 2**63:
        # orjson refuses big ints: splice the literal in by hand
        marker = "__BIG__"
        return _dump(_set(v, path, marker)).replace(f'"{marker}"'.encode(), str(new).encode())
    if new == float("inf"):
        return _dump(_set(v, path, "__INF__")).replace(b'"__INF__"', b"Infinity")
    return _dump(_set(v, path, new))


def _deep(b: bytes, rng: random.Random) -> bytes:
    n = rng.choice([100, 1_000, 10_000, 100_000])
    v = _parse(b)
    if v is None or not isinstance(v, dict) or not v:
        return b"[" * n + b + b"]" * n
    key = rng.choice(sorted(v))
    marker = "__DEEP__"
    v[key] = marker
    return _dump(v).replace(f'"{marker}"'.encode(), b"[" * n + b"{}" + b"]" * n)


def _huge_string(b: bytes, rng: random.Random) -> bytes:
    v = _parse(b)
    size = rng.choice([1 << 16, 1 << 20, 3 << 20])
    if v is None:
        return b + b"x" * size
    strings = [p for p in _paths(v) if isinstance(_get(v, p), str)] or [()]
    return _dump(_set(v, rng.choice(strings), "y" * size))


def _get(v: object, path: tuple) -> object:
    for k in path:
        v = v[k]  # type: ignore[index]
    return v


def _invalid_utf8(b: bytes, rng: random.Random) -> bytes:
    i = rng.randrange(len(b) + 1)
    return b[:i] + rng.choice([b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]) + b[i:]


def _nul(b: bytes, rng: random.Random) -> bytes:
    v = _parse(b)
    if v is not None and rng.random() < 0.5:
        strings = [p for p in _paths(v) if isinstance(_get(v, p), str)]
        if strings:
            p = rng.choice(strings)
            return _dump(_set(v, p, _get(v, p) + "\x00tail\u0000"))
    i = rng.randrange(len(b) + 1)
    return b[:i] + b"\x00" * rng.randint(1, 8) + b[i:]


MUTATIONS = {
    "truncate": _truncate,
    "bitflip": _bitflip,
    "retype": _retype,
    "deep": _deep,
    "huge_string": _huge_string,
    "invalid_utf8": _invalid_utf8,
    "nul": _nul,
}


def mutate(data: bytes, ops: list[str], seed: int) -> bytes:
    rng = random.Random(seed)
    for op in ops:
        try:
            data = MUTATIONS[op](data, rng)
        except (TypeError, ValueError, RecursionError):  # too deep to re-serialize: wrap bytes
            data = b"[" * 1000 + data + b"]" * 1000
    return data


# ---- containers: compressed, corrupt, special ------------------------------------------------

COMPRESSED = (".gz", ".zst", ".bz2", ".xz")


def compress(payload: bytes, suffix: str) -> bytes:
    """``payload`` in the container its suffix names (none for plain suffixes)."""
    if suffix.endswith(".gz"):
        return gzip.compress(payload, mtime=0)
    if suffix.endswith(".zst"):
        import zstandard

        return zstandard.ZstdCompressor().compress(payload)
    if suffix.endswith(".bz2"):
        import bz2

        return bz2.compress(payload)
    if suffix.endswith(".xz"):
        import lzma

        return lzma.compress(payload)
    return payload


def corrupt_container(data: bytes, how: str, rng: random.Random) -> bytes:
    """A compressed file broken the ways real ones are: cut short, bit-flipped, or not
    compressed at all under a compressed name."""
    if how == "truncate":
        return data[: rng.randrange(max(1, len(data)))]
    if how == "bitflip":
        return _bitflip(data, rng)
    return b"this is not a compressed stream\n" + data[:16]


def check_corrupt_container(folder: Path, payload: bytes, suffix: str, how: str, seed: int):
    """Ingest a corrupt container, then a good file after it: both accounted for."""
    bad = folder / "in" / f"a-bad{suffix}"
    good = folder / "in" / "z-good.jsonl"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_bytes(corrupt_container(compress(payload, suffix), how, random.Random(seed)))
    good.write_bytes(b'{"question": "1+1?", "answer": "2"}\n')
    return check_files(folder, 2)


def check_special_files(folder: Path, suffixes: tuple[str, ...]) -> list[FileReport]:
    """A FIFO and a symlink to /dev/zero under every supported suffix, beside a good file."""
    import os

    d = folder / "in"
    d.mkdir(parents=True, exist_ok=True)
    for i, suf in enumerate(suffixes):
        os.mkfifo(d / f"fifo{i}{suf}")
        os.symlink("/dev/zero", d / f"zero{i}{suf}")
    (d / "z-good.jsonl").write_bytes(b'{"question": "1+1?", "answer": "2"}\n')
    reports = check_files(folder, 2 * len(suffixes) + 1)
    refused = [r for r in reports if r.status == "refused"]
    assert len(refused) == 2 * len(suffixes), [r.status for r in reports]
    fifos = [r for r in refused if "/fifo" in r.path]
    links = [r for r in refused if "/zero" in r.path]  # a symlink out of the input, into /dev
    assert all(r.reasons == {"not_a_regular_file": 1} for r in fifos)
    assert all(r.reasons == {"outside_input": 1} for r in links)
    assert len(fifos) == len(links) == len(suffixes)
    return reports


def check_files(folder: Path, n_files: int) -> list[FileReport]:
    """Ingest ``folder/in``: every file reported, every record accounted for, in the lake too."""
    lake = Lake(str(folder / "lake"))
    result = ingest([str(folder / "in")], lake, IngestConfig(source="fuzz"))
    assert len(result.files) == n_files, [f.path for f in result.files]
    for r in result.files:
        assert r.records_read == r.accepted + r.quarantined, r
        assert sum(r.reasons.values()) == r.quarantined, r
    t = result.totals
    rows = query(lake, "SELECT count(*) n FROM quarantine")["n"][0].as_py()
    assert rows == t["quarantined"], (rows, t)
    committed = query(lake, "SELECT count(*) f, sum(records_read) n FROM ingest_log").to_pylist()
    assert committed == [{"f": n_files, "n": t["records_read"]}], (committed, t)
    good = [r for r in result.files if r.path.endswith("z-good.jsonl")]
    assert all(r.accepted == 1 for r in good)
    return result.files


# ---- the invariant ---------------------------------------------------------------------------


def check_ingest(
    folder: Path, data: bytes, suffix: str, fmt: str | None = None, name: str | None = None
) -> FileReport:
    """Ingest ``data`` as one file (named ``name``, relative path kept: some readers look at file
    names); assert nothing escaped and every record is accounted for."""
    path = folder / "in" / (name or f"input{suffix}")
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data + b"\n" if suffix.startswith(".jsonl") else data
    path.write_bytes(compress(payload, suffix))
    lake = Lake(str(folder / "lake"))
    result = ingest([str(path)], lake, IngestConfig(format=fmt, source="fuzz"))
    (r,) = result.files
    assert r.records_read == r.accepted + r.quarantined, r
    assert sum(r.reasons.values()) == r.quarantined, r
    rows = query(lake, "SELECT count(*) n FROM quarantine")["n"][0].as_py()
    assert rows == r.quarantined, (rows, r)
    committed = query(lake, "SELECT sum(records_read) n FROM ingest_log")["n"][0].as_py()
    assert committed == r.records_read, (committed, r)
    return r


def snapshot(lake: Path) -> dict[str, str]:
    """Every table part and dataset file by content; signature parts by their rows (their
    partitioning follows the work a run had left, their content does not). Temp files skipped."""
    out = {}
    for p in sorted(lake.rglob("*")):
        rel = p.relative_to(lake).as_posix()
        if not p.is_file() or not rel.startswith(("tables/", "datasets/")) or "/." in rel:
            continue
        if rel.startswith("tables/minhash_signatures/"):
            continue
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    sigs = lake / "tables/minhash_signatures"
    if sigs.exists():
        rows = sorted(
            (r["scope"], r["item_id"], r["signature"])
            for f in sigs.glob("[!.]*.parquet")
            for r in pq.read_table(f).to_pylist()
        )
        out["minhash_signatures rows"] = hashlib.sha256(repr(rows).encode()).hexdigest()
    return out


# ---- processes -------------------------------------------------------------------------------


def processes() -> list[dict]:
    """Every live process (zombies excluded): pid, ppid, session id, owner uid and argv."""
    import os

    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
            uid = os.stat(f"/proc/{d}").st_uid
        except OSError:
            continue
        if stat[0] in ("Z", "X"):
            continue
        argv = [a.decode(errors="replace") for a in argv if a]
        out.append(
            {"pid": int(d), "ppid": int(stat[1]), "sid": int(stat[3]), "uid": uid, "argv": argv}
        )
    return out


def is_bwrap(p: dict) -> bool:
    return bool(p["argv"]) and p["argv"][0].rsplit("/", 1)[-1] == "bwrap"


def prefect_servers_of(parent: int, procs: list[dict] | None = None) -> list[int]:
    """Prefect's temporary server started by ``parent`` (its watchdog names the parent)."""
    return [
        p["pid"]
        for p in (processes() if procs is None else procs)
        if "prefect.server.api.server:create_app" in p["argv"] and str(parent) in p["argv"]
    ]


def descendants_of(pid: int, procs: list[dict]) -> list[dict]:
    children: dict[int, list[dict]] = {}
    for p in procs:
        children.setdefault(p["ppid"], []).append(p)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c["pid"])
    return out


def not_started_elsewhere(found: list[dict], procs: list[dict], inside) -> list[dict]:
    """``found`` less what another program on the host runs (another pytest-xdist worker, a
    user's mission, a benchmark): processes whose nearest ancestor outside the sandbox
    (``inside(p)`` false) is alive and neither this test process, its descendants nor its
    ancestors. What escaped a sandbox of ours stays in: the kernel reparents it to init or a
    subreaper, both our ancestors."""
    import os

    by_pid = {p["pid"]: p for p in procs}
    ours = {os.getpid()} | {d["pid"] for d in descendants_of(os.getpid(), procs)}
    pid = os.getpid()
    while pid in by_pid and pid not in (0, 1):
        pid = by_pid[pid]["ppid"]
        ours.add(pid)
    kept = []
    for p in found:
        up = by_pid.get(p["ppid"])
        while up is not None and inside(up):
            up = by_pid.get(up["ppid"])
        if up is None or up["pid"] in ours:
            kept.append(p)
    return kept


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, seconds: float, log: Path | None = None) -> None:
    """Until ``url`` answers; fails with the end of ``log`` when ``proc`` exits or time is up."""
    import httpx

    def tail() -> str:
        return f":\n{log.read_text(errors='replace')[-3000:]}" if log and log.exists() else ""

    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {proc.returncode}{tail()}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not come up in {seconds} s{tail()}")


def stop_group(proc: subprocess.Popen, seconds: float = 20) -> None:
    """SIGTERM to the process group ``proc`` leads (started with ``start_new_session``), then
    SIGKILL after ``seconds``."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

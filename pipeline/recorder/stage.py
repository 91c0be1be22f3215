"""The commit: the log's finished episodes into the lake, as the ``recorded`` source.

1. Read every complete call in the log (torn tails of dead writers repaired and counted).
2. Group the calls not committed yet into episodes (``episodes.py``).
3. Write the closed episodes as one episode file, ``ROOT/recorder/episodes/<time>-<hash>.jsonl``
   (atomic), and its manifest (episode and request ids) beside it.
4. Ingest that file like any other input (``recorded`` reader): one lake part per file, keyed by
   its content hash, so a rerun after a crash anywhere re-ingests nothing twice.
5. Move log segments whose calls are all committed to ``<instance>/committed/``.

Open episodes stay in the log for a later commit. Every call read is in exactly one of:
committed now, committed earlier, or an open episode.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import orjson

from pipeline.ingest.stage import FileReport, IngestConfig, Registry, ingest_file
from pipeline.lake import Lake
from pipeline.recorder.config import CommitConfig, wal_dir
from pipeline.recorder.episodes import group
from pipeline.recorder.wal import DONE, read_log

EPISODES = ("recorder", "episodes")


@dataclass
class CommitResult:
    calls_read: int = 0
    calls_committed: int = 0  # by this commit
    calls_committed_before: int = 0  # by earlier commits, still in the log
    calls_open: int = 0  # in episodes still waiting for their final answer
    episodes_committed: int = 0
    episodes_open: int = 0
    closed_by: Counter = field(default_factory=Counter)
    torn_bytes: int = 0
    corrupt_lines: int = 0
    episode_file: str | None = None
    ingest: dict | None = None
    recovered_files: list[str] = field(default_factory=list)
    archived_segments: int = 0
    note: str = ""
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["closed_by"] = dict(self.closed_by)
        return d


def _manifests(lake: Lake) -> dict[str, dict]:
    """Episode file path -> its manifest; a file whose manifest was lost in a crash gets one
    rebuilt from its lines."""
    folder = lake.path(*EPISODES)
    if not lake.fs.exists(folder):
        return {}
    out = {}
    names = {p.rsplit("/", 1)[-1] for p in lake.fs.ls(folder, detail=False)}
    for name in sorted(n for n in names if n.endswith(".jsonl")):
        path = f"{folder}/{name}"
        man = f"{path[:-6]}.json"
        if man.rsplit("/", 1)[-1] in names:
            with lake.fs.open(man, "rb") as f:
                out[path] = orjson.loads(f.read())
            continue
        with lake.fs.open(path, "rb") as f:
            rows = [orjson.loads(line) for line in f.read().splitlines() if line.strip()]
        out[path] = _manifest(rows)
        lake.write_bytes(man, orjson.dumps(out[path]))
    return out


def _manifest(rows: list[dict]) -> dict:
    return {
        "episodes": [r["episode_id"] for r in rows],
        "request_ids": sorted({rid for r in rows for rid in r["request_ids"]}),
    }


def _uri(lake: Lake, path: str) -> str:
    return path if lake.is_local else lake.url(path)


def _ingest(lake: Lake, path: str, config: CommitConfig, registry: Registry) -> FileReport:
    return ingest_file(
        _uri(lake, path),
        lake,
        IngestConfig(source=config.source, format="recorded"),
        registry,
        default_source=config.source,
    )


def commit(
    lake: Lake, config: CommitConfig | None = None, wal: str | None = None, now: float | None = None
) -> CommitResult:
    """Commit the log's finished episodes; see the module docstring. Idempotent."""
    config = config or CommitConfig()
    folder = wal_dir(lake, wal or config.wal)
    res = CommitResult()
    log = read_log(folder)
    res.calls_read, res.torn_bytes, res.corrupt_lines = (
        len(log.records),
        log.torn_bytes,
        log.corrupt_lines,
    )

    manifests = _manifests(lake)
    registry = Registry(lake)
    for path in manifests:  # an episode file written before a crash, not yet in the lake
        if _uri(lake, path) not in registry.by_uri:
            _ingest(lake, path, config, registry)
            res.recovered_files.append(path)
    done = {rid for m in manifests.values() for rid in m["request_ids"]}
    todo = [r for r in log.records if r.get("request_id") not in done]
    res.calls_committed_before = res.calls_read - len(todo)

    episodes = group(
        todo, now if now is not None else time.time(), config.idle_seconds, config.flush
    )
    # the branches of an n > 1 call share their earlier calls: they are committed together,
    # once none is open, so a committed call never belongs to an episode still growing
    parent = {e.episode_id: e.branch_of for e in episodes}

    def family(eid: str) -> str:
        while parent.get(eid):
            eid = parent[eid]
        return eid

    # an answer still being handed to its client (the delivery line is not written yet) keeps
    # its episode open: it may turn out unseen
    in_flight = {r["request_id"] for r in todo if r.get("delivery") == "in_flight"}
    growing = {
        family(e.episode_id)
        for e in episodes
        if not e.closed_by or in_flight.intersection(e.request_ids)
    }
    closed = [e for e in episodes if e.closed_by and family(e.episode_id) not in growing]
    res.episodes_open = len(episodes) - len(closed)
    waiting = {rid for e in episodes if e not in closed for rid in e.request_ids}
    res.calls_open = len(waiting)
    if closed:
        rows = [e.row() for e in closed]
        data = b"".join(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in rows)
        stamp = datetime.fromtimestamp(min(e.started_at for e in closed), UTC).strftime(
            "%Y%m%dT%H%M%S"
        )
        path = lake.path(*EPISODES, f"{stamp}-{hashlib.sha256(data).hexdigest()[:16]}.jsonl")
        lake.write_bytes(path, data)
        man = _manifest(rows)
        lake.write_bytes(f"{path[:-6]}.json", orjson.dumps(man))
        report = _ingest(lake, path, config, registry)
        res.episode_file, res.ingest = path, asdict(report)
        res.ingest["rows"], res.ingest["reasons"] = dict(report.rows), dict(report.reasons)
        res.episodes_committed = len(closed)
        res.calls_committed = len(set(man["request_ids"]) - waiting)
        res.closed_by = Counter(e.closed_by for e in closed)
        same = Counter(e.opening for e in closed if e.session is None and not e.branch_of)
        shared = sum(n for n in same.values() if n > 1)
        if shared:
            res.warnings.append(
                f"{shared} episodes without X-Flow-Session open with the same request as another: "
                "kept apart as separate agents (their tool-call ids and seeds tell their calls "
                "apart). Without a session a client that re-sends a request after an answer it "
                "received cannot be told from another agent asking the same; send "
                "X-Flow-Session (one per agent run) where that matters (docs/howto-record.md)"
            )
        done |= set(man["request_ids"])
    elif not res.calls_read:
        res.note = f"nothing to commit: the log {folder} holds no calls"
    elif not todo:
        res.note = "nothing to commit: every call in the log is in the lake already"
    else:
        res.note = (
            f"nothing to commit yet: {res.episodes_open} episode(s) wait for a final answer "
            f"(committed after {config.idle_seconds:g} s without a call, or now with --flush)"
        )
    if config.archive:
        res.archived_segments = _archive(log, done)
    return res


def _archive(log, done: set[str]) -> int:
    """Move sealed segments whose calls are all in the lake out of the way of later commits."""
    per_seg: dict[str, list[str]] = {}
    for rid, seg in [*log.segment_of.items(), *log.outcome_segment_of.items()]:
        per_seg.setdefault(seg, []).append(rid)
    moved = 0
    for seg in log.sealed:
        if all(rid in done for rid in per_seg.get(seg, [])):
            target = os.path.join(os.path.dirname(seg), DONE)
            os.makedirs(target, exist_ok=True)
            os.replace(seg, os.path.join(target, os.path.basename(seg)))
            moved += 1
    return moved

"""The lake: idempotent re-ingest, changed files supersede, byte-identical outputs, memory:// lakes,
atomic parts, and reader plugins through the entry-point group."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import fsspec

from pipeline.ingest import IngestConfig, ingest
from pipeline.ingest import registry as reg
from pipeline.lake import Lake
from pipeline.lake.query import query
from tests.conftest import PINNED, write

CHAT = {"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]}


def lake_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.parquet"))}


def test_reingest_unchanged_adds_nothing_and_is_byte_identical(tmp_path):
    src = write(
        tmp_path / "in/a.jsonl", "\n".join(json.dumps(CHAT | {"id": i}) for i in range(5)) + "\n"
    )
    lake = Lake(str(tmp_path / "lake"))
    r1 = ingest([str(src)], lake, IngestConfig(now=PINNED))
    before = lake_bytes(tmp_path / "lake")
    r2 = ingest([str(src)], lake, IngestConfig(now=PINNED))
    assert r1.files[0].status == "ingested" and r2.files[0].status == "unchanged"
    assert lake_bytes(tmp_path / "lake") == before
    assert query(lake, "SELECT count(*) n FROM trajectories").to_pylist()[0]["n"] == 5
    # A second lake from the same input is byte-identical (deterministic ids, pinned time).
    other = Lake(str(tmp_path / "lake2"))
    ingest([str(src)], other, IngestConfig(now=PINNED))
    assert lake_bytes(tmp_path / "lake2") == before


def test_changed_file_supersedes_its_earlier_rows(tmp_path):
    src = tmp_path / "in/a.jsonl"
    write(src, json.dumps(CHAT) + "\n")
    lake = Lake(str(tmp_path / "lake"))
    ingest([str(src)], lake)
    write(src, json.dumps(CHAT) + "\n" + json.dumps(CHAT | {"model": "m2"}) + "\n")
    r = ingest([str(src)], lake)
    assert r.files[0].status == "ingested" and len(r.files[0].superseded) == 1
    assert query(lake, "SELECT count(*) n FROM trajectories").to_pylist()[0]["n"] == 2
    assert query(lake, "SELECT count(*) n FROM ingest_log").to_pylist()[0]["n"] == 1
    assert len(lake.parts("trajectories")) == 1


def test_same_content_at_two_paths_is_ingested_once(tmp_path):
    a = write(tmp_path / "in/a.jsonl", json.dumps(CHAT) + "\n")
    b = write(tmp_path / "in/b.jsonl", json.dumps(CHAT) + "\n")
    lake = Lake(str(tmp_path / "lake"))
    r = ingest([str(a), str(b)], lake)
    assert [f.status for f in r.files] == [
        "ingested",
        "unchanged",
    ] and "already ingested" in r.files[1].note


def test_memory_lake_and_memory_inputs():
    fs = fsspec.filesystem("memory")
    name = uuid.uuid4().hex
    with fs.open(f"/{name}/in/a.jsonl", "wb") as f:
        f.write((json.dumps(CHAT) + "\n{broken\n").encode())
    lake = Lake(f"memory://{name}/lake")
    r = ingest([f"memory://{name}/in"], lake)
    assert (r.files[0].accepted, r.files[0].quarantined) == (1, 1)
    assert query(lake, "SELECT count(*) n FROM trajectories").to_pylist()[0]["n"] == 1
    assert query(lake, "SELECT reason FROM quarantine").to_pylist() == [{"reason": "invalid_json"}]


def test_uncommitted_parts_are_invisible_and_temp_files_cleaned(tmp_path):
    src = write(tmp_path / "in/a.jsonl", json.dumps(CHAT) + "\n")
    lake = Lake(str(tmp_path / "lake"))
    ingest([str(src)], lake)
    # Simulate a crash after data parts were written but before the log entry (commit).
    log_part = lake.parts("ingest_log")[0]
    lake.delete_part("ingest_log", log_part)
    (tmp_path / "lake/tables/trajectories/.tmp-dead.parquet").write_bytes(b"partial")
    assert query(lake, "SELECT count(*) n FROM trajectories").to_pylist()[0]["n"] == 0
    r = ingest([str(src)], lake)
    assert r.files[0].status == "ingested"
    assert query(lake, "SELECT count(*) n FROM trajectories").to_pylist()[0]["n"] == 1
    assert not list((tmp_path / "lake").rglob(".tmp-*"))


PLUGIN = """
from pipeline.ingest.readers.base import Reader
from pipeline.ingest.records import TrajectoryRec

class CsvLikeReader(Reader):
    name = "kv_chat"
    description = "test plugin"

    def sniff(self, sample, path):
        return isinstance(sample, dict) and "q" in sample and "a" in sample

    def parse(self, value, ctx):
        yield TrajectoryRec(messages=[{"role": "user", "content": value["q"]}, {"role": "assistant", "content": value["a"]}])
"""


def test_reader_plugin_through_entry_points(tmp_path, monkeypatch):
    site = tmp_path / "site"
    write(site / "kv_plugin.py", PLUGIN)
    write(
        site / "kv_plugin-0.1.dist-info/METADATA",
        "Metadata-Version: 2.1\nName: kv-plugin\nVersion: 0.1\n",
    )
    write(
        site / "kv_plugin-0.1.dist-info/entry_points.txt",
        "[flow.readers]\nkv_chat = kv_plugin:CsvLikeReader\n",
    )
    monkeypatch.syspath_prepend(str(site))
    reg.readers.cache_clear()
    try:
        assert reg.readers()[0].name == "kv_chat"
        src = write(tmp_path / "in/x.jsonl", json.dumps({"q": "2+2?", "a": "4"}) + "\n")
        lake = Lake(str(tmp_path / "lake"))
        r = ingest([str(src)], lake)
        assert r.files[0].reader == "kv_chat" and r.files[0].accepted == 1
    finally:
        sys.modules.pop("kv_plugin", None)
        reg.readers.cache_clear()

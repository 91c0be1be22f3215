"""`flow ingest`'s front door, probed with hostile inputs: nothing outside the given folder is
read, one odd file never stops a run, a file's size on disk bounds neither the memory nor the
rows it costs unnoticed, and what ingest passes over is said."""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from flows.cli import app
from pipeline.ingest import IngestConfig, ingest
from pipeline.lake import Lake
from pipeline.lake.query import query
from tests.test_boundaries import run_measured

runner = CliRunner()
CHAT = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}


def _lake_text(root: Path) -> bytes:
    """Every byte the lake holds, decompressed (Parquet values are compressed on disk)."""
    out = b""
    for f in root.rglob("*.parquet"):
        out += pa.ipc.serialize_pandas(pq.read_table(f).to_pandas()).to_pybytes()
    return out


def test_symlinks_out_of_the_input_are_refused_unread(tmp_path, monkeypatch):
    secret = "flow-secret-" + os.urandom(8).hex()
    monkeypatch.setenv("FLOW_DOOR_SECRET", secret)
    outside = tmp_path / "home" / "notes.jsonl"
    outside.parent.mkdir()
    outside.write_text(json.dumps({"messages": [{"role": "user", "content": secret}]}) + "\n")
    inp = tmp_path / "in" / "src"
    inp.mkdir(parents=True)
    (inp / "ok.jsonl").write_text(json.dumps(CHAT) + "\n")
    (inp / "env.jsonl").symlink_to("/proc/self/environ")
    (inp / "cmdline.jsonl").symlink_to("/proc/1/cmdline")
    (inp / "mem.jsonl").symlink_to("/proc/self/mem")
    (inp / "notes.jsonl").symlink_to(outside)
    (inp / "inside.jsonl").symlink_to(inp / "ok.jsonl")  # inside the input: followed
    lake = tmp_path / "lake"
    res = ingest([str(tmp_path / "in")], Lake(str(lake)))
    by = {Path(f.path).name: f for f in res.files}
    for name in ("env.jsonl", "cmdline.jsonl", "mem.jsonl", "notes.jsonl"):
        assert by[name].status == "refused" and by[name].reasons == {"outside_input": 1}, by[name]
    assert {by["ok.jsonl"].status, by["inside.jsonl"].status} == {"ingested", "unchanged"}
    assert secret.encode() not in _lake_text(lake)
    rows = query(Lake(str(lake)), "SELECT detail, raw FROM quarantine").to_pylist()
    assert all(r["raw"] == "" for r in rows) and any("/environ" in r["detail"] for r in rows)


def test_a_pseudo_file_given_directly_is_refused(tmp_path):
    res = ingest(["/proc/self/cmdline"], Lake(str(tmp_path / "lake")))
    (f,) = res.files
    assert f.status == "refused" and f.reasons == {"outside_input": 1}


def test_a_file_name_that_is_not_utf8_is_ingested_and_named_in_escapes(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    bad = os.fsdecode(b"caf\xe9-\xff.jsonl")
    (inp / bad).write_text(json.dumps(CHAT) + "\n")
    (inp / "good.jsonl").write_text(json.dumps({**CHAT, "id": 2}) + "\n")
    lake = Lake(str(tmp_path / "lake"))
    res = ingest([str(inp)], lake)
    assert [f.status for f in res.files] == ["ingested", "ingested"]
    uris = {r["source_uri"] for r in query(lake, "SELECT source_uri FROM trajectories").to_pylist()}
    assert any(u.endswith("caf\\xe9-\\xff.jsonl") for u in uris), uris
    again = ingest([str(inp)], lake)  # idempotent under the escaped name too
    assert [f.status for f in again.files] == ["unchanged", "unchanged"]


def test_parquet_that_decompresses_far_past_its_size_stays_bounded(tmp_path):
    """A few KB on disk: 300 rows that each decode to 8 MB (one dictionary entry), and one row
    of 100 MB. Rows past max_record_bytes are quarantined from their Arrow size; peak memory
    stays under 1 GB (the old reader decoded 1,024 rows at once: 3.9 GB)."""
    path = tmp_path / "in" / "bomb.parquet"
    path.parent.mkdir()
    big = "x" * (8 << 20)
    table = pa.table({"messages": [json.dumps(CHAT["messages"])] * 300, "pad": [big] * 300})
    pq.write_table(table, path, compression="zstd", use_dictionary=True)
    huge = tmp_path / "in" / "huge.parquet"
    pq.write_table(pa.table({"prompt": ["y" * (100 << 20)]}), huge, compression="zstd")
    assert path.stat().st_size < 100_000 and huge.stat().st_size < 100_000
    code = (
        "import sys; sys.path.insert(0, '.')\n"
        "from pipeline.ingest import IngestConfig, ingest\n"
        "from pipeline.lake import Lake\n"
        f"res = ingest([{str(path.parent)!r}], Lake({str(tmp_path / 'lake')!r}),"
        " IngestConfig(max_record_bytes=4 << 20))\n"
        "for f in res.files: print(f.path, f.records_read, f.accepted, dict(f.reasons), file=sys.stderr)\n"
    )
    status, errs, peak = run_measured(code, tmp_path)
    assert status == 0, errs
    assert "bomb.parquet 300 0 {'record_too_large': 300}" in errs, errs
    assert "huge.parquet 1 0 {'record_too_large': 1}" in errs, errs
    assert peak < 1024, f"peak RSS {peak} MB"


def test_archives_and_other_skipped_files_are_reported(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.jsonl").write_text(json.dumps(CHAT) + "\n")
    (inp / "traces.tar.gz").write_bytes(gzip.compress(b"not read"))
    (inp / "more.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    res = ingest([str(inp)], Lake(str(tmp_path / "lake")))
    assert sorted(Path(p).name for p in res.skipped) == ["more.zip", "traces.tar.gz"]
    assert res.totals["files_skipped"] == 2
    out = runner.invoke(app, ["ingest", str(inp), "--lake", str(tmp_path / "lake2")])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "2 file(s) skipped" in text and ".tar.gz archive 1" in text and ".zip archive 1" in text


def test_subfolders_can_be_excluded_and_are_reported_as_skipped(tmp_path, shared):
    """ToRA's repository holds its GSM8K test outputs beside its training examples: `--exclude
    gsm8k` leaves that folder out (any folder named so, at any depth), counted as skipped; the
    source is the first folder under the given one."""
    res = ingest(
        [str(shared / "tora")], Lake(str(tmp_path / "lake")), IngestConfig(exclude=("gsm8k",))
    )
    assert [Path(f.path).name for f in res.files] == ["examples.jsonl"]
    assert {f.source for f in res.files} == {"data"}
    assert sum("/gsm8k/" in p for p in res.skipped) == 4  # 2 outputs + their 2 .metrics
    out = runner.invoke(
        app,
        ["ingest", str(shared / "tora"), "--lake", str(tmp_path / "lake2"),
         "--exclude", "*/gsm8k/*", "--exclude", "*.metrics"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    got = query(Lake(str(tmp_path / "lake2")), "SELECT DISTINCT source_uri FROM trajectories")
    assert [Path(u).name for u in got.column("source_uri").to_pylist()] == ["examples.jsonl"]
    assert "4 file(s) skipped" in " ".join(out.output.split())


def test_a_tiny_gzip_of_millions_of_bad_lines_is_capped_with_a_reason(tmp_path):
    src = tmp_path / "in" / "bomb.jsonl.gz"
    src.parent.mkdir()
    src.write_bytes(gzip.compress(b"x\n" * 2_000_000, 9))
    assert src.stat().st_size < 10_000
    cfg = IngestConfig(max_records_per_file=1000)
    (f,) = ingest([str(src)], Lake(str(tmp_path / "lake")), cfg).files
    assert f.records_read == f.accepted + f.quarantined == 1001
    assert f.reasons == {"invalid_json": 1000, "file_cap_reached": 1}
    (t,) = ingest(
        [str(src)], Lake(str(tmp_path / "lake2")), IngestConfig(max_seconds_per_file=0.2)
    ).files
    assert t.reasons["file_cap_reached"] == 1 and t.records_read < 2_000_000
    res = runner.invoke(
        app,
        ["ingest", str(src), "--lake", str(tmp_path / "lake3"), "--max-records-per-file", "10"],
    )
    assert res.exit_code == 0 and "file_cap_reached=1" in res.output, res.output


def test_caps_must_be_positive():
    import pytest

    with pytest.raises(ValueError, match="max_records_per_file must be positive"):
        IngestConfig(max_records_per_file=0)
    assert sys.maxsize  # (a cap of None means no cap)

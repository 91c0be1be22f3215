"""Property-based fuzzing of every reader and of validation (hypothesis).

Whatever the bytes (random, or a real record of each format truncated, bit-flipped, retyped,
nested 10,000 deep, blown up to megabytes, given invalid UTF-8 or NUL bytes), ingest ends with
accepted rows or quarantine rows with a reason, never an exception out of the stage, and the
counts add up: records read = accepted + quarantined, and the lake holds exactly that many
quarantine rows. A bounded number of examples runs in CI; `bench/fuzz.py` runs the long seeded
version over every real shared file.
"""

from __future__ import annotations

import json
import uuid

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import PINNED, require_shared
from tests.harness import (
    COMPRESSED,
    MUTATIONS,
    check_corrupt_container,
    check_ingest,
    check_special_files,
    mutate,
    sample_records,
)

FUZZ = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,  # CI is reproducible; bench/fuzz.py explores with seeds
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> dict[str, tuple[str, bytes]]:
    """One real record per reader: (container suffix, bytes)."""
    from pipeline.demo import write_demo

    demo = tmp_path_factory.mktemp("fuzz-demo")
    write_demo(str(demo))
    out = sample_records(require_shared(), demo)
    # no public files of these two in ../shared/data: the spec examples of test_spec_formats
    from tests.test_spec_formats import RESPONSES_RECORD, otel_record

    out.setdefault("openai_responses", (".jsonl", orjson.dumps(RESPONSES_RECORD)))
    out.setdefault("otel_genai", (".jsonl", orjson.dumps(otel_record())))
    out.setdefault("recorded", (".jsonl", orjson.dumps(recorded_episode())))
    return out


def recorded_episode() -> dict:
    """A recorder episode as `flow record-commit` writes it: a tool call, its result, the answer
    (log lines as the proxy writes them, grouped by the recorder's own code)."""
    from pipeline.recorder.episodes import group
    from tests.test_recorder import _call, _tool_call

    q = [{"role": "user", "content": "What is 12 times 7?"}]
    a1 = {"role": "assistant", "content": "", "tool_calls": [_tool_call("c1", "print(12 * 7)")]}
    r1 = {"role": "tool", "tool_call_id": "c1", "content": "84"}
    fin = {"role": "assistant", "content": "The answer is \\boxed{84}."}
    (ep,) = group([_call("01", 1.0, q, a1), _call("02", 2.0, q + [a1, r1], fin)], now=3.0)
    return ep.row()


def test_every_reader_has_a_real_sample(samples):
    from pipeline.ingest.registry import readers

    names = {r.name for r in readers()}
    assert set(samples) == names, sorted(names - set(samples))


@FUZZ
@given(
    data=st.binary(max_size=4096),
    suffix=st.sampled_from([".jsonl", ".json", ".jsonl.gz", ".json.zst", ".traj.xz"]),
)
def test_any_bytes_are_accepted_or_quarantined(tmp_path, data, suffix):
    check_ingest(tmp_path / uuid.uuid4().hex, data, suffix)


def _reader_names() -> list[str]:
    from pipeline.ingest.registry import readers

    return [r.name for r in readers()]


@pytest.mark.parametrize("reader", _reader_names())
def test_mutated_real_records_of_every_format(samples, tmp_path, reader):
    suffix, raw = samples[reader]

    @FUZZ
    @given(
        ops=st.lists(st.sampled_from(sorted(MUTATIONS)), min_size=1, max_size=3),
        seed=st.integers(0, 2**32 - 1),
    )
    def run(ops, seed):
        data = mutate(raw, ops, seed)
        check_ingest(tmp_path / uuid.uuid4().hex, data, suffix, fmt=reader)  # --format READER
        check_ingest(tmp_path / uuid.uuid4().hex, data, suffix)  # auto-detection

    run()


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(seeds=st.lists(st.integers(0, 2**32 - 1), min_size=20, max_size=20))
def test_validation_of_mutated_records_never_raises_and_counts_add_up(
    samples, tmp_path_factory, seeds
):
    from pipeline.ingest import IngestConfig, ingest
    from pipeline.lake import Lake
    from pipeline.lake.query import query
    from pipeline.validate import ValidateConfig, validate

    folder = tmp_path_factory.mktemp("validate-fuzz")
    _, raw = samples["openai_chat"]
    lines = []
    for i, seed in enumerate(seeds):
        ops = [sorted(MUTATIONS)[seed % len(MUTATIONS)], "retype"]
        lines.append(mutate(raw, ops, seed).replace(b"\n", b" ") if i % 2 else raw)
    (folder / "in.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    lake = Lake(str(folder / "lake"))
    ingest([str(folder / "in.jsonl")], lake, IngestConfig(now=PINNED))
    result = validate(lake, ValidateConfig(data_docs=False, now=PINNED))
    for table, c in result.tables.items():
        assert c["rows"] == c["passed"] + c["quarantined"], table
        data_rows = query(lake, f"SELECT count(*) n FROM {table}")["n"][0].as_py()
        assert c["rows"] == data_rows
    quarantined = query(lake, "SELECT count(*) n FROM quarantine WHERE stage = 'validate'")
    assert quarantined["n"][0].as_py() == sum(c["quarantined"] for c in result.tables.values())


def test_a_100_mb_record_is_quarantined_with_its_size_and_the_next_one_still_read(tmp_path):
    from pipeline.ingest import IngestConfig, ingest
    from pipeline.lake import Lake
    from pipeline.lake.query import query

    path = tmp_path / "huge.jsonl"
    ok = json.dumps(
        {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
    )
    with open(path, "wb") as f:
        f.write(ok.encode() + b"\n")
        f.write(b'{"messages": [{"role": "user", "content": "' + b"x" * (100 << 20) + b'"}]}\n')
        f.write(ok.replace("2+2", "3+3").encode() + b"\n")
    lake = Lake(str(tmp_path / "lake"))
    r = ingest([str(path)], lake, IngestConfig(now=PINNED)).files[0]
    assert (r.records_read, r.accepted, r.quarantined) == (3, 2, 1)
    q = query(
        lake, "SELECT reason, detail, raw_bytes, length(raw) AS kept FROM quarantine"
    ).to_pylist()[0]
    assert q["reason"] == "record_too_large" and q["raw_bytes"] > 100 << 20
    assert "max_record_bytes" in q["detail"] and q["kept"] <= 1 << 20


def test_an_array_element_nested_100k_deep_is_quarantined_without_blowing_memory(tmp_path):
    """Found by the fuzzer: ijson's path prefixes made this cost ~24 GB; now one quarantine row."""
    import resource

    from pipeline.ingest import IngestConfig, ingest
    from pipeline.lake import Lake

    ok = b'{"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]}'
    path = tmp_path / "deep.json"
    path.write_bytes(b"[" + b"[" * 100_000 + b"]" * 100_000 + b", " + ok + b"]")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = ingest([str(path)], Lake(str(tmp_path / "lake")), IngestConfig(now=PINNED)).files[0]
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert (r.records_read, r.accepted, dict(r.reasons)) == (2, 1, {"too_deep": 1})
    assert grown_mb < 200


SWE_TRAJ = orjson.dumps(
    {"trajectory": [{"action": f"ls {i}", "observation": f"file{i}.py " * 40} for i in range(40)]}
)


@pytest.mark.parametrize("how", ["truncate", "bitflip", "not_compressed"])
@pytest.mark.parametrize(
    "suffix", [f"{base}{comp}" for base in (".jsonl", ".json", ".traj") for comp in COMPRESSED]
)
def test_a_corrupt_container_is_quarantined_and_the_next_file_read(samples, tmp_path, suffix, how):
    """A .json.gz that is not gzip, a truncated .traj.json.gz, a .traj.zst that is not zstd
    (each once aborted the whole ingest): quarantined with a reason, the next file read."""
    payload = (
        SWE_TRAJ if suffix.startswith(".traj") else samples["openai_chat"][1] * 3
    )  # a record of a real format, made long enough that a cut falls inside the stream
    for seed in range(3):
        check_corrupt_container(tmp_path / f"{how}{seed}", payload, suffix, how, seed)


def test_fifos_and_device_symlinks_are_refused_without_opening_them(tmp_path):
    """A FIFO named *.jsonl and a *.jsonl symlink to /dev/zero once hung ingest for ever."""
    check_special_files(tmp_path, (".jsonl", ".json", ".jsonl.gz", ".parquet"))

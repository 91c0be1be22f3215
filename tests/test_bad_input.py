"""Nothing lost: malformed records become quarantine rows with specific reasons, counts add up,
and no reader crashes on wrong shapes."""

from __future__ import annotations

import contextlib
import gzip
import json

import pytest

from pipeline.ingest import IngestConfig, ingest
from pipeline.ingest.errors import RecordError
from pipeline.ingest.readers.base import Context
from pipeline.ingest.registry import readers
from pipeline.ingest.stage import _rows
from pipeline.lake import Lake
from pipeline.lake.query import query
from tests.conftest import PINNED, write

GOOD = {
    "messages": [
        {"role": "user", "content": "2+2?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "python", "arguments": '{"code": "print(2+2)"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        {"role": "assistant", "content": "4"},
    ]
}


def run(tmp_path, files: dict[str, bytes | str], **cfg):
    for name, data in files.items():
        write(tmp_path / "in" / name, data)
    lake = Lake(str(tmp_path / "lake"))
    result = ingest([str(tmp_path / "in")], lake, IngestConfig(now=PINNED, **cfg))
    quarantine = query(
        lake, "SELECT * FROM quarantine ORDER BY source_uri, source_index"
    ).to_pylist()
    return lake, result, quarantine


def test_jsonl_bad_lines_are_quarantined_with_reasons(tmp_path):
    lines = [
        json.dumps(GOOD).encode(),
        b'{"messages": [{"role": "user", "content": "cut',  # truncated JSON
        b'{"messages": "\xff\xfe"}',  # invalid UTF-8
        b"[1, 2, 3]",  # not an object
        b"",  # blank lines are not records
        json.dumps(
            {"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "orphan"}]}
        ).encode(),
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}],
                    },
                    {"role": "user", "content": "no result came"},
                ]
            }
        ).encode(),
        json.dumps({"messages": [{"role": "narrator", "content": "?"}]}).encode(),
        json.dumps({"messages": [{"role": "assistant", "content": "no user turn"}]}).encode(),
        json.dumps({"messages": []}).encode(),
        json.dumps(
            {"messages": [{"role": "user", "content": "x" * 5000}]}
        ).encode(),  # oversized for this config
        json.dumps(  # a result for a call this conversation never made: not re-linked to "a"
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}],
                    },
                    {"role": "tool", "tool_call_id": "b", "content": "another agent's result"},
                    {"role": "assistant", "content": "done"},
                ]
            }
        ).encode(),
    ]
    lake, result, qrows = run(
        tmp_path,
        {"chat.jsonl": b"\n".join(lines) + b"\n"},
        format="openai_chat",
        max_record_bytes=4000,
    )
    f = result.files[0]
    assert f.records_read == 11 and f.accepted == 1 and f.quarantined == 10
    by_line = {r["source_index"]: r["reason"] for r in qrows}
    assert by_line == {
        1: "invalid_json",
        2: "invalid_utf8",
        3: "not_an_object",
        5: "tool_result_without_call",
        6: "tool_call_unanswered",
        7: "unknown_role",
        8: "no_question",
        9: "empty_conversation",
        10: "record_too_large",
        11: "tool_result_mismatch",
    }
    assert qrows[0]["raw"].startswith('{"messages": [{"role": "user", "content": "cut')
    assert all(
        r["detail"] and r["source_uri"].endswith("chat.jsonl") and r["file_sha256"] == f.file_sha256
        for r in qrows
    )
    log = query(lake, "SELECT * FROM ingest_log").to_pylist()[0]
    assert (log["records_read"], log["records_accepted"], log["records_quarantined"]) == (11, 1, 10)


def test_truncated_json_array_keeps_earlier_elements(tmp_path):
    arr = json.dumps(
        [
            {"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": "a"}]}
            for i in range(3)
        ]
    )
    lake, result, qrows = run(tmp_path, {"conv.json": arr[:-40]})
    f = result.files[0]
    assert f.reader == "sharegpt" and f.accepted == 2 and f.quarantined == 1
    assert qrows[0]["reason"] == "truncated_json"
    assert f.records_read == f.accepted + f.quarantined


def test_unknown_format_is_quarantined_not_dropped(tmp_path):
    lake, result, qrows = run(tmp_path, {"weird.jsonl": '{"foo": 1}\n{"bar": 2}\n'})
    assert result.files[0].quarantined == 2 and {r["reason"] for r in qrows} == {"unknown_format"}


def test_oversized_single_document(tmp_path):
    doc = json.dumps(
        {
            "trajectory_format": "mini-swe-agent-1.1",
            "messages": [{"role": "user", "content": "x" * 10_000}],
        }
    )
    _, result, qrows = run(tmp_path, {"a.traj.json": doc}, max_record_bytes=1000)
    assert result.files[0].reasons == {"record_too_large": 1} and qrows[0]["raw_bytes"] == len(doc)


def test_corrupt_gzip_is_quarantined_not_raised(tmp_path):
    data = gzip.compress((json.dumps(GOOD) + "\n").encode() * 50, mtime=0)
    _, result, qrows = run(tmp_path, {"c.jsonl.gz": data[: len(data) // 2]})
    f = result.files[0]
    assert f.records_read == f.accepted + f.quarantined and f.quarantined >= 1
    assert qrows[-1]["reason"] == "unreadable_file"


WEIRD_VALUES = [
    None,
    0,
    "text",
    [],
    {},
    [1, {"a": None}],
    {"messages": 5},
    {"messages": [5]},
    {"messages": [{"role": None}]},
    {"messages": [{"role": "user", "content": {"nested": [1, 2]}}]},
    {"conversations": "x"},
    {"conversations": [{"from": "gpt"}]},
    {"traj": None, "task_id": 1},
    {"traj": [], "task_id": 1, "info": {"task": {"instruction": "q"}}, "reward": "high"},
    {"answer_generation": {"train_messages": [[{"role": "user"}]]}},
    {"question": None, "answer": 1},
    {"question": "q", "response": ["a"], "score": ["yes"]},
    {"id": "simple_1", "question": "q", "function": []},
    {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "t",
                                "attributes": [
                                    {
                                        "key": "gen_ai.operation.name",
                                        "value": {"stringValue": "chat"},
                                    },
                                    {
                                        "key": "gen_ai.input.messages",
                                        "value": {"stringValue": '[{"role": "user"}]'},
                                    },
                                ],
                            }
                        ]
                    }
                ]
            }
        ]
    },
    {"input": [{"type": "function_call_output", "call_id": "nope", "output": 1}]},
    {"code": [None], "pred": [], "gt": 1, "question": "q"},
]


@pytest.mark.parametrize("reader", readers(), ids=lambda r: r.name)
def test_no_reader_crashes_on_wrong_shapes(reader):
    """Every reader maps a wrong shape to a RecordError (a quarantine reason), never another exception."""
    for value in WEIRD_VALUES:
        with contextlib.suppress(RecordError):
            _rows(reader, value, Context(path="/x/y/z.jsonl", index=0))


def test_gzip_and_zstd_inputs(tmp_path):
    import zstandard

    line = (json.dumps(GOOD) + "\n").encode()
    files = {
        "a.jsonl.gz": gzip.compress(line * 3, mtime=0),
        "b.jsonl.zst": zstandard.ZstdCompressor().compress(line * 2 + b"{bad\n"),
    }
    _, result, qrows = run(tmp_path, files)
    got = {f.path.rsplit("/", 1)[-1]: (f.accepted, f.quarantined) for f in result.files}
    assert got == {"a.jsonl.gz": (3, 0), "b.jsonl.zst": (2, 1)}

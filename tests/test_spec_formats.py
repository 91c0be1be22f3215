"""Formats with no real file at hand, tested on records written from each public specification:
Hermes/Qwen <tool_call> text, Anthropic Messages, OpenAI Responses items, OpenTelemetry GenAI spans."""

from __future__ import annotations

import json

from pipeline.ingest import IngestConfig, ingest
from pipeline.lake import Lake
from pipeline.lake.query import query
from tests.conftest import PINNED, write

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def ingest_one(tmp_path, name: str, records: list[dict]):
    path = write(tmp_path / "in" / name, "\n".join(json.dumps(r) for r in records) + "\n")
    lake = Lake(str(tmp_path / "lake"))
    result = ingest([str(path)], lake, IngestConfig(now=PINNED))
    rows = query(lake, "SELECT * FROM trajectories ORDER BY source_index").to_pylist()
    return result.files[0], rows


def test_hermes_tool_call_text(tmp_path):
    rec = {
        "messages": [
            {
                "role": "system",
                "content": f"You are a function calling AI.\n<tools>\n{json.dumps({'type': 'function', 'function': WEATHER})}\n</tools>",
            },
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": '<think>Two cities, two calls.</think>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>',
            },
            {
                "role": "tool",
                "content": '<tool_response>\n{"temp": 12}\n</tool_response>\n<tool_response>\n{"temp": 19}\n</tool_response>',
            },
            {"role": "assistant", "content": "Paris 12°C, Rome 19°C."},
        ]
    }
    bad = {
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "<tool_call>{oops}</tool_call>"},
        ]
    }
    report, rows = ingest_one(tmp_path, "hermes.jsonl", [rec, bad])
    assert report.reader == "hermes" and report.reasons == {"bad_tool_call": 1}
    m = rows[0]["messages"]
    assert m[2]["reasoning"] == "Two cities, two calls." and m[2]["content"] is None
    calls = m[2]["tool_calls"]
    assert [json.loads(c["arguments"])["city"] for c in calls] == ["Paris", "Rome"]
    assert [x["tool_call_id"] for x in m[3:5]] == [c["id"] for c in calls] and m[3][
        "content"
    ] == '{"temp": 12}'
    assert json.loads(rows[0]["tools"])[0]["function"]["name"] == "get_weather"
    assert rows[0]["final_answer"] == "Paris 12°C, Rome 19°C."


def test_anthropic_messages(tmp_path):
    rec = {
        "model": "claude-x",
        "system": "Be brief.",
        "tools": [
            {"name": "get_weather", "description": "w", "input_schema": WEATHER["parameters"]}
        ],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Call the tool."},
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "unknown city"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "Try again?"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "get_weather",
                        "input": {"city": "Paris, FR"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "12C"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "12C in Paris."}]},
        ],
    }
    report, rows = ingest_one(tmp_path, "anthropic.jsonl", [rec])
    assert report.reader == "anthropic"
    m = rows[0]["messages"]
    assert [x["role"] for x in m] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert m[2]["reasoning"] == "Call the tool." and m[2]["tool_calls"][0]["id"] == "toolu_1"
    assert m[3]["tool_call_id"] == "toolu_1" and m[3]["content"] == "[error] unknown city"
    assert json.loads(rows[0]["metadata"]) == {"tool_errors": 1}
    assert json.loads(rows[0]["tools"])[0]["function"]["parameters"] == WEATHER["parameters"]


RESPONSES_RECORD = {
    "model": "gpt-x",
    "instructions": "Use tools.",
    "tools": [{"type": "function", **WEATHER}],
    "input": [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Paris and Rome?"}],
        }
    ],
    "output": [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "two lookups"}],
        },
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {
            "type": "function_call",
            "call_id": "c2",
            "name": "get_weather",
            "arguments": '{"city": "Rome"}',
        },
        {"type": "function_call_output", "call_id": "c2", "output": "19"},
        {"type": "function_call_output", "call_id": "c1", "output": "12"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Paris 12, Rome 19."}],
        },
    ],
}


def test_openai_responses_items(tmp_path):
    rec = RESPONSES_RECORD
    report, rows = ingest_one(tmp_path, "responses.jsonl", [rec])
    assert report.reader == "openai_responses"
    m = rows[0]["messages"]
    assert [x["role"] for x in m] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert m[2]["reasoning"] == "two lookups" and [c["id"] for c in m[2]["tool_calls"]] == [
        "c1",
        "c2",
    ]
    assert [(x["tool_call_id"], x["content"]) for x in m[3:5]] == [("c2", "19"), ("c1", "12")]
    assert json.loads(rows[0]["tools"])[0]["function"]["name"] == "get_weather"


def _span(trace: str, span: str, end: int, attrs: dict) -> dict:
    return {
        "traceId": trace,
        "spanId": span,
        "name": attrs.get("gen_ai.operation.name", "x"),
        "endTimeUnixNano": str(end),
        "attributes": [
            {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
            for k, v in attrs.items()
        ],
    }


def otel_record() -> dict:
    """Three spans of one agent trace (chat, tool, chat) and an embeddings-only trace."""
    first_in = [{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}]
    call = {
        "role": "assistant",
        "parts": [
            {
                "type": "tool_call",
                "id": "call_1",
                "name": "get_weather",
                "arguments": {"city": "Paris"},
            }
        ],
    }
    result = {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "call_1", "response": "rainy, 57F"}],
    }
    final = [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "Rainy, 57F."}],
            "finish_reason": "stop",
        }
    ]
    spans = [
        _span(
            "t1",
            "a",
            1,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-x",
                "gen_ai.input.messages": json.dumps(first_in),
                "gen_ai.output.messages": json.dumps([call]),
            },
        ),
        _span(
            "t1",
            "b",
            2,
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"},
        ),
        _span(
            "t1",
            "c",
            3,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-x",
                "gen_ai.system_instructions": json.dumps(
                    [{"type": "text", "content": "Be brief."}]
                ),
                "gen_ai.tool.definitions": json.dumps([{"type": "function", **WEATHER}]),
                "gen_ai.input.messages": json.dumps(first_in + [call, result]),
                "gen_ai.output.messages": json.dumps(final),
            },
        ),
        _span("t2", "d", 1, {"gen_ai.operation.name": "embeddings"}),
    ]
    rec = {
        "resourceSpans": [
            {"resource": {}, "scopeSpans": [{"scope": {"name": "demo"}, "spans": spans}]}
        ]
    }
    return rec


def test_otel_genai_spans(tmp_path):
    rec = otel_record()
    report, rows = ingest_one(tmp_path, "otel.jsonl", [rec])
    # trace t2 has no chat span: the whole record is quarantined (all or nothing per record)
    assert report.reader == "otel_genai" and report.reasons == {"missing_field": 1}
    spans = rec["resourceSpans"][0]["scopeSpans"][0]["spans"]
    ok = {"resourceSpans": [{"scopeSpans": [{"spans": spans[:3]}]}]}
    report, rows = ingest_one(tmp_path / "2", "otel.jsonl", [ok])
    m = rows[0]["messages"]
    assert [x["role"] for x in m] == ["system", "user", "assistant", "tool", "assistant"]
    assert m[3]["tool_call_id"] == "call_1" and m[3]["content"] == "rainy, 57F"
    assert json.loads(m[2]["tool_calls"][0]["arguments"]) == {"city": "Paris"}
    meta = json.loads(rows[0]["metadata"])
    assert meta["execute_tool_spans"] == 1 and rows[0]["model"] == "gpt-x"

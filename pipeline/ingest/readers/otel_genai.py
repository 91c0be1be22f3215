"""OpenTelemetry GenAI spans (semantic conventions ``gen_ai.*``) in OTLP/JSON export form:
``{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}``, one export request per record.

Decisions: spans are grouped by ``traceId``; one trace is one trajectory. Its conversation is the
``gen_ai.input.messages`` of the trace's last ``chat`` span (by end time) followed by that span's
``gen_ai.output.messages`` (message ``parts``: ``text``, ``reasoning``, ``tool_call``,
``tool_call_response``). ``gen_ai.system_instructions`` becomes the system message and
``gen_ai.tool.definitions`` the tools. ``execute_tool`` spans are counted in metadata. A trace
without a chat span carrying messages is ``missing_field``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import orjson

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader
from pipeline.ingest.records import Rec, TrajectoryRec, json_text, openai_tools


def _value(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    for k in ("stringValue", "boolValue", "doubleValue"):
        if k in v:
            return v[k]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    return None


def _attrs(span: dict) -> dict:
    attrs = span.get("attributes") or []
    if isinstance(attrs, dict):
        return attrs
    return {a["key"]: _value(a.get("value")) for a in attrs if isinstance(a, dict) and "key" in a}


def _json_attr(attrs: dict, key: str) -> Any:
    v = attrs.get(key)
    if isinstance(v, str):
        try:
            return orjson.loads(v)
        except orjson.JSONDecodeError:
            raise RecordError(Reason.INVALID_JSON, f"attribute {key} is not JSON") from None
    return v


def _spans(value: dict) -> list[dict]:
    spans = []
    for rs in value.get("resourceSpans") or []:
        for ss in (rs or {}).get("scopeSpans") or []:
            spans.extend(s for s in (ss or {}).get("spans") or [] if isinstance(s, dict))
    return spans


def _message(m: dict, i: int) -> list[dict]:
    if not isinstance(m, dict) or not isinstance(m.get("parts"), list):
        raise RecordError(Reason.WRONG_TYPE, f"gen_ai message {i} has no parts list")
    role = m.get("role")
    texts, reasoning, calls, results = [], [], [], []
    for p in m["parts"]:
        t = p.get("type") if isinstance(p, dict) else None
        if t == "text":
            texts.append(p.get("content", ""))
        elif t == "reasoning":
            reasoning.append(p.get("content", ""))
        elif t == "tool_call":
            calls.append(
                {"id": p.get("id"), "name": p.get("name"), "arguments": p.get("arguments") or {}}
            )
        elif t == "tool_call_response":
            results.append(
                {
                    "role": "tool",
                    "content": json_text(p.get("response", "")),
                    "tool_call_id": p.get("id"),
                }
            )
    if results:
        return results
    return [
        {
            "role": role,
            "content": "\n".join(texts) or None,
            "reasoning": "\n".join(reasoning) or None,
            "tool_calls": calls or None,
        }
    ]


class OTelGenAIReader(Reader):
    name = "otel_genai"
    description = "OpenTelemetry GenAI spans (OTLP JSON, gen_ai.input/output.messages)"

    def sniff(self, sample: Any, path: str) -> bool:
        return isinstance(sample, dict) and isinstance(sample.get("resourceSpans"), list)

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        if not isinstance(value, dict):
            raise RecordError(Reason.NOT_AN_OBJECT, "record is not an object")
        by_trace: dict[str, list[dict]] = defaultdict(list)
        for s in _spans(value):
            by_trace[str(s.get("traceId"))].append(s)
        if not by_trace:
            raise RecordError(Reason.MISSING_FIELD, "no spans in resourceSpans")
        for trace_id in sorted(by_trace):
            spans = by_trace[trace_id]
            chats = [
                (int(s.get("endTimeUnixNano") or 0), s)
                for s in spans
                if _attrs(s).get("gen_ai.operation.name") == "chat"
                and "gen_ai.input.messages" in _attrs(s)
            ]
            if not chats:
                raise RecordError(
                    Reason.MISSING_FIELD,
                    f"trace {trace_id} has no chat span with gen_ai.input.messages",
                )
            _, last = max(chats, key=lambda x: x[0])
            a = _attrs(last)
            messages: list[dict] = []
            system = _json_attr(a, "gen_ai.system_instructions")
            if system:
                messages.append(
                    {
                        "role": "system",
                        "content": "\n".join(
                            p.get("content", "") for p in system if isinstance(p, dict)
                        )
                        if isinstance(system, list)
                        else str(system),
                    }
                )
            for i, m in enumerate(
                (_json_attr(a, "gen_ai.input.messages") or [])
                + (_json_attr(a, "gen_ai.output.messages") or [])
            ):
                messages.extend(_message(m, i))
            tool_spans = sum(
                1 for s in spans if _attrs(s).get("gen_ai.operation.name") == "execute_tool"
            )
            yield TrajectoryRec(
                messages=messages,
                tools=openai_tools(_json_attr(a, "gen_ai.tool.definitions")),
                model=a.get("gen_ai.response.model") or a.get("gen_ai.request.model"),
                metadata={
                    "trace_id": trace_id,
                    "spans": len(spans),
                    "execute_tool_spans": tool_spans,
                    "provider": a.get("gen_ai.provider.name") or a.get("gen_ai.system"),
                },
            )

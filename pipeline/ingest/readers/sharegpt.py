"""ShareGPT function calling (``from: human|gpt|function_call|observation``, glaive / LLaMA-Factory)
and LLaMA-Factory's typed content parts (``content: [{type: text|reasoning|tool_call, value}]``).

Decisions: ``function_call.value`` is JSON text ``{"name", "arguments"}`` (arguments an object);
it becomes one call of an assistant message (consecutive ``function_call`` turns form one
parallel message). In the typed-parts files, parallel results packed into one tool message as a
JSON list of ``{name, content}`` are split into one tool message per result. An ``observation``
with no pending call is quarantined
(``tool_result_without_call``; one row of the zh glaive file). ``tools: ""`` means no tools.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader
from pipeline.ingest.records import Rec, TrajectoryRec, openai_tools

_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "observation": "tool",
    "tool": "tool",
    "function": "tool",
}


def _call(value: Any, where: str) -> dict:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as e:
            raise RecordError(
                Reason.BAD_TOOL_CALL, f"{where}: function_call is not JSON: {e}"
            ) from None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise RecordError(Reason.BAD_TOOL_CALL, f"{where}: function_call has no name")
    return {"name": value["name"], "arguments": value.get("arguments", {})}


def _result_batch(text: str) -> list[dict] | None:
    """``[{"tool_call_id"?, "name", "content"}, ...]`` in one tool message -> one message per result."""
    if not text.lstrip().startswith("[{"):
        return None
    try:
        items = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if len(items) < 2 or not all(
        isinstance(i, dict) and "content" in i and "name" in i for i in items
    ):
        return None
    return [
        {
            "role": "tool",
            "content": i["content"]
            if isinstance(i["content"], str)
            else orjson.dumps(i["content"]).decode(),
            "tool_call_id": i.get("tool_call_id"),
            "name": i["name"],
        }
        for i in items
    ]


class ShareGPTReader(Reader):
    name = "sharegpt"
    description = "ShareGPT conversations with function_call / observation turns"

    def sniff(self, sample: Any, path: str) -> bool:
        conv = sample.get("conversations") if isinstance(sample, dict) else None
        return (
            isinstance(conv, list)
            and bool(conv)
            and isinstance(conv[0], dict)
            and "from" in conv[0]
        )

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        conv = value.get("conversations") if isinstance(value, dict) else None
        if not isinstance(conv, list):
            raise RecordError(Reason.MISSING_FIELD, "record has no conversations list")
        messages: list[dict] = []
        for i, turn in enumerate(conv):
            if not isinstance(turn, dict) or "from" not in turn:
                raise RecordError(Reason.WRONG_TYPE, f"turn {i} is not an object with 'from'")
            frm, val = turn["from"], turn.get("value")
            if frm == "function_call":
                call = _call(val, f"turn {i}")
                if (
                    messages
                    and messages[-1]["role"] == "assistant"
                    and messages[-1].get("tool_calls")
                    and messages[-1].get("_open")
                ):
                    messages[-1]["tool_calls"].append(call)
                else:
                    messages.append(
                        {"role": "assistant", "content": None, "tool_calls": [call], "_open": True}
                    )
                continue
            role = _ROLES.get(frm)
            if role is None:
                raise RecordError(Reason.UNKNOWN_ROLE, f"turn {i} has from={frm!r}")
            messages.append({"role": role, "content": val})
        for m in messages:
            m.pop("_open", None)
        system = value.get("system") if isinstance(value.get("system"), str) else None
        if system:
            messages.insert(0, {"role": "system", "content": system})
        yield TrajectoryRec(
            messages=messages, tools=openai_tools(value.get("tools")), domain="general_tools"
        )


class TypedPartsReader(Reader):
    name = "llamafactory_parts"
    description = (
        "LLaMA-Factory typed content parts: content=[{type: text|reasoning|tool_call, value}]"
    )

    def sniff(self, sample: Any, path: str) -> bool:
        msgs = sample.get("messages") if isinstance(sample, dict) else None
        if not isinstance(msgs, list) or not msgs or not isinstance(msgs[0], dict):
            return False
        c = msgs[0].get("content")
        return (
            isinstance(c, list)
            and bool(c)
            and isinstance(c[0], dict)
            and "value" in c[0]
            and "type" in c[0]
        )

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        msgs = value.get("messages") if isinstance(value, dict) else None
        if not isinstance(msgs, list):
            raise RecordError(Reason.MISSING_FIELD, "record has no messages list")
        out = []
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("content"), list):
                raise RecordError(Reason.WRONG_TYPE, f"message {i} has no content part list")
            texts, reasoning, calls = [], [], []
            for p in m["content"]:
                if not isinstance(p, dict):
                    raise RecordError(
                        Reason.WRONG_TYPE, f"message {i} has a part that is not an object"
                    )
                kind, val = p.get("type"), p.get("value")
                if kind == "tool_call":
                    calls.append(_call(val, f"message {i}"))
                elif kind == "reasoning":
                    reasoning.append(val if isinstance(val, str) else orjson.dumps(val).decode())
                else:
                    texts.append(val if isinstance(val, str) else orjson.dumps(val).decode())
            if m.get("role") == "tool" and len(texts) == 1 and (batch := _result_batch(texts[0])):
                out.extend(batch)  # parallel results packed as one JSON list: one message each
                continue
            out.append(
                {
                    "role": m.get("role"),
                    "content": "\n".join(texts) if texts else None,
                    "reasoning": "\n".join(reasoning) or None,
                    "tool_calls": calls or None,
                }
            )
        yield TrajectoryRec(
            messages=out, tools=openai_tools(value.get("tools")), domain="general_tools"
        )

"""Hermes / Qwen tool calling in text: ``<tool_call>{"name": …, "arguments": …}</tool_call>`` in
assistant turns, ``<tool_response>…</tool_response>`` in tool (or user) turns, tools declared
inside ``<tools>…</tools>`` in the system prompt, reasoning in ``<think>…</think>``.

Records are ``{"messages": [...]}`` (OpenAI roles) or ShareGPT ``{"conversations": [...]}``
(``from: system|human|gpt|tool``). A ``<tool_call>`` body that is not JSON is ``bad_tool_call``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import orjson

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader
from pipeline.ingest.records import Rec, TrajectoryRec, openai_tools, text_of

TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
TOOL_RESPONSE_RE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.S)
TOOLS_RE = re.compile(r"<tools>\s*(.*?)\s*</tools>", re.S)
THINK_RE = re.compile(r"<think>\s*(.*?)\s*</think>", re.S)
_SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "tool": "tool",
    "observation": "tool",
}


def parse_tool_calls(text: str, where: str) -> tuple[str | None, list[dict]]:
    """Split assistant text into (remaining content, calls)."""
    calls = []
    for k, body in enumerate(TOOL_CALL_RE.findall(text)):
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise RecordError(
                Reason.BAD_TOOL_CALL, f"{where}: <tool_call> {k} is not JSON: {e}"
            ) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            raise RecordError(Reason.BAD_TOOL_CALL, f"{where}: <tool_call> {k} has no name")
        calls.append(
            {"name": obj["name"], "arguments": obj.get("arguments", obj.get("parameters", {}))}
        )
    rest = TOOL_CALL_RE.sub("", text).strip()
    return (rest or None), calls


def hermes_tools(system: str | None) -> list | None:
    if not system:
        return None
    m = TOOLS_RE.search(system)
    if not m:
        return None
    body = m.group(1).strip()
    try:
        return openai_tools(orjson.loads(body))
    except (RecordError, orjson.JSONDecodeError):
        # One JSON object per line is also common.
        tools = []
        for line in body.splitlines():
            if line.strip():
                try:
                    tools.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    raise RecordError(Reason.INVALID_JSON, "<tools> block is not JSON") from None
        return openai_tools(tools)


def _turns(value: dict) -> list[tuple[str, str | None]]:
    if isinstance(value.get("messages"), list):
        return [
            (m.get("role"), text_of(m.get("content"))) if isinstance(m, dict) else (None, None)
            for m in value["messages"]
        ]
    return [
        (_SHAREGPT_ROLES.get(m.get("from"), m.get("from")), m.get("value"))
        if isinstance(m, dict)
        else (None, None)
        for m in value["conversations"]
    ]


def _has_tool_call_text(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    msgs = (
        value.get("messages")
        if isinstance(value.get("messages"), list)
        else value.get("conversations")
    )
    if not isinstance(msgs, list):
        return False
    for m in msgs:
        if isinstance(m, dict):
            c = m.get("content", m.get("value"))
            if isinstance(c, str) and "<tool_call>" in c:
                return True
    return False


class HermesReader(Reader):
    name = "hermes"
    description = "Hermes/Qwen <tool_call> / <tool_response> text in messages or conversations"

    def sniff(self, sample: Any, path: str) -> bool:
        return _has_tool_call_text(sample)

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        if not isinstance(value, dict) or not (
            isinstance(value.get("messages"), list) or isinstance(value.get("conversations"), list)
        ):
            raise RecordError(Reason.MISSING_FIELD, "record has no messages or conversations list")
        messages: list[dict] = []
        system = None
        for i, (role, text) in enumerate(_turns(value)):
            if role is None:
                raise RecordError(Reason.WRONG_TYPE, f"turn {i} is not an object with a role")
            if text is not None and not isinstance(text, str):
                raise RecordError(Reason.WRONG_TYPE, f"turn {i} content is not text")
            text = text or ""
            if role == "system":
                system = system or text
                messages.append({"role": "system", "content": text})
            elif role == "assistant":
                reasoning = "\n".join(THINK_RE.findall(text)) or None
                content, calls = parse_tool_calls(THINK_RE.sub("", text), f"turn {i}")
                messages.append(
                    {
                        "role": "assistant",
                        "content": content,
                        "reasoning": reasoning,
                        "tool_calls": calls or None,
                    }
                )
            elif role in ("tool", "user") and TOOL_RESPONSE_RE.search(text):
                # One tool message per <tool_response>; results answer pending calls in order.
                for body in TOOL_RESPONSE_RE.findall(text):
                    messages.append({"role": "tool", "content": body})
            else:
                messages.append({"role": role, "content": text})
        tools = openai_tools(value.get("tools")) if value.get("tools") else hermes_tools(system)
        yield TrajectoryRec(
            messages=messages,
            tools=tools,
            model=value.get("model") if isinstance(value.get("model"), str) else None,
        )

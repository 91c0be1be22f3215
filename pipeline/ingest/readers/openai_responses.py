"""OpenAI Responses API items: ``message`` (input_text / output_text parts), ``reasoning``
(summary parts), ``function_call {call_id, name, arguments}`` and
``function_call_output {call_id, output}``.

A record is ``{"input": [items] | "text", "output": [items], "instructions", "tools", "model"}``
or ``{"items": [...]}``. Decisions: consecutive ``function_call`` items form one assistant
message (parallel calls); a ``reasoning`` item attaches to the next assistant message;
``instructions`` becomes the system message. Tools in the Responses shape
(``{"type": "function", "name", "parameters"}``) map to the OpenAI chat shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader
from pipeline.ingest.records import Rec, TrajectoryRec, openai_tools, text_of

_ITEM_TYPES = {"function_call", "function_call_output", "reasoning"}


def _items(value: dict) -> list:
    if isinstance(value.get("items"), list):
        return value["items"]
    inp = value.get("input")
    items = (
        [{"type": "message", "role": "user", "content": inp}]
        if isinstance(inp, str)
        else list(inp or [])
    )
    return items + list(value.get("output") or [])


class OpenAIResponsesReader(Reader):
    name = "openai_responses"
    description = "OpenAI Responses API items (function_call / function_call_output by call_id)"

    def sniff(self, sample: Any, path: str) -> bool:
        if not isinstance(sample, dict):
            return False
        try:
            items = _items(sample)
        except TypeError:
            return False
        return any(isinstance(it, dict) and it.get("type") in _ITEM_TYPES for it in items)

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        if not isinstance(value, dict):
            raise RecordError(Reason.NOT_AN_OBJECT, "record is not an object")
        items = _items(value)
        out: list[dict] = []
        if isinstance(value.get("instructions"), str):
            out.append({"role": "system", "content": value["instructions"]})
        reasoning: list[str] = []
        for i, it in enumerate(items):
            if not isinstance(it, dict):
                raise RecordError(Reason.WRONG_TYPE, f"item {i} is not an object")
            t = it.get("type", "message" if "role" in it else None)
            if t == "message":
                role = it.get("role")
                msg = {"role": role, "content": text_of(it.get("content"))}
                if role == "assistant" and reasoning:
                    msg["reasoning"] = "\n".join(reasoning)
                    reasoning = []
                out.append(msg)
            elif t == "reasoning":
                reasoning.append(text_of(it.get("summary")) or text_of(it.get("content")) or "")
            elif t == "function_call":
                call = {
                    "id": it.get("call_id") or it.get("id"),
                    "name": it.get("name"),
                    "arguments": it.get("arguments"),
                }
                last = out[-1] if out else None
                if (
                    last
                    and last["role"] == "assistant"
                    and last.get("tool_calls")
                    and last.get("_calls_only")
                ):
                    last["tool_calls"].append(call)
                else:
                    out.append(
                        {
                            "role": "assistant",
                            "content": None,
                            "reasoning": "\n".join(reasoning) or None,
                            "tool_calls": [call],
                            "_calls_only": True,
                        }
                    )
                    reasoning = []
            elif t == "function_call_output":
                out.append(
                    {
                        "role": "tool",
                        "content": text_of(it.get("output")) or "",
                        "tool_call_id": it.get("call_id"),
                    }
                )
            else:
                raise RecordError(Reason.WRONG_TYPE, f"item {i} has unsupported type {t!r}")
        for m in out:
            m.pop("_calls_only", None)
        tools = value.get("tools")
        if isinstance(tools, list):
            tools = [
                {
                    "name": t.get("name"),
                    "description": t.get("description", ""),
                    "parameters": t.get("parameters", {}),
                }
                if isinstance(t, dict) and t.get("type") == "function" and "function" not in t
                else t
                for t in tools
            ]
        yield TrajectoryRec(
            messages=out,
            tools=openai_tools(tools),
            model=value.get("model") if isinstance(value.get("model"), str) else None,
        )

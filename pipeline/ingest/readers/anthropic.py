"""Anthropic Messages API transcripts: ``{"system", "messages", "tools", "model"}`` with content
blocks ``text``, ``thinking``, ``tool_use {id, name, input}`` and, in user turns,
``tool_result {tool_use_id, content, is_error}``.

Decisions: a user turn's ``tool_result`` blocks become one ``tool`` message each (in order,
linked by ``tool_use_id``); any text blocks in the same turn follow as a user message.
``is_error`` results are prefixed ``[error] `` so the error survives in plain text, and counted
in ``metadata.tool_errors``. ``thinking`` blocks become ``reasoning``. Tools with
``input_schema`` are mapped to the OpenAI function shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader
from pipeline.ingest.records import Rec, TrajectoryRec, openai_tools, require, text_of

_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking"}


def _block_types(sample: Any) -> set[str]:
    types: set[str] = set()
    for m in sample.get("messages") or []:
        if isinstance(m, dict) and isinstance(m.get("content"), list):
            types |= {b.get("type") for b in m["content"] if isinstance(b, dict)}
    return types


class AnthropicReader(Reader):
    name = "anthropic"
    description = "Anthropic Messages transcripts (tool_use / tool_result content blocks)"

    def sniff(self, sample: Any, path: str) -> bool:
        if not isinstance(sample, dict) or not isinstance(sample.get("messages"), list):
            return False
        tools = sample.get("tools")
        return bool(_block_types(sample) & _BLOCKS) or (
            isinstance(tools, list)
            and any(isinstance(t, dict) and "input_schema" in t for t in tools)
        )

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        msgs = require(value, "messages", list)
        out: list[dict] = []
        errors = 0
        system = value.get("system")
        if system:
            out.append({"role": "system", "content": text_of(system)})
        for i, m in enumerate(msgs):
            if not isinstance(m, dict):
                raise RecordError(Reason.WRONG_TYPE, f"message {i} is not an object")
            role, content = m.get("role"), m.get("content")
            if isinstance(content, str) or content is None:
                out.append({"role": role, "content": content})
                continue
            if not isinstance(content, list):
                raise RecordError(
                    Reason.WRONG_TYPE, f"message {i} content is {type(content).__name__}"
                )
            texts, thinking, calls, results = [], [], [], []
            for b in content:
                if not isinstance(b, dict):
                    raise RecordError(
                        Reason.WRONG_TYPE, f"message {i} has a block that is not an object"
                    )
                t = b.get("type")
                if t == "text":
                    texts.append(b.get("text", ""))
                elif t == "thinking":
                    thinking.append(b.get("thinking", ""))
                elif t == "tool_use":
                    calls.append(
                        {"id": b.get("id"), "name": b.get("name"), "arguments": b.get("input", {})}
                    )
                elif t == "tool_result":
                    body = text_of(b.get("content")) or ""
                    if b.get("is_error"):
                        errors += 1
                        body = "[error] " + body
                    results.append(
                        {"role": "tool", "content": body, "tool_call_id": b.get("tool_use_id")}
                    )
            if role == "assistant":
                out.append(
                    {
                        "role": "assistant",
                        "content": "\n".join(texts) or None,
                        "reasoning": "\n".join(thinking) or None,
                        "tool_calls": calls or None,
                    }
                )
            else:
                out.extend(results)
                if texts:
                    out.append({"role": role, "content": "\n".join(texts)})
        yield TrajectoryRec(
            messages=out,
            tools=openai_tools(value.get("tools")),
            model=value.get("model") if isinstance(value.get("model"), str) else None,
            metadata={"tool_errors": errors} if errors else {},
        )

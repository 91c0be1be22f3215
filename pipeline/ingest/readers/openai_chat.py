"""OpenAI chat messages: ``tool_calls`` + ``role: tool``, and the legacy ``function_call`` +
``role: function`` shape, as in ``{"messages": [...], "tools": [...]}`` JSONL (TRL, OpenAI
fine-tuning files)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader
from pipeline.ingest.records import Rec, TrajectoryRec, openai_tools, require

_KNOWN = {
    "messages",
    "tools",
    "functions",
    "model",
    "reward",
    "is_correct",
    "ground_truth",
    "domain",
    "question",
}


def from_openai_message(m: Any, i: int) -> dict:
    """One OpenAI message (current or legacy) in the reader-record message shape."""
    if not isinstance(m, dict):
        raise RecordError(Reason.WRONG_TYPE, f"message {i} is {type(m).__name__}, expected object")
    role = m.get("role")
    out = {"role": role, "content": m.get("content")}
    reasoning = m.get("reasoning_content", m.get("reasoning"))
    if reasoning:
        out["reasoning"] = reasoning
    if m.get("tool_calls"):
        out["tool_calls"] = m["tool_calls"]
    elif isinstance(m.get("function_call"), dict):  # legacy: one call, no id
        out["tool_calls"] = [{"function": m["function_call"]}]
    if role in ("tool", "function"):
        out["role"] = "tool"
        out["tool_call_id"] = m.get("tool_call_id")
        out["name"] = m.get("name")
    return out


def from_openai_messages(msgs: Any) -> list[dict]:
    if not isinstance(msgs, list):
        raise RecordError(Reason.WRONG_TYPE, f"messages is {type(msgs).__name__}, expected list")
    return [from_openai_message(m, i) for i, m in enumerate(msgs)]


def _is_chat(sample: Any) -> bool:
    if (
        not isinstance(sample, dict)
        or not isinstance(sample.get("messages"), list)
        or not sample["messages"]
    ):
        return False
    first = sample["messages"][0]
    return isinstance(first, dict) and "role" in first


class OpenAIChatReader(Reader):
    name = "openai_chat"
    description = "OpenAI chat messages with tool_calls / role:tool (or legacy function_call)"

    def sniff(self, sample: Any, path: str) -> bool:
        return _is_chat(sample)

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        msgs = require(value, "messages", list)
        meta = {k: v for k, v in value.items() if k not in _KNOWN}
        reward = value.get("reward")
        yield TrajectoryRec(
            messages=from_openai_messages(msgs),
            tools=openai_tools(value.get("tools") or value.get("functions")),
            question=value.get("question") if isinstance(value.get("question"), str) else None,
            domain=value.get("domain") if isinstance(value.get("domain"), str) else None,
            ground_truth=value.get("ground_truth")
            if isinstance(value.get("ground_truth"), str)
            else None,
            reward=reward,
            is_correct=value.get("is_correct")
            if isinstance(value.get("is_correct"), bool)
            else None,
            model=value.get("model") if isinstance(value.get("model"), str) else None,
            metadata=meta,
        )

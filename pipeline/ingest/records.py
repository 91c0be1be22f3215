"""What a reader yields: format-free records that the stage turns into canonical rows.

A reader only maps its format onto these; ids, lineage, tool-call linking and counting are done
once, in ``normalize`` and ``stage``, so every format gets the same guarantees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline.ingest.errors import Reason, RecordError


@dataclass(slots=True)
class TrajectoryRec:
    messages: list[
        dict
    ]  # {role, content, reasoning?, tool_calls?: [{id?, name, arguments}], tool_call_id?, name?}
    tools: list | None = None
    question: str | None = None  # default: the first user message
    system_prompt: str | None = None  # default: the first system message
    domain: str | None = None
    final_answer: str | None = None  # default: the last assistant text without tool calls
    ground_truth: str | None = None
    reward: float | None = None
    is_correct: bool | None = None
    model: str | None = None
    metadata: dict = field(default_factory=dict)


@dataclass(slots=True)
class QuestionRec:
    question: str
    ground_truth: str | None
    ground_truth_raw: str | None
    answer_type: str | None
    dataset: str
    split: str | None = None
    domain: str | None = None
    tools: list | None = None
    metadata: dict = field(default_factory=dict)


@dataclass(slots=True)
class AttemptRec:
    question: str
    ground_truth: str | None
    policy: str | None
    attempt_index: int
    response: str | None
    prediction: str | None
    score: float | None
    is_correct: bool | None
    domain: str | None = None
    metadata: dict = field(default_factory=dict)
    trajectory: TrajectoryRec | None = None  # when the attempt is also a full trajectory


Rec = TrajectoryRec | QuestionRec | AttemptRec


# ---- small helpers shared by readers ---------------------------------------------------------


def require(obj: Any, key: str, typ: type | tuple[type, ...], where: str = "record") -> Any:
    """Field access that fails with a specific quarantine reason instead of a KeyError."""
    if not isinstance(obj, dict):
        raise RecordError(Reason.WRONG_TYPE, f"{where} is {type(obj).__name__}, expected object")
    if key not in obj or obj[key] is None:
        raise RecordError(Reason.MISSING_FIELD, f"{where} has no field {key!r}")
    val = obj[key]
    if not isinstance(val, typ):
        names = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise RecordError(
            Reason.WRONG_TYPE, f"{where}.{key} is {type(val).__name__}, expected {names}"
        )
    return val


def text_of(content: Any) -> str | None:
    """Message content as text: strings as they are, OpenAI/Anthropic part lists joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict):
                t = part.get("text", part.get("value", part.get("content")))
                if isinstance(t, str):
                    texts.append(t)
                elif t is not None:
                    texts.append(json_text(t))
        return "\n".join(texts)
    if isinstance(content, (dict, int, float, bool)):
        return json_text(content)
    raise RecordError(Reason.WRONG_TYPE, f"message content is {type(content).__name__}")


def json_text(value: Any) -> str:
    """Arguments and tool outputs as JSON text; strings are kept byte-for-byte."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def openai_tools(tools: Any) -> list | None:
    """Tool specs in the OpenAI shape ``{"type": "function", "function": {...}}``.

    Accepts the bare function shape (glaive, ToolBench, BFCL), Anthropic's ``input_schema``,
    and JSON text of either (LLaMA-Factory stores tools as a string; ``""`` means none)."""
    if tools is None or tools == "" or tools == []:
        return None
    if isinstance(tools, str):
        try:
            tools = orjson.loads(tools)
        except orjson.JSONDecodeError as e:
            raise RecordError(Reason.INVALID_JSON, f"tools is not JSON: {e}") from None
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list):
        raise RecordError(Reason.WRONG_TYPE, f"tools is {type(tools).__name__}, expected list")
    out = []
    for t in tools:
        if not isinstance(t, dict):
            raise RecordError(Reason.WRONG_TYPE, "a tool spec is not an object")
        if "function" in t and isinstance(t["function"], dict):
            out.append({"type": "function", "function": t["function"]})
        elif "input_schema" in t:
            fn = {
                "name": t.get("name"),
                "description": t.get("description", ""),
                "parameters": t["input_schema"],
            }
            out.append({"type": "function", "function": fn})
        else:
            out.append({"type": "function", "function": t})
    return out


def tool_names(tools: list | None) -> set[str]:
    return {t["function"].get("name") for t in tools or [] if isinstance(t.get("function"), dict)}

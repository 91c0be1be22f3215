"""ReAct text trajectories (FireAct): ``Thought: … Action: tool[input]`` in assistant turns,
``Observation: …`` in the following user turn.

Decisions: every ``Action: name[arg]`` becomes a real tool call ``name`` with arguments
``{"input": arg}``, and the next ``Observation:`` user turn becomes its tool result; ``finish[x]``
is a call too, its argument is ``final_answer`` and the closing observation ("Episode finished,
reward = …") is its result. The reward is parsed from the *last* message only. An assistant
turn that is itself an ``Observation: …`` right after an action (4 shared rows: the model
hallucinated the environment's "reward = 1") is not a turn: it moves to
``metadata.hallucinated_observations`` and the real observation answers the call. Rows with
no user question (2 shared rows start with an assistant turn) are ``no_question``. Declared tools: search, lookup, finish.
MMLU-style questions (``Question: … A. … B.``) get domain ``multiple_choice``; others ``qa``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader
from pipeline.ingest.records import Rec, TrajectoryRec, openai_tools, require

ACTION_RE = re.compile(r"Action(?: \d+)?:\s*(\w+)\[(.*)\]\s*$", re.S)
ACTION_SNIFF = re.compile(r"Action(?: \d+)?:\s*\w+\[")
REWARD_RE = re.compile(r"reward\s*=\s*(True|False|true|false|[-+]?\d*\.?\d+)")
REACT_TOOLS = [
    {
        "name": "search",
        "description": "Search Wikipedia and return the first paragraph",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
    },
    {
        "name": "lookup",
        "description": "Return the next sentence containing the keyword",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
    },
    {
        "name": "finish",
        "description": "Finish with an answer",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
    },
]


def parse_reward(text: str | None) -> float | None:
    if not text:
        return None
    found = REWARD_RE.findall(text)
    if not found:
        return None
    v = found[-1]
    if v.lower() in ("true", "false"):
        return 1.0 if v.lower() == "true" else 0.0
    return float(v)


class ReActReader(Reader):
    name = "react"
    description = "ReAct text (Thought / Action: tool[arg] / Observation), e.g. FireAct"

    def sniff(self, sample: Any, path: str) -> bool:
        msgs = sample.get("messages") if isinstance(sample, dict) else None
        if not isinstance(msgs, list):
            return False
        return any(
            isinstance(m, dict)
            and m.get("role") == "assistant"
            and isinstance(m.get("content"), str)
            and ACTION_SNIFF.search(m["content"])
            for m in msgs
        )

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        msgs = require(value, "messages", list)
        out: list[dict] = []
        final = None
        pending = False
        hallucinated: list[str] = []
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                raise RecordError(Reason.WRONG_TYPE, f"message {i} has no text content")
            role, text = m.get("role"), m["content"]
            if role == "assistant" and pending and text.lstrip().startswith("Observation"):
                hallucinated.append(text)  # the model wrote the environment's line itself
                continue
            if role == "assistant":
                match = ACTION_RE.search(text)
                if match:
                    name, arg = match.group(1), match.group(2)
                    thought = text[: match.start()].strip() or None
                    out.append(
                        {
                            "role": "assistant",
                            "content": thought,
                            "tool_calls": [{"name": name, "arguments": {"input": arg}}],
                        }
                    )
                    if name == "finish":
                        final = arg
                    pending = True
                else:
                    out.append({"role": "assistant", "content": text})
            elif role == "user" and pending and text.lstrip().startswith("Observation"):
                out.append(
                    {"role": "tool", "content": re.sub(r"^\s*Observation(?: \d+)?:\s?", "", text)}
                )
                pending = False
            else:
                out.append({"role": role, "content": text})
        q = out[0]["content"] if out and out[0]["role"] == "user" else None
        domain = "multiple_choice" if q and re.search(r"\nA\. .*\nB\. ", q, re.S) else "qa"
        reward = parse_reward(msgs[-1].get("content") if isinstance(msgs[-1], dict) else None)
        yield TrajectoryRec(
            messages=out,
            tools=openai_tools(REACT_TOOLS),
            domain=domain,
            final_answer=final,
            reward=reward,
            is_correct=None if reward is None else reward > 0,
            model="gpt-4",
            metadata={"method": _method(msgs), "hallucinated_observations": hallucinated or None},
        )


def _method(msgs: list) -> str:
    text = " ".join(
        m.get("content", "")
        for m in msgs
        if isinstance(m, dict) and isinstance(m.get("content"), str)
    )
    if "reflection" in text.lower():
        return "reflexion"
    return "react" if "Action" in text else "cot"

"""SWE-agent ``.traj`` files (text actions and function-calling variants).

Decisions: ``history`` is the conversation (``trajectory`` steps are used only when ``history``
is absent). Function-calling files keep their ``tool_calls``; the tool reply links by
``tool_call_ids`` (a list) and takes its first id. In text-action files an assistant turn with an
``action`` becomes a call of tool ``bash`` with ``{"command": action}``, and the ``user``
observation right after it becomes that call's result. ``info.submission`` is
``final_answer``; there is no reward. The question is the issue (or CTF challenge) text inside
the templated first user turn (demonstration turns are skipped). Demos and CTF runs get domain ``ctf`` or
``software_engineering`` by path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader
from pipeline.ingest.records import Rec, TrajectoryRec, text_of

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a SWE-agent command or shell command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


TASK_RES = [
    re.compile(r"ISSUE:\n(.*?)\n\s*INSTRUCTIONS:", re.S),
    re.compile(r"(The CTF challenge is .*?)\n\s*INSTRUCTIONS:", re.S),
]


def task_statement(messages: list[dict]) -> str | None:
    """The issue (or CTF challenge) text of the first user turn that is not a demonstration:
    the task's identity, without the prompt template around it."""
    for m in messages:
        text = m.get("content")
        if (
            m.get("role") != "user"
            or not isinstance(text, str)
            or text.startswith("Here is a demonstration")
        ):
            continue
        for rx in TASK_RES:
            found = rx.search(text)
            if found:
                return found.group(1).strip()
        return None
    return None


def _from_steps(steps: list) -> list[dict]:
    msgs: list[dict] = []
    for i, s in enumerate(steps):
        if not isinstance(s, dict):
            raise RecordError(Reason.WRONG_TYPE, f"trajectory step {i} is not an object")
        msgs.append(
            {
                "role": "assistant",
                "content": s.get("thought") or s.get("response"),
                "tool_calls": [{"name": "bash", "arguments": {"command": s.get("action", "")}}],
            }
        )
        msgs.append({"role": "tool", "content": s.get("observation") or ""})
    return msgs


class SweAgentReader(Reader):
    name = "swe_agent"
    description = "SWE-agent .traj (history with text actions or tool_calls)"

    def sniff(self, sample: Any, path: str) -> bool:
        if not isinstance(sample, dict):
            return False
        h = sample.get("history")
        return (
            isinstance(h, list)
            and bool(h)
            and isinstance(h[0], dict)
            and ("message_type" in h[0] or "agent" in h[0])
        ) or ("trajectory" in sample and "info" in sample and "environment" in sample)

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        if not isinstance(value, dict):
            raise RecordError(Reason.NOT_AN_OBJECT, "record is not an object")
        history = value.get("history")
        info = value.get("info") if isinstance(value.get("info"), dict) else {}
        msgs: list[dict] = []
        function_calling = False
        if isinstance(history, list) and history:
            text_action_pending = False
            for i, m in enumerate(history):
                if not isinstance(m, dict):
                    raise RecordError(Reason.WRONG_TYPE, f"history message {i} is not an object")
                role = m.get("role")
                content = text_of(m.get("content"))
                if role == "assistant":
                    if m.get("tool_calls"):
                        function_calling = True
                        msgs.append(
                            {
                                "role": "assistant",
                                "content": content,
                                "reasoning": None,
                                "tool_calls": m["tool_calls"],
                            }
                        )
                        text_action_pending = False
                    elif m.get("action"):
                        msgs.append(
                            {
                                "role": "assistant",
                                "content": m.get("thought") or content,
                                "tool_calls": [
                                    {"name": "bash", "arguments": {"command": m["action"]}}
                                ],
                            }
                        )
                        text_action_pending = True
                    else:
                        msgs.append({"role": "assistant", "content": content})
                        text_action_pending = False
                elif role == "tool":
                    ids = m.get("tool_call_ids")
                    tcid = ids[0] if isinstance(ids, list) and ids else m.get("tool_call_id")
                    msgs.append({"role": "tool", "content": content, "tool_call_id": tcid})
                elif role == "user" and text_action_pending:
                    msgs.append({"role": "tool", "content": content})
                    text_action_pending = False
                else:
                    msgs.append({"role": role, "content": content})
        elif isinstance(value.get("trajectory"), list) and value["trajectory"]:
            raise RecordError(
                Reason.MISSING_FIELD,
                "trajectory without history: the task statement is not recorded",
            )
        else:
            raise RecordError(Reason.MISSING_FIELD, "record has neither history nor trajectory")
        domain = "ctf" if "/ctf/" in ctx.path else "software_engineering"
        stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
        yield TrajectoryRec(
            messages=msgs,
            question=task_statement(msgs),
            tools=None if function_calling else [BASH_TOOL],
            domain=domain,
            final_answer=info.get("submission")
            if isinstance(info.get("submission"), str)
            else None,
            metadata={
                "exit_status": info.get("exit_status"),
                "demonstration": "/demonstrations/" in ctx.path,
                "function_calling": function_calling,
                "model_stats": stats or None,
                "environment": value.get("environment"),
            },
        )

"""tau-bench: historical trajectories (JSON array of episodes) and few-shot flattened transcripts.

Decisions: the question is the task's ``instruction`` (so the 4 trials of a task share a
question id); each episode is also an attempt (``reward`` 0/1) for recorded pass rates. Reused
tool-call ids are made unique by ``normalize`` (results are paired positionally). Few-shot
transcripts lost tool names and arguments: every ``tool:`` line answers a call of the assistant
line before it (``assistant: None``, or an assistant line with text whose call was lost); those
calls become ``unknown_tool`` with ``{}`` arguments and ``metadata.lossy_tool_calls = true``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import orjson

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader, has_keys
from pipeline.ingest.readers.openai_chat import from_openai_messages
from pipeline.ingest.records import AttemptRec, Rec, TrajectoryRec, require


def tools_of_calls(messages: list[dict]) -> list[dict] | None:
    """Tool specs derived from the calls made: tau-bench's files keep the calls but not the
    environment's tool specs, and an SFT row whose turns call tools it never declares teaches
    calling undeclared tools. Each called name, with the argument names seen."""
    seen: dict[str, dict[str, None]] = {}
    for m in messages:
        for c in m.get("tool_calls") or []:
            c = c.get("function") if isinstance(c.get("function"), dict) else c
            args = c.get("arguments")
            if isinstance(args, str):
                try:
                    args = orjson.loads(args)
                except orjson.JSONDecodeError:
                    args = {}
            keys = seen.setdefault(str(c.get("name")), {})
            keys.update(dict.fromkeys(args if isinstance(args, dict) else {}))
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": "derived from the recorded calls (the source has no tool specs)",
                "parameters": {"type": "object", "properties": {k: {} for k in keys}},
            },
        }
        for name, keys in seen.items()
    ] or None


def _domain(path: str) -> str:
    p = path.lower()
    return "airline" if "airline" in p else "retail" if "retail" in p else "customer_service"


def _model(path: str) -> str | None:
    m = re.search(r"/([\w.-]+?)-(airline|retail)[^/]*$", path)
    return m.group(1) if m else None


class TauBenchReader(Reader):
    name = "tau_bench"
    description = "tau-bench historical trajectories: {task_id, trial, reward, info, traj}"

    def sniff(self, sample: Any, path: str) -> bool:
        return has_keys(sample, "traj", "task_id")

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        traj = require(value, "traj", list)
        info = value.get("info") if isinstance(value.get("info"), dict) else {}
        task = info.get("task") if isinstance(info.get("task"), dict) else {}
        instruction = task.get("instruction")
        if not isinstance(instruction, str):
            raise RecordError(Reason.MISSING_FIELD, "record has no info.task.instruction")
        reward = value.get("reward")
        if not isinstance(reward, (int, float)) or isinstance(reward, bool):
            raise RecordError(
                Reason.WRONG_TYPE, f"reward is {type(reward).__name__}, expected number"
            )
        correct = reward >= 1.0
        gt = orjson.dumps({"actions": task.get("actions"), "outputs": task.get("outputs")}).decode()
        rinfo = info.get("reward_info")
        meta = {
            "task_id": value.get("task_id"),
            "trial": value.get("trial"),
            "user_id": task.get("user_id"),
            "ended_by": info.get("source"),
            "user_cost": info.get("user_cost"),
            "reward_info": rinfo.get("info") if isinstance(rinfo, dict) else None,
        }
        messages = from_openai_messages(traj)
        t = TrajectoryRec(
            messages=messages,
            tools=tools_of_calls(messages),
            question=instruction,
            domain=_domain(ctx.path),
            ground_truth=gt,
            reward=float(reward),
            is_correct=correct,
            model=_model(ctx.path),
            metadata=meta,
        )
        yield AttemptRec(
            question=instruction,
            ground_truth=gt,
            policy=_model(ctx.path),
            attempt_index=int(value.get("trial") or 0),
            response=None,
            prediction=None,
            score=float(reward),
            is_correct=correct,
            domain=t.domain,
            metadata={"task_id": value.get("task_id")},
            trajectory=t,
        )


_TURN = re.compile(r"(?:^|\n)(user|assistant|tool): ")


class TauFewShotReader(Reader):
    name = "tau_bench_fewshot"
    description = "tau-bench few-shot transcripts: {messages_display: 'role: text' lines}"

    def sniff(self, sample: Any, path: str) -> bool:
        return has_keys(sample, "messages_display")

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        text = require(value, "messages_display", str)
        pieces = _TURN.split(text)
        if pieces and pieces[0].strip():
            raise RecordError(Reason.WRONG_TYPE, "transcript does not start with a 'role: ' line")
        messages: list[dict] = []
        lossy = 0
        answered = 0  # tool lines since the last assistant line
        for role, body in zip(pieces[1::2], pieces[2::2], strict=True):
            if role == "assistant":
                calls = (
                    [{"name": "unknown_tool", "arguments": "{}"}]
                    if body.strip() == "None"
                    else None
                )
                messages.append(
                    {"role": "assistant", "content": None if calls else body, "tool_calls": calls}
                )
                lossy += bool(calls)
                answered = 0
            elif role == "tool":
                # A tool line means the assistant line before it made a call, also when that line
                # shows text (the transcript kept the text and lost the call).
                last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
                if last is not None and len(last["tool_calls"] or []) <= answered:
                    last["tool_calls"] = [
                        *(last["tool_calls"] or []),
                        {"name": "unknown_tool", "arguments": "{}"},
                    ]
                    lossy += 1
                messages.append({"role": "tool", "content": body})
                answered += 1
            else:
                messages.append({"role": role, "content": body})
                answered = 0
        yield TrajectoryRec(
            messages=messages, domain=_domain(ctx.path), metadata={"lossy_tool_calls": lossy > 0}
        )

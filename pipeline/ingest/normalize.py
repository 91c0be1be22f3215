"""Turn reader records into canonical rows: roles checked, tool calls linked, ids computed.

Tool-call linking (the same for every format):

* every call gets an id; calls without one get ``call_<message>_<k>``; an id already used earlier
  in the trajectory is made unique with a ``~<n>`` suffix (tau-bench reuses ids within an episode);
* a tool result answers the first pending call with its id, or, when it has no id or an id that
  matches nothing pending, the first pending call (results follow calls in order);
* a tool result with no pending call is an error (``tool_result_without_call``);
* calls still pending when the next assistant or user turn starts are an error
  (``tool_call_unanswered``), except calls in the *last* assistant turn: agents end with a
  terminal call (submit, Finish) that gets no result. Those are counted in
  ``metadata.unanswered_final_calls``.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.records import AttemptRec, QuestionRec, TrajectoryRec, json_text, text_of
from pipeline.lake.ids import content_id, normalize_question, question_id
from schemas import ROLES

_ROLE_ALIASES = {
    "function": "tool",
    "observation": "tool",
    "ipython": "tool",
    "developer": "system",
}


def _metadata(meta: dict) -> str | None:
    if not meta:
        return None
    return orjson.dumps(
        meta, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY, default=str
    ).decode()


def _opt_float(x: Any, what: str) -> float | None:
    if x is None:
        return None
    if isinstance(x, bool):
        return float(x)
    if isinstance(x, (int, float)):
        x = float(x)
        if math.isnan(x):
            return None
        return x
    raise RecordError(Reason.WRONG_TYPE, f"{what} is {type(x).__name__}, expected a number")


def canonical_messages(rec: TrajectoryRec) -> tuple[list[dict], int, int]:
    """Returns (messages, n_tool_calls, unanswered_final_calls)."""
    msgs = rec.messages
    if not isinstance(msgs, list) or not msgs:
        raise RecordError(Reason.EMPTY_CONVERSATION, "no messages")
    out: list[dict] = []
    used: dict[str, int] = {}
    pending: list[tuple[str | None, dict, int]] = []  # (original id, canonical call, message index)
    n_calls = 0
    last_assistant = max(
        (i for i, m in enumerate(msgs) if isinstance(m, dict) and m.get("role") == "assistant"),
        default=-1,
    )
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise RecordError(
                Reason.WRONG_TYPE, f"message {i} is {type(m).__name__}, expected object"
            )
        role = m.get("role")
        role = _ROLE_ALIASES.get(role, role)
        if role not in ROLES:
            raise RecordError(Reason.UNKNOWN_ROLE, f"message {i} has role {m.get('role')!r}")
        if role in ("assistant", "user") and pending:
            ids = ", ".join(c["id"] for _, c, _ in pending)
            raise RecordError(
                Reason.TOOL_CALL_UNANSWERED, f"tool call(s) {ids} have no result before message {i}"
            )
        content = text_of(m.get("content"))
        reasoning = m.get("reasoning")
        if reasoning is not None and not isinstance(reasoning, str):
            reasoning = text_of(reasoning)
        msg = {
            "role": role,
            "content": content,
            "reasoning": reasoning,
            "tool_calls": None,
            "tool_call_id": None,
            "name": None,
        }
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            raw_calls = m["tool_calls"]
            if not isinstance(raw_calls, list):
                raise RecordError(Reason.WRONG_TYPE, f"message {i} tool_calls is not a list")
            for k, c in enumerate(raw_calls):
                if not isinstance(c, dict):
                    raise RecordError(
                        Reason.BAD_TOOL_CALL, f"message {i} call {k} is not an object"
                    )
                fn = c.get("function") if isinstance(c.get("function"), dict) else c
                name = fn.get("name")
                if not isinstance(name, str):
                    raise RecordError(Reason.BAD_TOOL_CALL, f"message {i} call {k} has no name")
                args = fn.get("arguments")
                args = "{}" if args is None else json_text(args)
                orig = c.get("id") if isinstance(c.get("id"), str) and c.get("id") else None
                cid = orig or f"call_{i}_{k}"
                if cid in used:
                    used[cid] += 1
                    cid = f"{cid}~{used[cid]}"
                used.setdefault(cid, 0)
                call = {"id": cid, "name": name, "arguments": args}
                calls.append(call)
                pending.append((orig, call, i))
            n_calls += len(calls)
            msg["tool_calls"] = calls
        elif role == "tool":
            tcid = m.get("tool_call_id")
            if not pending:
                raise RecordError(
                    Reason.TOOL_RESULT_WITHOUT_CALL,
                    f"message {i} is a tool result but no call is pending",
                )
            j = next((j for j, (o, _, _) in enumerate(pending) if tcid and o == tcid), None)
            if j is None:
                # by position only where ids cannot say: the result names none, or the pending
                # calls had none (formats without ids); never another call's result silently
                unnamed = [j for j, (o, _, _) in enumerate(pending) if o is None]
                if tcid and not unnamed:
                    raise RecordError(
                        Reason.TOOL_RESULT_MISMATCH,
                        f"message {i} answers tool_call_id {tcid!r}, which no pending call has "
                        f"(pending: {', '.join(repr(o) for o, _, _ in pending)})",
                    )
                j = unnamed[0] if tcid else 0
            _, call, _ = pending.pop(j)
            msg["tool_call_id"] = call["id"]
            msg["name"] = m.get("name") if isinstance(m.get("name"), str) else call["name"]
            if msg["content"] is None:
                msg["content"] = ""
        out.append(msg)
    unanswered = 0
    if pending:
        # Only calls of the last assistant turn may stay unanswered (terminal actions).
        first_pending_msg = pending[0][2]
        if first_pending_msg != last_assistant:
            raise RecordError(
                Reason.TOOL_CALL_UNANSWERED,
                f"tool call {pending[0][1]['id']} in message {first_pending_msg} has no result",
            )
        unanswered = len(pending)
    return out, n_calls, unanswered


def trajectory_row(rec: TrajectoryRec) -> dict:
    messages, n_calls, unanswered = canonical_messages(rec)
    system_prompt = rec.system_prompt
    if system_prompt is None:
        system_prompt = next((m["content"] for m in messages if m["role"] == "system"), None)
    question = rec.question
    if question is None:
        question = next(
            (m["content"] for m in messages if m["role"] == "user" and m["content"]), None
        )
    if not question or not normalize_question(question):
        raise RecordError(
            Reason.NO_QUESTION, "the trajectory has no user message to take the question from"
        )
    final = rec.final_answer
    if final is None:
        last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
        if last is not None and not last["tool_calls"]:
            final = last["content"]
    meta = dict(rec.metadata)
    if unanswered:
        meta["unanswered_final_calls"] = unanswered
    tools_json = orjson.dumps(rec.tools).decode() if rec.tools else None
    reward = _opt_float(rec.reward, "reward")
    return {
        "trajectory_id": content_id({"m": messages, "t": rec.tools}),
        "question_id": question_id(question),
        "domain": rec.domain,
        "question": question,
        "system_prompt": system_prompt,
        "tools": tools_json,
        "messages": messages,
        "num_messages": len(messages),
        "num_tool_calls": n_calls,
        "final_answer": final if final is None or isinstance(final, str) else json_text(final),
        "ground_truth": rec.ground_truth,
        "reward": reward,
        "is_correct": rec.is_correct,
        "model": rec.model,
        "metadata": _metadata(meta),
    }


def question_row(rec: QuestionRec) -> dict:
    if not isinstance(rec.question, str) or not normalize_question(rec.question):
        raise RecordError(Reason.NO_QUESTION, "empty question text")
    return {
        "question_id": question_id(rec.question),
        "dataset": rec.dataset,
        "split": rec.split,
        "domain": rec.domain,
        "question": rec.question,
        "ground_truth": rec.ground_truth,
        "ground_truth_raw": rec.ground_truth_raw,
        "answer_type": rec.answer_type,
        "tools": orjson.dumps(rec.tools).decode() if rec.tools else None,
        "metadata": _metadata(rec.metadata),
    }


def attempt_row(rec: AttemptRec, trajectory_id: str | None) -> dict:
    if not isinstance(rec.question, str) or not normalize_question(rec.question):
        raise RecordError(Reason.NO_QUESTION, "empty question text")
    qid = question_id(rec.question)
    return {
        "attempt_id": content_id([qid, rec.policy, rec.attempt_index, rec.response]),
        "question_id": qid,
        "domain": rec.domain,
        "question": rec.question,
        "ground_truth": rec.ground_truth,
        "policy": rec.policy,
        "attempt_index": rec.attempt_index,
        "response": rec.response,
        "prediction": rec.prediction,
        "score": _opt_float(rec.score, "score"),
        "is_correct": rec.is_correct,
        "trajectory_id": trajectory_id,
        "metadata": _metadata(rec.metadata),
    }

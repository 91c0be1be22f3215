"""OpenHands event streams: a JSON array of action and observation events, one file = one
trajectory.

Decisions: a ``message`` action from the user is a user turn, from the agent an assistant turn.
Any other agent action is an assistant turn calling the tool named in
``tool_call_metadata.function_name`` (else the action type) with the call id from the metadata
and the arguments of the original LLM call when ``model_response`` holds them (else the
action's ``args``); its ``thought`` is the content. An observation answers the action named by
its ``cause``. ``finish`` is a terminal call whose ``message`` is ``final_answer``. Events of
other sources (environment, system recalls) are counted in metadata, not turned into turns.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader
from pipeline.ingest.records import Rec, TrajectoryRec, json_text


def _llm_arguments(meta: dict, call_id: str | None) -> str | None:
    resp = meta.get("model_response")
    try:
        for c in resp["choices"][0]["message"]["tool_calls"]:
            if c.get("id") == call_id:
                return c["function"]["arguments"]
    except (KeyError, IndexError, TypeError):
        return None
    return None


def _model(events: list) -> str | None:
    for e in events:
        meta = e.get("tool_call_metadata") if isinstance(e, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("model_response"), dict):
            return meta["model_response"].get("model")
    return None


class OpenHandsReader(Reader):
    name = "openhands"
    description = "OpenHands event stream (action / observation events linked by cause)"
    whole_file = True

    def sniff(self, sample: Any, path: str) -> bool:
        return (
            isinstance(sample, dict)
            and "source" in sample
            and "id" in sample
            and ("action" in sample or "observation" in sample)
        )

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        if not isinstance(value, list):
            raise RecordError(
                Reason.WRONG_TYPE, "an OpenHands trajectory is a JSON array of events"
            )
        msgs: list[dict] = []
        call_of_action: dict[Any, str] = {}
        skipped = 0
        final = None
        for i, e in enumerate(value):
            if not isinstance(e, dict):
                raise RecordError(Reason.WRONG_TYPE, f"event {i} is not an object")
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            if "action" in e:
                action, src = e["action"], e.get("source")
                if action == "message" and src in ("user", "agent"):
                    msgs.append(
                        {
                            "role": "user" if src == "user" else "assistant",
                            "content": args.get("content", e.get("message")),
                        }
                    )
                elif src == "agent":
                    meta = (
                        e.get("tool_call_metadata")
                        if isinstance(e.get("tool_call_metadata"), dict)
                        else {}
                    )
                    call_id = meta.get("tool_call_id") or f"oh_{e.get('id')}"
                    name = meta.get("function_name") or action
                    arguments = _llm_arguments(meta, call_id) or json_text(
                        {k: v for k, v in args.items() if k != "thought"}
                    )
                    thought = args.get("thought") or None
                    if action == "finish":
                        final = e.get("message") or (args.get("outputs") or {}).get("content")
                    msgs.append(
                        {
                            "role": "assistant",
                            "content": thought,
                            "tool_calls": [{"id": call_id, "name": name, "arguments": arguments}],
                        }
                    )
                    call_of_action[e.get("id")] = call_id
                else:
                    skipped += 1
            elif "observation" in e:
                cause = e.get("cause")
                if cause in call_of_action:
                    msgs.append(
                        {
                            "role": "tool",
                            "content": e.get("content") or e.get("message") or "",
                            "tool_call_id": call_of_action.pop(cause),
                        }
                    )
                else:
                    skipped += 1
            else:
                skipped += 1
        yield TrajectoryRec(
            messages=msgs,
            domain="software_engineering",
            final_answer=final,
            model=_model(value),
            metadata={"events": len(value), "events_not_turns": skipped},
        )

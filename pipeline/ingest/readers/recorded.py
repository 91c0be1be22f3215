"""Episodes written by the trajectory recorder (``flow record``, ``pipeline.recorder``): OpenAI
chat messages as the client sent and received them, plus the recording's evidence (per-turn
timing, model, sampling parameters, usage, token ids and log-probs when the upstream returned
them, decision points) kept in ``metadata.recorder``.

An episode with no answered call (every call failed upstream, or the request had no
conversation), or one that ends in an answer the client never received whole (closed as
``unseen``), is quarantined with the reason, so the counts of the commit still add up."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader
from pipeline.ingest.readers.openai_chat import from_openai_messages
from pipeline.ingest.records import Rec, TrajectoryRec, openai_tools, require

_EVIDENCE = (
    "episode_id",
    "session",
    "closed_by",
    "continues",
    "branch_of",
    "instances",
    "request_ids",
    "started_at",
    "ended_at",
    "turns",
    "decision_points",
)


class RecordedReader(Reader):
    name = "recorded"
    description = "episodes of the trajectory recorder (flow record / record_openai)"

    def sniff(self, sample: Any, path: str) -> bool:
        return isinstance(sample, dict) and sample.get("flow_recorder") == 1

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        msgs = require(value, "messages", list)
        if value.get("closed_by") == "unseen":
            why = next(
                (t.get("unseen") for t in reversed(value.get("turns") or []) if t.get("unseen")),
                None,
            )
            raise RecordError(
                Reason.ANSWER_NOT_SEEN,
                f"recorded episode {value.get('episode_id')} ends in an answer the client never "
                f"received whole ({why}) and no re-sent request replaced it: its log lines are "
                "kept, it is not a trajectory",
            )
        if not any(isinstance(m, dict) and m.get("role") == "assistant" for m in msgs):
            turns = value.get("turns") or []
            errors = sorted({str(t.get("status")) for t in turns if isinstance(t, dict)})
            raise RecordError(
                Reason.NO_ROWS,
                f"recorded episode {value.get('episode_id')} has no answered call "
                f"({value.get('closed_by') or 'failed'}; statuses {', '.join(errors) or 'none'})",
            )
        dp = value.get("decision_points") or []
        yield TrajectoryRec(
            messages=from_openai_messages(msgs),
            tools=openai_tools(value.get("tools")),
            ground_truth=value["answer"] if isinstance(value.get("answer"), str) else None,
            domain=value["domain"] if isinstance(value.get("domain"), str) else None,
            model=value["model"] if isinstance(value.get("model"), str) else None,
            metadata={
                "recorder": {k: value.get(k) for k in _EVIDENCE},
                "tool_errors": sum(1 for d in dp if d.get("kind") == "tool_error"),
            },
        )

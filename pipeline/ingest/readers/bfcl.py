"""BFCL v3 function-calling questions (JSONL despite the ``.json`` suffix), joined on ``id`` with
``possible_answer/<same file>``; multi-turn tool docs come from ``multi_turn_func_doc/``.

Decisions: the question text is the user turns joined by a blank line (multi-turn questions keep
all turns, so two questions differing in a later turn get different ids); the turns themselves
are in metadata. ``ground_truth`` is the possible answer as JSON text, ``answer_type``
``function_calls``; ``irrelevance`` questions have ground truth ``[]`` (call nothing). Answer
files and tool-doc files are companions: they are logged, not ingested as rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import fsspec
import orjson

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader, has_keys
from pipeline.ingest.records import QuestionRec, Rec, openai_tools

CLASS_DOCS = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}


def _jsonl(path: str) -> list[dict]:
    try:
        with fsspec.open(path, "rb") as f:
            return [orjson.loads(line) for line in f if line.strip()]
    except (FileNotFoundError, OSError):
        return []


def _answers(ctx: Context) -> dict:
    key = ("bfcl_answers", ctx.path)
    if key not in ctx.cache:
        folder, name = ctx.path.rsplit("/", 1)
        ctx.cache[key] = {
            r.get("id"): r.get("ground_truth") for r in _jsonl(f"{folder}/possible_answer/{name}")
        }
    return ctx.cache[key]


def _class_docs(ctx: Context, cls: str) -> list[dict]:
    key = ("bfcl_docs", cls)
    if key not in ctx.cache:
        folder = ctx.path.rsplit("/", 1)[0]
        ctx.cache[key] = (
            _jsonl(f"{folder}/multi_turn_func_doc/{CLASS_DOCS.get(cls, '')}")
            if cls in CLASS_DOCS
            else []
        )
    return ctx.cache[key]


class BFCLReader(Reader):
    name = "bfcl"
    description = "BFCL v3 questions (id, question turns, function) + possible_answer join"

    def sniff(self, sample: Any, path: str) -> bool:
        return has_keys(sample, "id", "question") and (
            "function" in sample or "involved_classes" in sample
        )

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        if not isinstance(value, dict):
            raise RecordError(Reason.NOT_AN_OBJECT, "record is not an object")
        turns = value.get("question")
        if not isinstance(turns, list) or not all(isinstance(t, list) for t in turns):
            raise RecordError(Reason.WRONG_TYPE, "question is not a list of turns")
        users = [
            m.get("content", "")
            for t in turns
            for m in t
            if isinstance(m, dict) and m.get("role") == "user"
        ]
        if not users:
            raise RecordError(Reason.NO_QUESTION, "no user message in question turns")
        qid = value.get("id")
        category = str(qid).rsplit("_", 1)[0] if qid else "bfcl"
        if "function" in value:
            tools = openai_tools(value["function"])
        else:
            excluded = set(value.get("excluded_function") or [])
            docs = [
                d
                for cls in value.get("involved_classes") or []
                for d in _class_docs(ctx, cls)
                if d.get("name") not in excluded
            ]
            tools = openai_tools(
                [{k: d.get(k) for k in ("name", "description", "parameters")} for d in docs]
            )
        answers = _answers(ctx)
        if category.endswith("irrelevance"):
            gt = []
        elif qid in answers:
            gt = answers[qid]
        else:
            gt = None
        systems = [
            m.get("content", "")
            for t in turns
            for m in t
            if isinstance(m, dict) and m.get("role") == "system"
        ]
        yield QuestionRec(
            question="\n\n".join(users),
            ground_truth=None if gt is None else orjson.dumps(gt).decode(),
            ground_truth_raw=None if gt is None else orjson.dumps(gt).decode(),
            answer_type="function_calls",
            dataset=f"bfcl_{category}",
            split="test",
            domain="function_calling",
            tools=tools,
            metadata={
                "bfcl_id": qid,
                "turns": turns,
                "system": systems or None,
                "path": value.get("path"),
                "initial_config": value.get("initial_config"),
            },
        )


class BFCLCompanionReader(Reader):
    """BFCL possible answers and multi-turn tool docs: read by ``BFCLReader`` through the join."""

    name = "bfcl_companion"
    description = "BFCL possible_answer / multi_turn_func_doc files (joined, not ingested)"
    companion = True

    def sniff(self, sample: Any, path: str) -> bool:
        if "/possible_answer/" in path and has_keys(sample, "id", "ground_truth"):
            return True
        return "/multi_turn_func_doc/" in path and has_keys(sample, "name", "parameters")

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        return []

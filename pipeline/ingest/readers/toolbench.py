"""ToolBench DFSDT answers (legacy OpenAI ``function_call`` / ``role: function``) and query files.

Decisions: ``train_messages`` is a list of cumulative prefixes; the longest one is the whole
chain and the only one kept (the others are its prefixes). The ``Finish`` pseudo-call is the
terminal call: its ``final_answer`` argument becomes ``final_answer``. ``win`` gives
``is_correct`` and reward 1/0. Files with ``valid_data: false`` and no ``train_messages`` are
quarantined (``missing_field``). The search tree is not copied (lineage points to the file).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader, has_keys
from pipeline.ingest.readers.openai_chat import from_openai_messages
from pipeline.ingest.records import QuestionRec, Rec, TrajectoryRec, openai_tools, require


def _finish_answer(messages: list[dict]) -> str | None:
    for m in reversed(messages):
        for c in m.get("tool_calls") or []:
            fn = c.get("function", c)
            if fn.get("name") == "Finish":
                try:
                    args = orjson.loads(fn.get("arguments") or "{}")
                except orjson.JSONDecodeError:
                    return None
                return args.get("final_answer") if isinstance(args, dict) else None
    return None


class ToolBenchAnswerReader(Reader):
    name = "toolbench"
    description = "ToolBench DFSDT answer files (answer_generation.train_messages)"

    def sniff(self, sample: Any, path: str) -> bool:
        return has_keys(sample, "answer_generation")

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        gen = require(value, "answer_generation", dict)
        prefixes = gen.get("train_messages")
        if not isinstance(prefixes, list) or not prefixes:
            raise RecordError(
                Reason.MISSING_FIELD,
                f"answer_generation has no train_messages (valid_data={gen.get('valid_data')})",
            )
        longest = max(prefixes, key=lambda p: len(p) if isinstance(p, list) else -1)
        messages = from_openai_messages(longest)
        win = value.get("win")
        yield TrajectoryRec(
            messages=messages,
            tools=openai_tools(gen.get("function")),
            question=gen.get("query") if isinstance(gen.get("query"), str) else None,
            domain="api_calls",
            final_answer=_finish_answer(messages),
            reward=(1.0 if win else 0.0) if isinstance(win, bool) else None,
            is_correct=win if isinstance(win, bool) else None,
            model="gpt-3.5-turbo",
            metadata={
                "finish_type": gen.get("finish_type"),
                "query_count": gen.get("query_count"),
                "total_tokens": gen.get("total_tokens"),
                "num_prefixes": len(prefixes),
                "forward_args": value.get("forward_args"),
            },
        )


class ToolBenchQueryReader(Reader):
    name = "toolbench_query"
    description = (
        "ToolBench instruction files: [{query, api_list, query_id}] (questions, no answer)"
    )

    def sniff(self, sample: Any, path: str) -> bool:
        return has_keys(sample, "query", "api_list")

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        query = require(value, "query", str)
        stem = ctx.path.rsplit("/", 1)[-1].split(".")[0]
        yield QuestionRec(
            question=query,
            ground_truth=None,
            ground_truth_raw=None,
            answer_type=None,
            dataset=f"toolbench_{stem}",
            domain="api_calls",
            metadata={
                "query_id": value.get("query_id"),
                "api_list": value.get("api_list"),
                "relevant_apis": value.get("relevant APIs"),
            },
        )

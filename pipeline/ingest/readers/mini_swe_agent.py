"""mini-swe-agent ``.traj.json`` (``trajectory_format: mini-swe-agent-*``).

Decisions: the ``exit`` message is not a chat role; it is dropped from ``messages`` and its
content (the patch, or the error) becomes ``final_answer``, with ``exit_status`` in metadata.
The last assistant call (``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``) has no result: allowed as
a terminal call. Per-message ``extra`` (raw provider responses, most of each file's bytes) is not
copied; lineage points back to the file. ``reasoning_content`` becomes ``reasoning``. The question
is the PR description inside ``<pr_description>`` (the rest of the first user turn is a
template shared by all instances). The reward
is 1/0 from a ``results.json`` (SWE-bench report: ``resolved_ids``) in the same folder, if any.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import fsspec
import orjson

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader, has_keys
from pipeline.ingest.readers.openai_chat import from_openai_message
from pipeline.ingest.records import Rec, TrajectoryRec, require

PR_RE = re.compile(
    r"<pr_description>\s*(?:Consider the following PR description:\s*)?(.*?)\s*</pr_description>",
    re.S,
)


def task_statement(messages: list[dict]) -> str | None:
    """The PR description inside the templated first user turn: the task's identity, so the
    prompt template shared by every instance does not make all instances look alike."""
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            found = PR_RE.search(m["content"])
            return found.group(1) if found else None
    return None


def _results(ctx: Context) -> dict | None:
    folder = ctx.path.rsplit("/", 1)[0]
    key = ("swebench_results", folder)
    if key not in ctx.cache:
        path = f"{folder}/results.json"
        try:
            with fsspec.open(path, "rb") as f:
                ctx.cache[key] = orjson.loads(f.read())
        except (FileNotFoundError, orjson.JSONDecodeError, OSError):
            ctx.cache[key] = None
    return ctx.cache[key]


class MiniSweAgentReader(Reader):
    name = "mini_swe_agent"
    description = "mini-swe-agent trajectories (OpenAI tool calls, extra 'exit' role)"

    def sniff(self, sample: Any, path: str) -> bool:
        return isinstance(sample, dict) and str(sample.get("trajectory_format", "")).startswith(
            "mini-swe-agent"
        )

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        msgs = require(value, "messages", list)
        info = value.get("info") if isinstance(value.get("info"), dict) else {}
        out, final, exit_extra = [], None, {}
        for i, m in enumerate(msgs):
            if isinstance(m, dict) and m.get("role") == "exit":
                final = m.get("content")
                exit_extra = m.get("extra") if isinstance(m.get("extra"), dict) else {}
                continue
            out.append(from_openai_message(m, i))
        instance = value.get("instance_id") or ctx.path.rsplit("/", 1)[-1].split(".traj")[0]
        cfg = info.get("config") if isinstance(info.get("config"), dict) else {}
        model_cfg = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
        results = _results(ctx)
        reward = correct = None
        if results and isinstance(results.get("resolved_ids"), list):
            correct = instance in results["resolved_ids"]
            reward = 1.0 if correct else 0.0
        exit_status = info.get("exit_status") or exit_extra.get("exit_status")
        if not any(m.get("role") == "user" for m in out):
            raise RecordError(Reason.NO_QUESTION, "trajectory has no user message")
        yield TrajectoryRec(
            messages=out,
            question=task_statement(out),
            domain="software_engineering",
            final_answer=final if isinstance(final, str) else None,
            reward=reward,
            is_correct=correct,
            model=model_cfg.get("model_name"),
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "bash",
                        "description": "Run a shell command",
                        "parameters": {
                            "type": "object",
                            "properties": {"command": {"type": "string"}},
                            "required": ["command"],
                        },
                    },
                }
            ],
            metadata={
                "instance_id": instance,
                "exit_status": exit_status,
                "model_stats": info.get("model_stats"),
                "mini_version": info.get("mini_version"),
                "exception": exit_extra.get("exception_str"),
            },
        )


class SweBenchResultsReader(Reader):
    """A SWE-bench harness report: supplies rewards to the trajectories beside it."""

    name = "swebench_results"
    description = "SWE-bench report (resolved_ids): companion of mini-swe-agent trajectories"
    companion = True

    def sniff(self, sample: Any, path: str) -> bool:
        return has_keys(sample, "resolved_ids")

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        return []

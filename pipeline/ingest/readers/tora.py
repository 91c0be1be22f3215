"""Code-interpreter text (ToRA): one assistant string interleaving ```python blocks with
```output blocks and prose, final answer in ``\\boxed{}``.

Decisions: each ```python block becomes a call of tool ``python`` with ``{"code": …}``, the
```output block after it its result; prose before a block is that assistant message's content.
A python block with no output block (one shared row) is a terminal call. ToRA output files
(``code``/``pred``/``gt``) also give one attempt per row, correct when ``pred`` and ``gt`` are
numerically equal (float compare, tolerance 1e-6), otherwise compared as stripped strings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pipeline.ingest.errors import Reason, RecordError
from pipeline.ingest.readers.base import Context, Reader, has_keys
from pipeline.ingest.records import AttemptRec, Rec, TrajectoryRec, openai_tools, require

BLOCK_RE = re.compile(r"```(python|output)\n(.*?)```", re.S)
PYTHON_TOOL = [
    {
        "name": "python",
        "description": "Run Python code and return its printed output",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string"}},
            "required": ["code"],
        },
    }
]


def split_code_trace(text: str) -> list[dict]:
    """Assistant/tool messages from one interleaved code-interpreter string."""
    msgs: list[dict] = []
    pos, prose = 0, []
    for m in BLOCK_RE.finditer(text):
        between = text[pos : m.start()].strip()
        if between:
            prose.append(between)
        kind, body = m.group(1), m.group(2)
        if kind == "python":
            msgs.append(
                {
                    "role": "assistant",
                    "content": "\n".join(prose) or None,
                    "tool_calls": [{"name": "python", "arguments": {"code": body}}],
                }
            )
            prose = []
        elif msgs and msgs[-1]["role"] == "assistant" and msgs[-1].get("tool_calls"):
            msgs.append({"role": "tool", "content": body.rstrip("\n")})
        else:
            prose.append(m.group(0))  # an output block with no code before it: keep as text
        pos = m.end()
    tail = text[pos:].strip()
    if tail:
        prose.append(tail)
    if prose:
        msgs.append({"role": "assistant", "content": "\n".join(prose)})
    return msgs


def numeric_equal(a: Any, b: Any) -> bool:
    try:
        return abs(float(str(a).replace(",", "")) - float(str(b).replace(",", ""))) <= 1e-6 * max(
            1.0, abs(float(str(b).replace(",", "")))
        )
    except (TypeError, ValueError):
        return str(a).strip() == str(b).strip()


def _model(path: str) -> str | None:
    m = re.search(r"llm-agents/([^/]+)/", path)
    return m.group(1) if m else None


class ToRAReader(Reader):
    name = "tora"
    description = "ToRA code-interpreter traces: outputs {code, pred, gt} or examples {messages}"

    def sniff(self, sample: Any, path: str) -> bool:
        if has_keys(sample, "code", "pred", "gt", "question"):
            return True
        msgs = sample.get("messages") if isinstance(sample, dict) else None
        return (
            has_keys(sample, "gt", "messages")
            and isinstance(msgs, list)
            and any(isinstance(m, dict) and "```python" in str(m.get("content")) for m in msgs)
        )

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:
        if not isinstance(value, dict):
            raise RecordError(Reason.NOT_AN_OBJECT, "record is not an object")
        gt = value.get("gt")
        gt = None if gt is None else str(gt)
        if "messages" in value:
            msgs = require(value, "messages", list)
            out = []
            for i, m in enumerate(msgs):
                if not isinstance(m, dict):
                    raise RecordError(Reason.WRONG_TYPE, f"message {i} is not an object")
                if m.get("role") == "assistant" and isinstance(m.get("content"), str):
                    out.extend(split_code_trace(m["content"]))
                else:
                    out.append(m)
            yield TrajectoryRec(
                messages=out,
                tools=openai_tools(PYTHON_TOOL),
                domain="math",
                ground_truth=gt,
                metadata={
                    "id": value.get("id"),
                    "level": value.get("level"),
                    "dataset": value.get("dataset"),
                },
            )
            return
        question = require(value, "question", str)
        codes = require(value, "code", list)
        preds = value.get("pred") if isinstance(value.get("pred"), list) else []
        model = _model(ctx.path)
        for k, code in enumerate(codes):
            if not isinstance(code, str):
                raise RecordError(Reason.WRONG_TYPE, f"code[{k}] is not text")
            pred = preds[k] if k < len(preds) else None
            correct = None if gt is None or pred is None else numeric_equal(pred, gt)
            msgs = [{"role": "user", "content": question}, *split_code_trace(code)]
            t = TrajectoryRec(
                messages=msgs,
                tools=openai_tools(PYTHON_TOOL),
                domain="math",
                final_answer=None if pred is None else str(pred),
                ground_truth=gt,
                reward=None if correct is None else float(correct),
                is_correct=correct,
                model=model,
                metadata={"idx": value.get("idx")},
            )
            yield AttemptRec(
                question=question,
                ground_truth=gt,
                policy=model,
                attempt_index=k,
                response=code,
                prediction=None if pred is None else str(pred),
                score=t.reward,
                is_correct=correct,
                domain="math",
                metadata={"idx": value.get("idx")},
                trajectory=t,
            )

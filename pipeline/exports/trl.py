"""TRL exports.

* SFT (``trl_sft.jsonl``): ``{"messages": [...], "tools": [...]}`` per line, the conversational
  shape ``SFTTrainer`` reads: assistant ``tool_calls`` as ``{"type": "function", "function":
  {"name", "arguments"}}`` with ``arguments`` a dict (or a JSON string, see ``ExportConfig``), tool
  results as ``{"role": "tool", "name", "content"}``.
* GRPO (``trl_grpo.parquet``): a conversational ``prompt`` plus ``solution`` (what
  ``trl.rewards.accuracy_reward`` reads), ``ground_truth`` and ``answer_type`` (what
  ``pipeline.exports.rewards.trl_reward`` reads). ``GRPOTrainer`` passes every extra column to the
  reward functions as keyword arguments. Tools reach TRL through ``GRPOTrainer(tools=[...])``.
  Function-calling rows also carry ``tools`` and ``category`` (for
  ``pipeline.exports.rewards.trl_function_call_reward``: format +1, arguments +1, result +2, as
  ``flow train`` scores them), and their tools in the system message.
"""

from __future__ import annotations

import orjson
import pyarrow as pa

from pipeline.exports.common import PROMPT, parquet, prompt
from pipeline.exports.config import ExportConfig


def _arguments(raw: str, config: ExportConfig, record_id: str):
    if config.tool_arguments == "string":
        return raw
    try:
        args = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"record {record_id}: tool-call arguments are not JSON: {e}") from e
    if not isinstance(args, dict):
        raise ValueError(f"record {record_id}: tool-call arguments are not a JSON object")
    return args


def openai_message(m: dict, config: ExportConfig, record_id: str = "?") -> dict:
    out = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": _arguments(c["arguments"], config, record_id),
                },
            }
            for c in m["tool_calls"]
        ]
    if m["role"] == "tool":
        out["tool_call_id"] = m.get("tool_call_id")
        if m.get("name"):
            out["name"] = m["name"]
    return out


def sft(rows: list[dict], config: ExportConfig) -> bytes:
    lines = []
    for r in rows:
        rec = {"messages": [openai_message(m, config, r["record_id"]) for m in r["messages"]]}
        if r.get("tools"):
            rec["tools"] = orjson.loads(r["tools"])
        lines.append(orjson.dumps(rec))
    return b"\n".join(lines) + (b"\n" if lines else b"")


GRPO_SCHEMA = pa.schema(
    [
        ("prompt", PROMPT),
        ("solution", pa.string()),
        ("ground_truth", pa.string()),
        ("answer_type", pa.string()),
        ("question_id", pa.string()),
        # function-calling rows: the question's own tool specs (JSON) and its BFCL category,
        # what ``trl_function_call_reward`` needs; null elsewhere
        ("tools", pa.string()),
        ("category", pa.string()),
    ]
)


def tools_system(tools: str, system: str | None) -> str:
    """A function-calling row's system message: the tools in the Hermes shape Qwen's template
    writes (GRPOTrainer renders one tool list for the whole run; these differ per row)."""
    specs = "\n".join(orjson.dumps(t).decode() for t in orjson.loads(tools))
    return (
        (system + "\n\n" if system else "")
        + "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + specs
        + "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def grpo(rows: list[dict], system: str | None) -> bytes:
    out = []
    for q in rows:
        calls = q["answer_type"] == "function_calls" and bool(q.get("tools"))
        out.append(
            {
                "prompt": prompt(q, tools_system(q["tools"], system) if calls else system),
                "solution": q["ground_truth"],
                "ground_truth": q["ground_truth"],
                "answer_type": q["answer_type"],
                "question_id": q["question_id"],
                "tools": q["tools"] if calls else None,
                "category": (q.get("datasets") or ["simple"])[0].split("/")[0] if calls else None,
            }
        )
    return parquet(out, GRPO_SCHEMA)

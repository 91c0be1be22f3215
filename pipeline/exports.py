"""Dataset exports in the shapes other trainers load as they are.

* TRL SFT (``trl_sft.jsonl``): ``{"messages": [...], "tools": [...]}`` per line, messages in the
  OpenAI shape (assistant ``tool_calls`` as ``{"type": "function", "function": {"name",
  "arguments"}}``, tool results with ``tool_call_id``), as TRL's ``SFTTrainer`` reads
  conversational datasets with tools.
* TRL GRPO (``trl_grpo.parquet``): ``prompt`` (system + user messages) plus ``ground_truth``
  and ``answer_type`` columns, which ``GRPOTrainer`` passes to reward functions as kwargs.
* verl (``verl.parquet``): ``data_source``, ``prompt`` (list of role/content), ``ability``,
  ``reward_model`` ``{style: "rule", ground_truth}``, ``extra_info`` (index, split, question_id,
  difficulty, pass_rate), the columns of verl's RL datasets.
* LLaMA-Factory ShareGPT (``llamafactory_sharegpt.json`` + ``dataset_info.json``): a JSON array
  of ``{"conversations": [{"from": human|gpt|function_call|observation, "value"}], "system",
  "tools"}`` with the ``dataset_info`` entry that maps those tags.
"""

from __future__ import annotations

import contextlib
import io

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.lake import PARQUET_OPTIONS
from pipeline.rollout.agent import SYSTEM


def _openai_message(m: dict) -> dict:
    out = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in m["tool_calls"]
        ]
    if m["role"] == "tool":
        out["tool_call_id"] = m.get("tool_call_id")
    return out


def trl_sft(rows: list[dict]) -> bytes:
    lines = []
    for r in rows:
        rec = {"messages": [_openai_message(m) for m in r["messages"]]}
        if r.get("tools"):
            rec["tools"] = orjson.loads(r["tools"])
        lines.append(orjson.dumps(rec))
    return b"\n".join(lines) + (b"\n" if lines else b"")


def _prompt(q: dict) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q["question"]}]


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **PARQUET_OPTIONS)
    return buf.getvalue()


def trl_grpo(rows: list[dict]) -> bytes:
    return _parquet(
        pa.Table.from_pylist(
            [
                {
                    "prompt": _prompt(q),
                    "ground_truth": q["ground_truth"],
                    "answer_type": q["answer_type"],
                    "question_id": q["question_id"],
                }
                for q in rows
            ]
        )
    )


def verl(rows: list[dict], split: str = "train") -> bytes:
    recs = [
        {
            "data_source": (q.get("datasets") or [q.get("source") or "lake"])[0],
            "prompt": _prompt(q),
            "ability": q.get("domain") or "unknown",
            "reward_model": {"style": "rule", "ground_truth": q["ground_truth"]},
            "extra_info": {
                "index": i,
                "split": split,
                "question_id": q["question_id"],
                "difficulty": q["difficulty"],
                "pass_rate": q["pass_rate"],
            },
        }
        for i, q in enumerate(rows)
    ]
    return _parquet(pa.Table.from_pylist(recs))


_SHAREGPT_ROLE = {"user": "human", "assistant": "gpt", "tool": "observation"}


def llamafactory(rows: list[dict], name: str) -> tuple[bytes, bytes]:
    out = []
    for r in rows:
        conv, system = [], None
        for m in r["messages"]:
            if m["role"] == "system":
                system = m.get("content")
                continue
            if m["role"] == "assistant" and m.get("tool_calls"):
                if m.get("content"):
                    conv.append({"from": "gpt", "value": m["content"]})
                for c in m["tool_calls"]:
                    args = c["arguments"]
                    with contextlib.suppress(orjson.JSONDecodeError):
                        args = orjson.loads(args)
                    conv.append(
                        {
                            "from": "function_call",
                            "value": orjson.dumps({"name": c["name"], "arguments": args}).decode(),
                        }
                    )
                continue
            conv.append({"from": _SHAREGPT_ROLE[m["role"]], "value": m.get("content") or ""})
        tools = [t.get("function", t) for t in orjson.loads(r["tools"])] if r.get("tools") else []
        out.append(
            {
                "conversations": conv,
                "system": system or "",
                "tools": orjson.dumps(tools).decode() if tools else "",
            }
        )
    info = {
        name: {
            "file_name": "llamafactory_sharegpt.json",
            "formatting": "sharegpt",
            "columns": {"messages": "conversations", "system": "system", "tools": "tools"},
        }
    }
    return orjson.dumps(out, option=orjson.OPT_INDENT_2), orjson.dumps(
        info, option=orjson.OPT_INDENT_2
    )

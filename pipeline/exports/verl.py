"""verl export (``verl.parquet``): the columns of verl's ``RLHFDataset``.

``data_source, prompt (role/content list), ability, reward_model {style: "rule", ground_truth},
agent_name, extra_info {index, split, question_id, answer_type, difficulty, pass_rate,
tools_kwargs}``. verl's default reward function only knows its own data sources; point
``reward.custom_reward_function`` at ``pkg://pipeline.exports.rewards`` (name ``compute_score``),
which reads ``extra_info.answer_type`` and calls the project's verifier. Questions answered with
the python tool get ``agent_name`` = the configured tool agent (``tool_agent``), whose tool is
``pipeline/exports/verl_tools.py`` (``actor_rollout_ref.rollout.multi_turn.function_tool_path``).
"""

from __future__ import annotations

import pyarrow as pa

from pipeline.exports.common import PROMPT, parquet, prompt
from pipeline.exports.config import ExportConfig

SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", PROMPT),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("agent_name", pa.string()),
        (
            "extra_info",
            pa.struct(
                [
                    ("index", pa.int64()),
                    ("split", pa.string()),
                    ("question_id", pa.string()),
                    ("answer_type", pa.string()),
                    ("difficulty", pa.string()),
                    ("pass_rate", pa.float64()),
                    (
                        "tools_kwargs",
                        pa.struct(
                            [
                                (
                                    "python",
                                    pa.struct(
                                        [
                                            (
                                                "create_kwargs",
                                                pa.struct([("question_id", pa.string())]),
                                            )
                                        ]
                                    ),
                                )
                            ]
                        ),
                    ),
                ]
            ),
        ),
    ]
)


def uses_python_tool(q: dict) -> bool:
    """Questions whose answer is a function call are judged on the call itself: no tool runs."""
    return q.get("answer_type") != "function_calls"


def export(
    rows: list[dict], system: str | None, config: ExportConfig, split: str = "train"
) -> bytes:
    recs = []
    for i, q in enumerate(rows):
        tools = uses_python_tool(q)
        recs.append(
            {
                "data_source": (q.get("datasets") or [q.get("source") or "lake"])[0],
                "prompt": prompt(q, system),
                "ability": q.get("domain") or "unknown",
                "reward_model": {"style": "rule", "ground_truth": q["ground_truth"]},
                "agent_name": config.verl_agent if tools else "single_turn_agent",
                "extra_info": {
                    "index": i,
                    "split": split,
                    "question_id": q["question_id"],
                    "answer_type": q["answer_type"],
                    "difficulty": q["difficulty"],
                    "pass_rate": q["pass_rate"],
                    "tools_kwargs": (
                        {"python": {"create_kwargs": {"question_id": q["question_id"]}}}
                        if tools
                        else None
                    ),
                },
            }
        )
    return parquet(recs, SCHEMA)

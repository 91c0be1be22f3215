"""Helpers the exports share: the RL prompt and in-memory Parquet."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.lake import PARQUET_OPTIONS
from pipeline.rollout.agent import head_messages


def prompt(q: dict, system: str | None) -> list[dict]:
    """The RL prompt, opened as the agent loop opens an episode."""
    return head_messages(q["question"], system)


def parquet(rows: list[dict], schema: pa.Schema) -> bytes:
    """Rows as Parquet bytes; an empty list still carries the columns."""
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buf, **PARQUET_OPTIONS)
    return buf.getvalue()


PROMPT = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))

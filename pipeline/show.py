"""Render one trajectory readably in a terminal (rich): roles, reasoning, tool calls with their
arguments, tool results, final answer and reward."""

from __future__ import annotations

import orjson
from rich.console import Console, Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from pipeline.lake import Lake
from pipeline.lake.query import query
from pipeline.terminal import clean

STYLE = {"system": "dim", "user": "bold cyan", "assistant": "bold green", "tool": "yellow"}


def check_id(record_id: str) -> str:
    """The id in lower case, if it is hex of at least 6 characters (it goes into SQL)."""
    key = record_id.lower()
    if len(key) < 6 or not all(c in "0123456789abcdef" for c in key):
        raise ValueError(
            "give a trajectory or record id (hex) or a prefix of at least 6 characters"
        )
    return key


def find_trajectory(lake: Lake, trajectory_id: str) -> dict | None:
    """By exact id or a unique prefix (at least 6 characters)."""
    check_id(trajectory_id)
    rows = query(
        lake,
        f"SELECT * FROM trajectories WHERE trajectory_id LIKE '{trajectory_id.lower()}%' ORDER BY source_uri, source_index LIMIT 2",
    ).to_pylist()
    if len({r["trajectory_id"] for r in rows}) > 1:
        raise ValueError(
            f"prefix {trajectory_id!r} matches several trajectories; give more characters"
        )
    return rows[0] if rows else None


def find_record(lake: Lake, record_id: str) -> tuple[str, dict] | None:
    """(table, row) for a trajectory id, or a record id of a trajectory, a pool question or an
    attempt (what a dataset's RL and SFT rows name as their lineage), by exact id or a unique
    prefix (at least 6 characters)."""
    row = find_trajectory(lake, record_id)  # checks the id is hex, 6+ characters
    if row is not None:
        return "trajectories", row
    key = check_id(record_id)  # never SQL from unchecked input
    hits = [
        (table, r)
        for table in ("trajectories", "questions", "attempts")
        for r in query(
            lake,
            f"SELECT * FROM {table} WHERE record_id LIKE '{key}%' ORDER BY record_id LIMIT 2",
        ).to_pylist()
    ]
    if len({r["record_id"] for _, r in hits}) > 1:
        raise ValueError(f"prefix {record_id!r} matches several records; give more characters")
    return hits[0] if hits else None


def render_record(table: str, row: dict, console: Console | None = None, max_chars: int = 2000):
    """A trajectory as ``render``; a pool question or an attempt as its question, answer and
    lineage."""
    if table == "trajectories":
        return render(row, console, max_chars)
    console = console or Console()
    kind = "question" if table == "questions" else "attempt"
    where = clean(
        f"{row['source']} ({row['source_format']}) {row['source_uri']}#{row['source_index']}"
    )
    extra = (
        f"dataset {row.get('dataset')}/{row.get('split') or ''}  answer type {row.get('answer_type')}"
        if kind == "question"
        else f"policy {row.get('policy')}  attempt {row.get('attempt_index')}  score "
        f"{row.get('score')}  correct {row.get('is_correct')}"
    )
    head = Text.assemble(
        (f"{kind} ", "bold"), row["record_id"], "\n", ("source ", "bold"), where, "\n",
        clean(extra),
    )  # fmt: skip
    console.print(Panel(head, title=kind, border_style="blue"))
    console.print(Panel(Text(clean(_clip(row["question"], max_chars))), title="question"))
    if kind == "attempt" and row.get("response") is not None:
        console.print(Panel(Text(clean(_clip(row["response"], max_chars))), title="response"))
    if row.get("tools"):
        names = [t.get("function", {}).get("name") for t in orjson.loads(row["tools"])]
        console.print(Text(clean("tools: " + ", ".join(map(str, names))), style="magenta"))
    if row.get("ground_truth") is not None:
        console.print(Text(clean(f"ground truth: {_clip(row['ground_truth'], 500)}"), style="bold"))


def _clip(text: str | None, limit: int) -> str:
    if text is None:
        return ""
    return (
        text if len(text) <= limit else text[:limit] + f"\n… [{len(text) - limit} more characters]"
    )


def _args(arguments: str) -> Syntax | Text:
    try:
        return Syntax(
            orjson.dumps(orjson.loads(arguments), option=orjson.OPT_INDENT_2).decode(),
            "json",
            word_wrap=True,
        )
    except orjson.JSONDecodeError:
        return Text(clean(arguments), style="red")


def render(row: dict, console: Console | None = None, max_chars: int = 2000) -> None:
    console = console or Console()
    head = Text.assemble(
        ("trajectory ", "bold"),
        row["trajectory_id"],
        "\n",
        ("source ", "bold"),
        clean(
            f"{row['source']} ({row['source_format']}) {row['source_uri']}#{row['source_index']}\n"
        ),
        ("model ", "bold"),
        clean(row.get("model")),
        ("  domain ", "bold"),
        clean(row.get("domain")),
        ("  reward ", "bold"),
        str(row.get("reward")),
        ("  correct ", "bold"),
        str(row.get("is_correct")),
    )
    console.print(Panel(head, title="trajectory", border_style="blue"))
    if row.get("tools"):
        names = [t.get("function", {}).get("name") for t in orjson.loads(row["tools"])]
        console.print(Text(clean("tools: " + ", ".join(map(str, names))), style="magenta"))
    for i, m in enumerate(row["messages"]):
        parts = []
        if m.get("reasoning"):
            parts.append(Text(clean(_clip(m["reasoning"], max_chars)), style="italic dim"))
        if m.get("content"):
            parts.append(Text(clean(_clip(m["content"], max_chars))))
        for c in m.get("tool_calls") or []:
            parts.append(Text(clean(f"→ call {c['name']} [{c['id']}]"), style="bold magenta"))
            parts.append(_args(_clip(c["arguments"], max_chars)))
        title = Text(  # Text, not a markup string: names and ids come from the data
            clean(
                f"{i} {m['role']}"
                + (f" ← {m['name']} [{m['tool_call_id']}]" if m["role"] == "tool" else "")
            )
        )
        console.print(
            Panel(
                Group(*parts) if parts else Text("(empty)", style="dim"),
                title=title,
                title_align="left",
                border_style=STYLE.get(m["role"], "white"),
            )
        )
    if row.get("final_answer") is not None:
        console.print(
            Panel(
                Text(clean(_clip(row["final_answer"], max_chars))),
                title="final answer",
                border_style="green",
            )
        )
    if row.get("ground_truth") is not None:
        console.print(Text(clean(f"ground truth: {_clip(row['ground_truth'], 500)}"), style="bold"))

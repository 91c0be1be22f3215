"""LLaMA-Factory export (``llamafactory_sharegpt.json`` + ``dataset_info.json``).

LLaMA-Factory's sharegpt converter keeps a conversation only when it alternates strictly:
human or observation at odd positions, gpt or function_call at even ones, ending on the
model's turn. Canonical trajectories do not always alternate, so turns are merged the way its
formatter reads them back:

* an assistant turn with tool calls is one ``function_call`` turn: the calls as a JSON list
  (parallel calls), preceded, when the assistant also wrote text, by that text with the list
  inside ``<tool_call>…</tool_call>`` (the formatter keeps text outside those words);
* consecutive tool results are one ``observation`` turn (a JSON list of their contents when
  there are several); a user message right after tool results (ToolBench's "this is not the
  first time you try this task") joins that turn after the results;
* consecutive user turns are joined with a blank line, as are consecutive assistant turns (their
  calls gathered into one list).

Trailing user or tool turns (the result of a final ``finish`` call) are left out: nothing is
trained after them. A conversation that cannot alternate even then (it starts with the model)
raises ``ValueError``, naming the record: that is a bug to fix, not data to drop silently.
"""

from __future__ import annotations

import orjson

HUMAN, GPT, FUNCTION, OBSERVATION = "human", "gpt", "function_call", "observation"
_TAG = {"user": HUMAN, "assistant": GPT, "tool": OBSERVATION}


def _model_turn(group: list[dict]) -> dict:
    """Consecutive assistant messages as one gpt or function_call turn."""
    text = "\n\n".join(t for m in group if (t := (m.get("content") or "").strip()))
    calls = [
        {"name": c["name"], "arguments": orjson.loads(c["arguments"])}
        for m in group
        for c in m.get("tool_calls") or []
    ]
    if not calls:
        return {"from": GPT, "value": text}
    body = orjson.dumps(calls).decode()
    return {"from": FUNCTION, "value": f"{text}\n<tool_call>{body}</tool_call>" if text else body}


def _input_turn(group: list[dict]) -> dict:
    """Consecutive user and tool messages as one human or observation turn: tool results first
    (a JSON list when there are several), then any user text that followed them."""
    results = [m.get("content") or "" for m in group if m["role"] == "tool"]
    texts = [m.get("content") or "" for m in group if m["role"] == "user"]
    if not results:
        return {"from": HUMAN, "value": "\n\n".join(texts)}
    value = results[0] if len(results) == 1 else orjson.dumps(results).decode()
    return {"from": _TAG[group[0]["role"]], "value": "\n\n".join([value, *texts])}


def conversation(messages: list[dict], record_id: str = "?") -> tuple[list[dict], str]:
    """(sharegpt turns, system prompt) of one canonical conversation."""
    system = next((m.get("content") or "" for m in messages if m["role"] == "system"), "")
    groups: list[list[dict]] = []
    for m in messages:
        if m["role"] == "system":
            continue
        if groups and (groups[-1][0]["role"] == "assistant") == (m["role"] == "assistant"):
            groups[-1].append(m)
        else:
            groups.append([m])
    out = [_model_turn(g) if g[0]["role"] == "assistant" else _input_turn(g) for g in groups]
    while out and out[-1]["from"] in (HUMAN, OBSERVATION):
        out.pop()  # e.g. the result of a final `finish` call: an input nothing is trained after
    if not out or out[0]["from"] not in (HUMAN, OBSERVATION):
        raise ValueError(
            f"record {record_id}: the conversation "
            + ("has no model turn" if not out else "starts with the model")
            + "; LLaMA-Factory needs human/observation and gpt/function_call turns in turn"
        )
    return out, system


def export(rows: list[dict], name: str) -> tuple[bytes, bytes]:
    out = []
    for r in rows:
        conv, system = conversation(r["messages"], r.get("record_id", "?"))
        tools = [t.get("function", t) for t in orjson.loads(r["tools"])] if r.get("tools") else []
        out.append(
            {
                "conversations": conv,
                "system": system,
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

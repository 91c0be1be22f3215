"""What the judge is shown: the question, the tools, and the whole trajectory (every turn, call
and result), and what it must write back."""

from __future__ import annotations

import json
from typing import Any

TEMPLATE_VERSION = "rrm-1"  # part of every judgement's cache key: a new template judges again
MAX_RESULT_CHARS = 2_000  # a tool result is shown up to this many characters

SYSTEM = (
    "You are a reasoning reward model. You read a question, the tools an agent could call and "
    "the agent's whole trajectory, and you judge the quality of its reasoning and tool use, "
    "not only its final answer. Write exactly three parts:\n"
    "<think>your step-by-step analysis of the trajectory</think>\n"
    "<critique>what was wrong or weak, and how to fix it, addressed to the agent</critique>\n"
    "<score>a number between 0 and 1: the quality of the whole trajectory</score>"
)

REFINE = (
    "A reviewer read your attempt and wrote this critique:\n{critique}\n\n"
    "Solve the problem again, taking the critique into account."
)


def _tool_lines(tools: Any) -> list[str]:
    out = []
    for t in tools or []:
        fn = t.get("function", t) if isinstance(t, dict) else {}
        if isinstance(fn, dict) and fn.get("name"):
            out.append(f"- {fn['name']}: {fn.get('description', '')}".rstrip(": "))
    return out


def _calls(m: dict) -> list[str]:
    out = []
    for c in m.get("tool_calls") or []:
        fn = c.get("function", c) if isinstance(c, dict) else {}
        args = fn.get("arguments", fn.get("input", {}))
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        out.append(f"[tool call] {fn.get('name')}({args})")
    return out


def trajectory_text(messages: list[dict]) -> str:
    """Every turn after the question, labelled: what the agent wrote, called and got back."""
    lines = []
    first_user = True
    for m in messages:
        role = m.get("role")
        if role == "system" or (role == "user" and first_user):
            first_user = first_user and role != "user"
            continue
        content = m.get("content") or ""
        if role == "assistant":
            if m.get("reasoning"):
                lines.append(f"[agent reasoning] {m['reasoning']}")
            if content:
                lines.append(f"[agent] {content}")
            lines += _calls(m)
        elif role == "tool":
            text = (
                content if len(content) <= MAX_RESULT_CHARS else content[:MAX_RESULT_CHARS] + " …"
            )
            lines.append(f"[tool result] {text}")
        else:
            lines.append(f"[{role}] {content}")
    return "\n".join(lines) or "(the agent wrote nothing)"


def judge_messages(question: str, tools: Any, messages: list[dict]) -> list[dict]:
    """The judge's chat: the instruction, then the case."""
    tool_text = "\n".join(_tool_lines(tools)) or "(none)"
    case = (
        f"Question:\n{question}\n\nTools:\n{tool_text}\n\n"
        f"Trajectory:\n{trajectory_text(messages)}\n\nJudge this trajectory."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": case}]


def refine_message(critique: str) -> dict:
    """The user turn that hands a critique back to the policy (Reagent-C, Reagent-U)."""
    return {"role": "user", "content": REFINE.format(critique=critique.strip() or "(none)")}

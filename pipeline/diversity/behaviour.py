"""Per-trajectory behaviour features: what the SFT selection filters on and the diversity
sampler measures.

Features (from the canonical messages):

* ``tool_calls``, ``tool_errors``: calls, and results that read as errors (``Error``,
  ``Traceback``, ``[error``, a non-zero ``<returncode>``);
* ``error_recovery``: a failed call followed later by a successful call of the same tool;
* ``verification``: after a successful call, another successful call whose assistant turn says
  it checks (verify / check / confirm / double-check) an earlier result;
* ``pattern``: ``none`` (no calls), ``reactive`` (>= 3 calls with < 200 characters of assistant
  text per call), ``deliberative`` (<= 2 calls with >= 400 characters per call), else ``mixed``;
* ``complete``: the trajectory ends in an answer (a final assistant turn without calls, or a
  recorded final answer); ``correct``: ``is_correct``, else ``reward > 0``, else (a format
  that records no outcome: Hermes, ShareGPT) the final answer verified against the question's
  ground truth by ``pipeline.verify``; ``verified_outcome`` says the last was used.
"""

from __future__ import annotations

import re

ERROR_RE = re.compile(
    r"^\s*(\[error|error\b|Error\b|Traceback|Exception|<returncode>[1-9])|Traceback \(most recent call last\)",
    re.I,
)
CHECK_RE = re.compile(r"\b(verify|verif|check|confirm|double-check|sanity)", re.I)


def features(
    messages: list[dict],
    final_answer: str | None,
    is_correct: bool | None,
    reward: float | None,
    ground_truth: str | None = None,
    answer_type: str | None = None,
) -> dict:
    calls: dict[str, str] = {}  # call id -> tool name
    call_turn_text: dict[str, str] = {}
    outcomes: list[tuple[str, bool, str]] = []  # (tool, ok, assistant text of the call's turn)
    assistant_chars = 0
    for m in messages:
        if m["role"] == "assistant":
            assistant_chars += len(m.get("content") or "") + len(m.get("reasoning") or "")
            for c in m.get("tool_calls") or []:
                calls[c["id"]] = c["name"]
                call_turn_text[c["id"]] = (
                    (m.get("content") or "") + " " + (m.get("reasoning") or "")
                )
        elif m["role"] == "tool":
            tid = m.get("tool_call_id")
            outcomes.append(
                (
                    calls.get(tid, m.get("name") or ""),
                    not ERROR_RE.search(m.get("content") or ""),
                    call_turn_text.get(tid, ""),
                )
            )
    n_calls = sum(len(m.get("tool_calls") or []) for m in messages if m["role"] == "assistant")
    errors = sum(not ok for _, ok, _ in outcomes)
    recovery = any(
        not ok_i and any(t_j == t_i and ok_j for t_j, ok_j, _ in outcomes[i + 1 :])
        for i, (t_i, ok_i, _) in enumerate(outcomes)
    )
    verification = any(
        ok_i
        and any(
            ok_j and t_j == t_i and CHECK_RE.search(txt_j) for t_j, ok_j, txt_j in outcomes[i + 1 :]
        )
        for i, (t_i, ok_i, _) in enumerate(outcomes)
    )
    per_call = assistant_chars / n_calls if n_calls else 0.0
    if n_calls == 0:
        pattern = "none"
    elif n_calls >= 3 and per_call < 200:
        pattern = "reactive"
    elif n_calls <= 2 and per_call >= 400:
        pattern = "deliberative"
    else:
        pattern = "mixed"
    last = messages[-1] if messages else {}
    complete = final_answer is not None or (
        last.get("role") == "assistant" and not last.get("tool_calls")
    )
    verified = is_correct is None and reward is None and ground_truth is not None and complete
    if verified:
        from pipeline.verify import verify

        correct = verify(final_answer or "", ground_truth, answer_type or "text").correct
    else:
        correct = is_correct if is_correct is not None else (reward is not None and reward > 0)
    return {
        "tool_calls": n_calls,
        "tool_errors": errors,
        "error_recovery": recovery,
        "verification": verification,
        "pattern": pattern,
        "complete": complete,
        "correct": bool(correct),
        "verified_outcome": verified,
    }

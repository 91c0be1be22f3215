"""The nano agent task family: verifiable arithmetic word problems where running python is the
natural way to the answer, with graded difficulty (more steps, larger numbers), and solver
trajectories whose tool outputs come from really running the solver's code in the sandbox.

A from-scratch policy of a few hundred thousand parameters learns to solve these through the
agent loop on CPU in minutes: the task for tests and the demo that a policy learns through the
pipeline, not only that the plumbing runs.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from pipeline.sandbox import Sandbox


@dataclass(frozen=True)
class NanoTask:
    question: str
    code: str  # the solver's program; its printed output is the answer
    level: int  # 1 (one product) .. 3 (three steps, larger numbers)


def tasks(n: int, seed: int = 0, levels: tuple[int, ...] = (1, 2, 3)) -> list[NanoTask]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        level = levels[i % len(levels)]
        if level == 1:
            a, b = rng.randint(11, 99), rng.randint(11, 99)
            out.append(NanoTask(f"What is {a} times {b}?", f"print({a} * {b})", 1))
        elif level == 2:
            a, b, c = rng.randint(11, 99), rng.randint(11, 99), rng.randint(100, 999)
            out.append(NanoTask(f"What is {a} times {b} plus {c}?", f"print({a} * {b} + {c})", 2))
        else:
            a, b, c = rng.randint(101, 999), rng.randint(11, 99), rng.randint(100, 999)
            out.append(
                NanoTask(
                    f"A shop has {a} boxes of {b} pens and sells {c} pens. How many pens are left?",
                    f"print({a} * {b} - {c})",
                    3,
                )
            )
    return out


def trajectories(items: list[NanoTask], sandbox: Sandbox) -> list[dict]:
    """One correct solver trajectory per task (canonical messages: question, a python call, its
    real output from the sandbox, the boxed answer), with its ground truth."""
    rows = []
    for i, t in enumerate(items):
        result = sandbox.run(t.code)
        if not result.ok:
            raise RuntimeError(f"the solver's code failed in the sandbox: {t.code!r}: {result}")
        answer = result.stdout.strip()
        call = {"id": f"call_{i}", "name": "python", "arguments": json.dumps({"code": t.code})}
        rows.append(
            {
                "record_id": f"nano-{i}",
                "question": t.question,
                "ground_truth": answer,
                "answer_type": "integer",
                "level": t.level,
                "messages": [
                    {"role": "user", "content": t.question},
                    {"role": "assistant", "content": "", "tool_calls": [call]},
                    {
                        "role": "tool",
                        "content": result.as_tool_output(),
                        "tool_call_id": f"call_{i}",
                    },
                    {"role": "assistant", "content": f"The answer is \\boxed{{{answer}}}."},
                ],
            }
        )
    return rows

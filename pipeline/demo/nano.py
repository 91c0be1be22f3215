"""The nano agent task family: verifiable arithmetic word problems where running python is the
natural way to the answer, with graded difficulty (one product; a product and a sum; a
three-number word problem with a distractor number), and solver trajectories whose tool outputs
come from really running the solver's code in the sandbox.

A from-scratch policy of a few hundred thousand parameters learns to solve these through the
agent loop on CPU in minutes: the task for tests and for the main job's demo that a policy
learns through the pipeline, not only that the plumbing runs.

``write_nano`` writes the family into the demo corpus: solver trajectories in three formats
(OpenAI tool calls, Hermes ``<tool_call>`` text, ShareGPT function calling) with the behaviours
the profile stage knows (direct solves, a failed call and its recovery, a verifying call, wrong
answers), the training question pool, and a held-out evaluation pool of the same family.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from pipeline.rollout.agent import PYTHON_TOOL
from pipeline.sandbox import Sandbox

EVAL_SET = "nano_eval"  # the held-out pool's dataset name (registered as an evaluation set)
TRAIN_POOL = "nano_arith"
BEHAVIOURS = ("direct", "recovery", "verify", "wrong")
SOLVER = "nano-solver"


@dataclass(frozen=True)
class NanoTask:
    question: str
    code: str  # the solver's program; its printed output is the answer
    level: int  # 1 (one product) .. 3 (three numbers and a distractor, larger numbers)
    names: str = ""  # the same program over named quantities (what a careless solver writes)
    check: str = ""  # a program that prints True when {r} is the answer
    answer: int = 0  # the ground truth, computed here, never parsed back from a tool output


def tasks(n: int, seed: int = 0, levels: tuple[int, ...] = (1, 2, 3)) -> list[NanoTask]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        level = levels[i % len(levels)]
        if level == 1:
            a, b = rng.randint(11, 99), rng.randint(11, 99)
            out.append(
                NanoTask(
                    f"What is {a} times {b}?",
                    f"print({a} * {b})",
                    1,
                    "print(a * b)",
                    f"print({{r}} // {b} == {a})",
                    a * b,
                )
            )
        elif level == 2:
            a, b, c = rng.randint(11, 99), rng.randint(11, 99), rng.randint(100, 999)
            out.append(
                NanoTask(
                    f"What is {a} times {b} plus {c}?",
                    f"print({a} * {b} + {c})",
                    2,
                    "print(a * b + c)",
                    f"print({{r}} - {c} == {a} * {b})",
                    a * b + c,
                )
            )
        else:
            a, b, c = rng.randint(101, 999), rng.randint(11, 99), rng.randint(100, 999)
            d = rng.randint(2, 9)  # the distractor: a number the answer does not use
            out.append(
                NanoTask(
                    f"A shop with {d} workers has {a} boxes of {b} pens and sells {c} pens. "
                    "How many pens are left?",
                    f"print({a} * {b} - {c})",
                    3,
                    "print(boxes * pens - sold)",
                    f"print({{r}} + {c} == {a} * {b})",
                    a * b - c,
                )
            )
    return out


def _call(i: int, k: int, code: str) -> dict:
    return {"id": f"call_{i}_{k}", "name": "python", "arguments": json.dumps({"code": code})}


def _run(sandbox: Sandbox, code: str, expect_ok: bool = True) -> str:
    result = sandbox.run(code)
    if result.ok != expect_ok:
        raise RuntimeError(f"the solver's code {code!r} gave {result} in the sandbox")
    return result.as_tool_output()


def solve(t: NanoTask, i: int, sandbox: Sandbox, behaviour: str = "direct") -> tuple[list, str]:
    """(canonical messages of one solver attempt, its final answer): every tool output is what
    the sandbox printed for the solver's code.

    direct: one call, the answer. recovery: a call over undefined names fails, the solver
    rewrites it with the numbers. verify: after the result, a second call checks it. wrong: the
    solver drops the last operation and answers what that printed."""
    msgs: list[dict] = [{"role": "user", "content": t.question}]

    def turn(k: int, code: str, text: str = "", ok: bool = True) -> str:
        call = _call(i, k, code)
        out = _run(sandbox, code, ok)
        msgs.append({"role": "assistant", "content": text, "tool_calls": [call]})
        msgs.append({"role": "tool", "content": out, "tool_call_id": call["id"]})
        return out.strip()

    if behaviour == "recovery":
        turn(0, t.names, ok=False)
        answer = turn(1, t.code, "The names are not defined; with the numbers:")
    elif behaviour == "wrong":
        code = t.code.rsplit(" ", 2)[0] + ")" if t.level > 1 else t.code.replace("*", "+")
        answer = turn(0, code)
    else:
        answer = turn(0, t.code)
        if behaviour == "verify" and turn(1, t.check.format(r=answer), "Let me verify.") != "True":
            raise RuntimeError(f"the solver's check failed: {t}")
    msgs.append({"role": "assistant", "content": f"The answer is \\boxed{{{answer}}}."})
    return msgs, answer


def trajectories(items: list[NanoTask], sandbox: Sandbox) -> list[dict]:
    """One correct direct solver trajectory per task (canonical messages: question, a python
    call, its real output from the sandbox, the boxed answer), with its ground truth."""
    rows = []
    for i, t in enumerate(items):
        messages, answer = solve(t, i, sandbox)
        rows.append(
            {
                "record_id": f"nano-{i}",
                "question": t.question,
                "ground_truth": answer,
                "answer_type": "integer",
                "level": t.level,
                "messages": messages,
            }
        )
    return rows


def split(
    n_train: int, n_eval: int, seed: int = 0, levels: tuple[int, ...] = (1, 2, 3)
) -> tuple[list[NanoTask], list[NanoTask]]:
    """Training and held-out tasks, disjoint in question text."""
    pool = tasks(3 * (n_train + n_eval), seed=seed, levels=levels)
    seen: set[str] = set()
    unique = [t for t in pool if not (t.question in seen or seen.add(t.question))]
    held = unique[:n_eval]
    train = unique[n_eval : n_eval + n_train]
    if len(train) < n_train:
        raise ValueError(f"only {len(train)} distinct training tasks for {n_train}")
    return train, held


def _openai(msgs: list[dict], answer: str, gt: int) -> dict:
    out = []
    for m in msgs:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in m["tool_calls"]
            ]
        out.append(m)
    ok = answer == str(gt)
    return {
        "messages": out,
        "tools": [PYTHON_TOOL],
        "ground_truth": str(gt),
        "is_correct": ok,
        "reward": 1.0 if ok else 0.0,
        "model": SOLVER,
    }


def _hermes(msgs: list[dict]) -> dict:
    out = [
        {
            "role": "system",
            "content": f"You may call tools.\n<tools>\n{json.dumps(PYTHON_TOOL)}\n</tools>",
        }
    ]
    for m in msgs:
        if m.get("tool_calls"):
            calls = [
                "<tool_call>\n"
                + json.dumps({"name": c["name"], "arguments": json.loads(c["arguments"])})
                + "\n</tool_call>"
                for c in m["tool_calls"]
            ]
            out.append({"role": "assistant", "content": "\n".join([m["content"], *calls]).strip()})
        elif m["role"] == "tool":
            out.append(
                {"role": "tool", "content": f"<tool_response>\n{m['content']}\n</tool_response>"}
            )
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return {"messages": out, "model": SOLVER}


def _sharegpt(msgs: list[dict]) -> dict:
    conv = []
    for m in msgs:
        if m.get("tool_calls"):
            if m["content"]:
                conv.append({"from": "gpt", "value": m["content"]})
            for c in m["tool_calls"]:
                value = {"name": c["name"], "arguments": json.loads(c["arguments"])}
                conv.append({"from": "function_call", "value": json.dumps(value)})
        elif m["role"] == "tool":
            conv.append({"from": "observation", "value": m["content"]})
        else:
            conv.append({"from": "human" if m["role"] == "user" else "gpt", "value": m["content"]})
    return {"conversations": conv, "tools": json.dumps([PYTHON_TOOL["function"]])}


def write_nano(
    root: str | Path,
    sandbox: Sandbox,
    n_solved: int = 600,
    n_pool: int = 900,
    n_eval: int = 64,
    seed: int = 0,
    levels: tuple[int, ...] = (1, 2, 3),
    weights: tuple[float, ...] = (7, 1, 1, 1),
) -> list[Path]:
    """The family under ``root``: solver attempts on the first ``n_solved`` of ``n_pool``
    training questions (a third per format; behaviours drawn with ``weights`` over direct,
    recovery, verify, wrong: 70/10/10/10 by default),
    the training pool (``questions/nano_arith/train.jsonl``) and the held-out pool
    (``questions/nano_eval/test.jsonl``). The same arguments write byte-identical files."""
    root = Path(root)
    train, held = split(n_pool, n_eval, seed, tuple(levels))
    rng = random.Random(seed + 1)
    files: dict[str, list[str]] = {"openai.jsonl": [], "hermes.jsonl": [], "sharegpt.json": []}
    sharegpt = []
    for i, t in enumerate(train[:n_solved]):
        behaviour = rng.choices(BEHAVIOURS, weights=weights)[0]
        msgs, answer = solve(t, i, sandbox, behaviour)
        fmt = ("openai", "hermes", "sharegpt")[i % 3]
        if fmt == "openai":
            files["openai.jsonl"].append(json.dumps(_openai(msgs, answer, t.answer)))
        elif fmt == "hermes":
            files["hermes.jsonl"].append(json.dumps(_hermes(msgs)))
        else:
            sharegpt.append(_sharegpt(msgs))

    def pool(items: list[NanoTask]) -> list[str]:
        return [
            json.dumps({"question": t.question, "answer": f"#### {t.answer}", "level": t.level})
            for t in items
        ]

    out = {
        "agent_runs/nano/openai.jsonl": "\n".join(files["openai.jsonl"]) + "\n",
        "agent_runs/nano/hermes.jsonl": "\n".join(files["hermes.jsonl"]) + "\n",
        "agent_runs/nano/sharegpt.json": json.dumps(sharegpt, indent=1),
        f"questions/{TRAIN_POOL}/train.jsonl": "\n".join(pool(train)) + "\n",
        f"questions/{EVAL_SET}/test.jsonl": "\n".join(pool(held)) + "\n",
    }
    written = []
    for rel, text in sorted(out.items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        written.append(path)
    return written

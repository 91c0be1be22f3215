"""The verifier on real answers from the shared pools and files, and on known tricky cases."""

from __future__ import annotations

import json

import pytest

from pipeline.verify import calls_match, parse_calls, verify
from pipeline.verify.ground_truth import gsm8k_final, normalize_answer


def test_agrees_with_gsm8k_model_solution_labels(shared):
    rows = [
        json.loads(line)
        for line in (
            shared / "gsm8k_model_solutions/grade_school_math/data/example_model_solutions.jsonl"
        ).open()
    ]
    agree = total = 0
    for r in rows:
        gt, _ = normalize_answer(gsm8k_final(r["ground_truth"]))
        for v in r.values():
            if isinstance(v, dict) and "is_correct" in v:
                total += 1
                agree += verify(v["solution"], gt, "integer").correct == v["is_correct"]
    assert total == 4 * len(rows) and agree / total > 0.99


def test_agrees_with_qwen_math_scores_on_boxed_answers(shared):
    rows = [
        json.loads(line)
        for line in (
            shared / "qwen25_math_rollouts/evaluation/data/eval_rm_maj_example/math_cot_100.jsonl"
        ).open()
    ]
    pairs = [
        (resp, sc, *normalize_answer(r["gt"]))
        for r in rows
        for resp, sc in zip(r["response"], r["score"], strict=True)
    ]
    agree = sum(verify(resp, gt, kind).correct == sc for resp, sc, gt, kind in pairs)
    assert agree / len(pairs) > 0.99


def test_gsm8k_pool_answers_verify_against_themselves(shared):
    for line in list((shared / "questions/gsm8k/test.jsonl").open())[:200]:
        r = json.loads(line)
        gt, kind = normalize_answer(r["answer"])
        assert verify(r["answer"], gt, kind).correct  # the rationale ends in '#### n'


@pytest.mark.parametrize("pool", ["aime2024", "amc2023", "math500"])
def test_pool_ground_truths_verify_as_boxed_answers(shared, pool):
    for line in list((shared / "questions" / pool / "test.jsonl").open())[:100]:
        r = json.loads(line)
        gt, kind = normalize_answer(r["answer"])
        assert verify(f"So the answer is $\\boxed{{{r['answer']}}}$.", gt, kind).correct, r[
            "answer"
        ]
        assert not verify("So the answer is $\\boxed{123456789}$.", gt, kind).correct


@pytest.mark.parametrize(
    ("response", "gold", "kind", "ok"),
    [
        ("\\boxed{\\frac{1}{2}}", "0.5", "number", True),
        ("so $x = 3$", "3", "integer", True),
        ("The total is 1,000 dollars.", "1000", "integer", True),
        ("\\boxed{12.0}", "12", "integer", True),
        ("#### 18", "18", "integer", True),
        ("A: 26", "18", "integer", False),
        ("\\boxed{\\dfrac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", "latex", True),
        ("\\boxed{(3, \\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)", "latex", True),
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", "latex", True),
        ("\\boxed{3}", "\\frac{7}{2}", "latex", False),
        ("The answer is (B).", "B", "letter", True),
        ("The answer is (C).", "B", "letter", False),
        ("Finish: San Francisco", "san francisco", "text", False),
        ("San Francisco", "san francisco", "text", True),
    ],
)
def test_tricky_equivalences(response, gold, kind, ok):
    assert verify(response, gold, kind).correct is ok


def test_bfcl_function_calls_against_possible_answers(shared):
    data = (
        shared
        / "bfcl/berkeley-function-call-leaderboard/bfcl_eval/data/possible_answer/BFCL_v3_parallel_multiple.json"
    )
    gt = json.loads(data.open().readline())["ground_truth"]
    # build a correct answer from the first acceptable value of each parameter, in reverse order
    calls = []
    for exp in reversed(gt):
        ((name, params),) = exp.items()
        args = ", ".join(f"{k}={v[0]!r}" for k, v in params.items() if v and v[0] != "")
        calls.append(f"{name}({args})")
    text = "[" + ", ".join(calls) + "]"
    assert calls_match(text, gt)
    assert verify(f"<tool_call>{text}</tool_call>", json.dumps(gt), "function_calls").correct
    assert not calls_match(
        text.replace(calls[0], calls[0].replace("(", "(extra=1, ", 1)), gt
    )  # unexpected argument
    assert not calls_match("[" + calls[0] + "]", gt)  # a call missing
    assert parse_calls('{"name": "f", "arguments": "{\\"a\\": 1}"}') == [("f", {"a": 1})]


def test_irrelevance_means_no_call():
    assert calls_match("", []) and not calls_match("f(a=1)", [])


def test_a_reward_without_docs_and_a_label_with_them_judge_calls_alike(shared):
    """One matcher: a function-call ground truth without docs (``verify``'s path, the reward of
    rows that carry no tools) is judged by the same BFCL rules as a question with its docs (the
    label's path), against docs read off the answer. Over every BFCL question of six categories
    and outputs that BFCL accepts and rejects, the two agree but where only the docs can say
    (a declared tuple, a parameter the docs require that the answer marks optional, a function
    the answer key names differently from its docs)."""
    from pipeline.evaluate.bfcl_text import variants
    from pipeline.verify.calls import check
    from tests.test_bfcl import load

    def as_text(output: list[dict]) -> str:
        return "[" + ", ".join(
            f"{n}(" + ", ".join(f"{k}={v!r}" for k, v in a.items()) + ")"
            for c in output for n, a in c.items()
        ) + "]"  # fmt: skip

    same, differ = 0, []
    for category in ("simple", "multiple", "parallel", "parallel_multiple", "live_simple", "live_multiple"):  # fmt: skip
        for q, possible in load(category):
            for kind, output in variants(possible, q["function"]).items():
                label = check(q["function"], output, possible, category).valid
                reward = verify(as_text(output), json.dumps(possible), "function_calls").correct
                if label == reward:
                    same += 1
                else:
                    differ.append((q["id"], kind))
    assert same + len(differ) > 15_000
    assert len(differ) / (same + len(differ)) < 0.002, differ[:10]
    # the string rules are BFCL's, not a case-insensitive compare: "NEW-YORK." is "New York"
    gt = json.dumps([{"f": {"city": ["New York"]}}])
    assert verify('f(city="NEW-YORK.")', gt, "function_calls").correct
    assert not verify('f(city="Newark")', gt, "function_calls").correct


def test_bfcl_v4_category_names_are_recognised():
    from pipeline.verify.calls import category_of, supported

    assert category_of("bfcl_simple_python") == "simple" and supported("bfcl_simple_python")
    assert supported("bfcl_live_parallel_multiple") and supported("bfcl_simple/test")
    assert not supported("bfcl_simple_java") and not supported("bfcl_multi_turn_base")

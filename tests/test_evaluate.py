"""average@k, maj@k and pass@k through the agent loop, on a scripted policy with known answers."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from pipeline.evaluate import evaluate
from pipeline.rollout.engines import ScriptedEngine


def test_average_majority_and_pass_at_k(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)

    def script(text, turn):
        sample = turn % 1000
        if "first" in text:
            return "\\boxed{42}" if sample < 3 else "\\boxed{7}"  # 3 of 4 right: majority right
        return "\\boxed{42}" if sample == 0 else "\\boxed{7}"  # 1 of 4 right: majority wrong

    eng = ScriptedEngine(tok, script)
    qs = [
        {
            "question_id": "a",
            "question": "first: 6*7?",
            "ground_truth": "42",
            "answer_type": "integer",
        },
        {
            "question_id": "b",
            "question": "second: 6*7?",
            "ground_truth": "42",
            "answer_type": "integer",
        },
    ]
    r = evaluate(eng, qs, k=4)
    assert r["average@4"] == pytest.approx((0.75 + 0.25) / 2)
    assert r["pass@4"] == 1.0 and r["maj@4"] == 0.5

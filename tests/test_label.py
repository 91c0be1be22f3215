"""Labels: recorded pass rates from the shared attempt files, and live rollouts through the agent
loop with a tiny model, stored with tokens and masks, resumable."""

from __future__ import annotations

import json

import pytest

from pipeline.dedup import dedup
from pipeline.label import LabelConfig, label
from pipeline.query import query
from pipeline.rollout.agent import AgentConfig
from pipeline.rollout.engines import Sampling
from pipeline.validate import ValidateConfig, validate
from tests.conftest import PINNED


@pytest.fixture(scope="module")
def labelled(shared_lake):
    lake, _ = shared_lake
    validate(lake, ValidateConfig(data_docs=False, now=PINNED))
    dedup(lake)
    stats = label(lake)
    return lake, stats


def test_recorded_pass_rates_match_the_attempt_files(labelled, shared):
    lake, stats = labelled
    assert (
        stats["source"] == "recorded"
        and stats["attempts"]
        == query(lake, "SELECT count(*) n FROM valid_attempts").to_pylist()[0]["n"]
    )
    rows = [
        json.loads(line)
        for line in (
            shared / "qwen25_math_rollouts/evaluation/data/eval_rm_maj_example/math_cot_100.jsonl"
        ).open()
    ]
    got = {
        r["policy"]: r
        for r in query(
            lake, "SELECT policy, count(*) n, sum(n_correct) c, sum(k) k FROM labels GROUP BY 1"
        ).to_pylist()
    }
    # the file names no model: the policy is named after the file, never after a model
    qwen = got["file:eval_rm_maj_example/math_cot_100.jsonl"]
    assert not any(p.startswith("qwen") for p in got)
    assert qwen["k"] == 8 * len(rows) and qwen["c"] == sum(sum(r["score"]) for r in rows)
    tau = got["gpt-4o"]
    assert tau["n"] == 40 and tau["k"] == 160  # 4 trials per task
    one = query(
        lake,
        "SELECT k, n_correct, pass_rate FROM labels WHERE policy = 'gpt-4o' ORDER BY question_id LIMIT 1",
    ).to_pylist()[0]
    assert one["pass_rate"] == one["n_correct"] / one["k"]


@pytest.mark.usefixtures("sandbox_available")
def test_live_rollouts_store_tokens_masks_and_resume(labelled, tiny_model):
    lake, _ = labelled
    cfg = LabelConfig(
        k=8,
        policy=tiny_model,
        backend="transformers",
        limit=4,
        batch_questions=2,
        sampling=Sampling(max_tokens=16),
        agent=AgentConfig(max_turns=2, max_response_tokens=48),
    )
    first = label(lake, cfg)
    assert first["labelled_now"] == 4 and first["episodes"] == 32
    rows = query(lake, "SELECT * FROM rollouts").to_pylist()
    assert len(rows) == 32
    for r in rows:
        assert len(r["mask"]) == len(r["response_ids"]) > 0 and r["correct"] in (True, False)
        assert json.loads(r["messages"])[1]["role"] == "user"
    labels = query(lake, "SELECT * FROM labels WHERE label_source = 'rollouts'").to_pylist()
    assert len(labels) == 4 and all(x["k"] == 8 and 0 <= x["pass_rate"] <= 1 for x in labels)
    assert label(lake, cfg)["labelled_now"] == 0  # the limit is a cap per policy and config
    cfg.limit = 8  # resumes: the 4 done questions are skipped, 4 new ones labelled
    second = label(lake, cfg)
    assert second["already_labelled"] == 4 and second["labelled_now"] == 4
    assert (
        query(
            lake, "SELECT count(DISTINCT question_id) n FROM labels WHERE label_source = 'rollouts'"
        ).to_pylist()[0]["n"]
        == 8
    )
    # only train-eligible questions: evaluation-set questions are never labelled live
    bad = query(
        lake,
        "SELECT count(*) n FROM labels l JOIN unique_questions u USING (question_id) WHERE l.label_source = 'rollouts' AND NOT u.train_eligible",
    ).to_pylist()[0]["n"]
    assert bad == 0

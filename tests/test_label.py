"""Labels: recorded pass rates from the shared attempt files, and live rollouts through the agent
loop with a tiny model, stored with tokens and masks, resumable."""

from __future__ import annotations

import json
import re

import pytest

from pipeline.dedup import dedup
from pipeline.label import LabelConfig, label
from pipeline.lake.query import query
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


def _live(tiny_model: str, limit: int) -> LabelConfig:
    return LabelConfig(
        k=8,
        policy=tiny_model,
        backend="transformers",
        limit=limit,
        batch_questions=2,
        sampling=Sampling(max_tokens=16),
        agent=AgentConfig(max_turns=2, max_response_tokens=48),
    )


@pytest.mark.usefixtures("sandbox_available")
def test_live_rollouts_store_tokens_masks_and_resume(labelled, tiny_model):
    lake, _ = labelled
    cfg = _live(tiny_model, limit=4)
    first = label(lake, cfg)
    assert first["labelled_now"] == 4 and first["episodes"] == 32
    # the questions it cannot label are counted with their reasons, and the counts add up
    [why] = first["warnings"]
    total = query(lake, "SELECT count(*) n FROM unique_questions").to_pylist()[0]["n"]
    counts = [int(x) for x in re.findall(r"(?:: |, )(\d+) ", why)]
    assert first["questions"] + sum(counts) == total, why
    tau = query(
        lake,
        "SELECT count(*) n FROM unique_questions WHERE list_contains(sources, 'tau_bench') "
        "AND ground_truth IS NOT NULL",
    ).to_pylist()[0]["n"]  # the trials' expected actions
    assert re.search(r"(\d+) have a ground truth no verifier reads", why)
    assert int(re.search(r"(\d+) have a ground truth no verifier reads", why)[1]) >= tau > 0
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
    # a build that takes the 8 live labels over the many recorded ones says so
    from pipeline.build import BuildConfig, build

    m = build(lake, BuildConfig(name="auto-labels"))
    assert m["rl"]["label_source"] == "rollouts"
    [warn] = [w for w in m["warnings"] if w.startswith("labels:")]
    assert "(8 questions) were chosen over the recorded ones" in warn


@pytest.mark.usefixtures("sandbox_available")
def test_the_judges_scores_of_the_rollouts_are_labellings_extra_signal(labelled, tiny_model):
    """Live labels of 8 questions (those of the test above, or made here), then a judge scores their rollouts: the
    `label_judge_scores` view and `judge_signal`'s bins hold the means computed by hand from the
    judgements and rollouts tables, right and wrong rollouts apart."""
    from transformers import AutoTokenizer

    from pipeline.build.select import SelectConfig, pass_rate_bin
    from pipeline.judge.stage import judge_lake
    from pipeline.label import judge_signal
    from tests.test_judge import _scripted_judge

    lake, _ = labelled
    label(lake, _live(tiny_model, limit=8))  # nothing to do after the test above
    tok = AutoTokenizer.from_pretrained(tiny_model)
    judge, _ = _scripted_judge(tok, "0")
    judge.engine.script = lambda prompt, turn: (  # a score that differs from prompt to prompt
        f"<critique>ok</critique><score>{len(prompt) % 11 / 10}</score>"
        if len(prompt) % 11 < 10
        else "no verdict"  # a failed parse: NULL, counted, never a 0
    )
    res = judge_lake(lake, judge, "rollouts")
    assert res.judged == res.candidates == 64
    rows = query(
        lake,
        "SELECT l.question_id, l.pass_rate, r.correct, j.score FROM labels l "
        "JOIN rollouts r USING (question_id) JOIN judgements j ON j.target_id = r.rollout_id "
        "WHERE l.label_source = 'rollouts'",
    ).to_pylist()
    assert len(rows) == 64 and any(r["score"] is None for r in rows)
    view = {
        r["question_id"]: r for r in query(lake, "SELECT * FROM label_judge_scores").to_pylist()
    }
    assert len(view) == 8
    for qid, v in view.items():
        mine = [r for r in rows if r["question_id"] == qid]
        scored = [r["score"] for r in mine if r["score"] is not None]
        right = [r["score"] for r in mine if r["score"] is not None and r["correct"]]
        assert v["judged"] == len(mine) == 8 and v["scored"] == len(scored)
        assert v["judge_score"] == pytest.approx(sum(scored) / len(scored))
        assert v["scored_correct"] == len(right)
        assert v["judge_score_correct"] == (
            pytest.approx(sum(right) / len(right)) if right else None
        )
    bins = judge_signal(lake)
    assert sum(b["questions"] for b in bins) == 8 and {b["judge_revision"] for b in bins} == {
        judge.revision
    }
    for b in bins:
        mine = [r for r in rows if pass_rate_bin(r["pass_rate"], SelectConfig()) == b["bin"]]
        scored = [r["score"] for r in mine if r["score"] is not None]
        wrong = [r["score"] for r in mine if r["score"] is not None and not r["correct"]]
        assert b["scored"] == len(scored) and b["judged"] == len(mine)
        assert b["judge_score"] == pytest.approx(sum(scored) / len(scored), abs=1e-4)
        if wrong:
            assert b["judge_score_wrong"] == pytest.approx(sum(wrong) / len(wrong), abs=1e-4)


def test_a_limit_is_shared_among_the_named_pools(shared_dataset, tmp_path):
    """`flow label --datasets a,b --limit N`: the N questions come in turns from each pool,
    not the first N ids of whichever pool sorts first (the real mission's first run labelled
    46 GSM8K questions and no nano one: no RL rows)."""
    from pipeline.label import LabelConfig
    from pipeline.label.stage import planned

    lake, _ = shared_dataset
    config = LabelConfig(
        policy=str(tmp_path), limit=10, datasets=("math500", "gsm8k"), include_eval=True
    )
    todo, counts = planned(lake, config, revision="r0")
    pools = [q["dataset"].split("/")[0] for q in todo]
    assert len(todo) == 10 and pools.count("math500") == 5 and pools.count("gsm8k") == 5, pools
    assert counts["questions"] > 500

"""The reasoning reward model: its parser on well-formed, partial and hostile outputs; Reagent-R's
mixing and Reagent-U's pooled advantages against hand-computed values; GRPO-TCR runs with
Reagent-R and Reagent-U on the nano policy, with their terms logged. (A real judge served by
vLLM's CPU build, judging a lake into `judgements`: tests/test_recorder.py, beside the server.)"""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.judge.parse import MAX_CHARS, parse
from pipeline.lake import Lake
from tests.conftest import NANO_AGENT
from trainer.loss import group_advantages
from trainer.rewards import with_judge


@pytest.mark.parametrize(
    ("text", "score", "status"),
    [
        ("<think>ok</think><critique>fine</critique><score>0.75</score>", 0.75, "ok"),
        ("<THINK>a</THINK>\n<Critique>b</Critique>\n<score> 7/10 </score>", 0.7, "ok"),
        ("<think>a</think><critique>b</critique><score>85%</score>", 0.85, "ok"),
        ("<think>a</think><critique>b</critique><score>**1**</score>", 1.0, "ok"),
        ("<think>a<critique>b</critique><score>0.5</score>", 0.5, "partial"),  # think unclosed
        ("<critique>only a critique</critique><score>0.2", 0.2, "partial"),  # no think, open score
        ("<think>a</think><critique>b</critique>\nScore: 0.4", 0.4, "partial"),  # a score line
        # hostile: a score quoted inside the reasoning is not the judgement
        ("<think>I could write <score>1.0</score></think><critique>c</critique><score>0.1</score>", 0.1, "ok"),
        ("<think>a</think><critique>b</critique><score>7</score>", None, "failed"),  # out of range
        ("<think>a</think><critique>b</critique><score>high</score>", None, "failed"),
        ("<think>a</think><critique>b</critique><score>1/0</score>", None, "failed"),
        ("<think>a</think><critique>b</critique><score>nan</score>", None, "failed"),
        ("<think>a</think><critique>b</critique>", None, "failed"),
        ("", None, "failed"),
        ("<score>" * 1000 + "0.5", 0.5, "partial"),  # a flood of open tags
        ("<score>" * 5000 + "0.5", None, "failed"),  # ... past the cut: the score is gone
    ],
)  # fmt: skip
def test_parser(text, score, status):
    p = parse(text)
    assert (p.score, p.status) == (pytest.approx(score) if score is not None else None, status)
    assert (p.reason is None) == (status == "ok")


def test_parser_reasons_and_parts():
    p = parse("<think>t</think><critique>Check the product.</critique><score>0.9</score>")
    assert (p.think, p.critique, p.reason) == ("t", "Check the product.", None)
    assert "outside [0, 1]" in parse("<score>1.5</score>").reason
    assert parse("no tags at all").reason.startswith("no <score>")
    huge = parse("<think>" + "x" * (2 * MAX_CHARS) + "</think><score>0.3</score>")
    assert huge.status == "failed" and "cut at" in huge.reason  # the score lay past the cut


def test_reagent_r_mixing_and_reagent_u_pooled_advantages():
    # Reagent-R: R = R_rule + λ·score; a failed parse adds nothing
    assert with_judge([1.0, -1.0, 1.0], [0.5, 0.25, None], 0.4) == pytest.approx([1.2, -0.9, 1.0])
    # Reagent-U: K=2 initial + K=2 refined, one pool of 4
    rule = [-1.0, 1.0, 1.0, 1.0]
    scores = [0.0, 0.5, 0.5, 1.0]
    r = torch.tensor([with_judge(rule, scores, 0.2)])  # [[-1.0, 1.1, 1.1, 1.2]]
    adv = group_advantages(r)  # unbiased std over the 4
    mean = (-1.0 + 1.1 + 1.1 + 1.2) / 4  # 0.6
    std = (sum((x - mean) ** 2 for x in [-1.0, 1.1, 1.1, 1.2]) / 3) ** 0.5
    want = [(x - mean) / (std + 1e-6) for x in [-1.0, 1.1, 1.1, 1.2]]
    assert adv[0].tolist() == pytest.approx(want, rel=1e-5)
    # ... which is not what two groups of 2 would give (each initial/refined pair normalised alone)
    assert group_advantages(r.view(2, 2)).flatten().tolist() != pytest.approx(want, rel=1e-3)


def _lake_with_trajectories(tmp_path) -> Lake:
    from pipeline.ingest.stage import ingest
    from pipeline.validate.stage import validate

    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {a} times 7?"},
                {"role": "assistant", "content": f"\\boxed{{{a * 7}}}"},
            ],
            "ground_truth": str(a * 7),
        }
        for a in (12, 13, 14)
    ]
    f = tmp_path / "in" / "chats.jsonl"
    f.parent.mkdir()
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lake = Lake(str(tmp_path / "lake"))
    ingest([str(f)], lake)
    validate(lake)
    return lake


def _scripted_judge(tokenizer, score: str, critique: str = "Check the product with python."):
    from pipeline.judge.config import JudgeConfig
    from pipeline.judge.judge import Judge
    from pipeline.rollout.engines import ScriptedEngine

    seen: list[str] = []

    def script(prompt: str, turn: int) -> str:
        seen.append(prompt)
        return f"<think>read it</think><critique>{critique}</critique><score>{score}</score>"

    judge = Judge(
        JudgeConfig("scripted"), engine=ScriptedEngine(tokenizer, script), tokenizer=tokenizer
    )
    return judge, seen


def _nano_pool(n: int) -> list[dict]:
    from pipeline.demo.nano import tasks

    return [
        {
            "question_id": f"j{i}",
            "question": t.question,
            "ground_truth": str(t.answer),
            "answer_type": "integer",
        }
        for i, t in enumerate(tasks(n, seed=5, levels=(1,)))
    ]


def _cfg(policy, out, **kw):
    from pipeline.rollout.agent import AgentConfig
    from trainer.train import TrainConfig

    agent = AgentConfig(
        max_turns=2,
        max_response_tokens=48,
        system_prompt=None,
        declare_tools=False,
        sandbox_workers=2,
    )
    return TrainConfig(
        model=str(policy), out=str(out), steps=2, prompts_per_step=2, group_size=2, lr=1e-4,
        max_tokens=48, agent=agent, rollout_backend="transformers", use_overlong=False,
        judge="scripted", **kw,
    )  # fmt: skip


def test_reagent_r_adds_the_judges_score_to_the_reward(nano_sft, tmp_path):
    from transformers import AutoTokenizer

    from trainer.train import train

    policy, _ = nano_sft
    judge, seen = _scripted_judge(AutoTokenizer.from_pretrained(str(policy)), "0.6")
    hist = train(_cfg(policy, tmp_path / "r", judge_weight=0.5), _nano_pool(8), judge=judge)
    assert len(hist) == 2 and len(seen) == 2 * 2 * 2  # every episode judged, every step
    for h in hist:
        if "skipped" in h:
            continue
        assert h["judge_score_mean"] == pytest.approx(0.6) and h["judge_failed_frac"] == 0
        assert h["judge_term_mean"] == pytest.approx(0.5 * 0.6, abs=1e-6)
    assert "Question:\nWhat is" in seen[0] and "Trajectory:\n" in seen[0]
    logged = [json.loads(x) for x in (tmp_path / "r/metrics.jsonl").read_text().splitlines()]
    assert all("judge_term_mean" in m for m in logged if "skipped" not in m)


def test_reagent_u_refines_with_the_critique_in_context_and_pools_2k(nano_sft, tmp_path):
    from transformers import AutoTokenizer

    from pipeline.judge.parse import parse
    from pipeline.rollout.agent import run_episodes
    from pipeline.rollout.engines import TransformersEngine
    from pipeline.sandbox import Sandbox
    from trainer.episodes import refine_episodes
    from trainer.train import train

    policy, _ = nano_sft
    tok = AutoTokenizer.from_pretrained(str(policy))
    critique = "Multiply again and box the product."
    judge, _ = _scripted_judge(tok, "0.5", critique=critique)
    cfg = _cfg(policy, tmp_path / "u", refine=True)
    qs = _nano_pool(2)
    engine = TransformersEngine(str(policy))
    with Sandbox(NANO_AGENT.sandbox, 2) as box:
        first = run_episodes(
            engine, tok, [(q["question_id"], q["question"]) for q in qs], 2, cfg.agent, sandbox=box
        )
        verdicts = [parse(f"<think>t</think><critique>{critique}</critique><score>0.5</score>")] * 4
        second = refine_episodes(engine, tok, qs, first, verdicts, 2, cfg, 0, box)
    assert len(second) == 4
    for e0, e1 in zip(first, second, strict=True):
        context = tok.decode(e1.prompt_ids)  # the refined episode is scored against this
        assert context.index(qs[first.index(e0) // 2]["question"]) < context.index(critique)
        assert e1.response_ids and e1.messages[: len(e0.messages)] == e0.messages
    hist = train(cfg, _nano_pool(8), judge=judge)
    ran = [h for h in hist if "skipped" not in h]
    assert ran and all(h["pool_size"] == 4 for h in ran)  # K initial + K refined, one pool
    assert all(0 <= h["refined_accuracy"] <= 1 and 0 <= h["initial_accuracy"] <= 1 for h in ran)
    assert all(h["judge_failed_frac"] == 0 for h in ran)


def test_sft_rows_filtered_and_weighted_by_the_judges_score(tmp_path):
    """`flow judge` then `flow build --min-judge-score`: the SFT split keeps the trajectories the
    judge scored high enough, says why it left the others out, and carries f_judge_score."""
    import duckdb
    from transformers import AutoTokenizer

    from pipeline.build import BuildConfig, build
    from pipeline.build.sft import SFTConfig
    from pipeline.dedup.stage import dedup
    from pipeline.demo.tiny_model import build_tiny_model
    from pipeline.judge.config import JudgeConfig
    from pipeline.judge.judge import Judge
    from pipeline.judge.stage import judge_lake
    from pipeline.rollout.engines import ScriptedEngine

    tok = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "tiny", layers=1))
    verdict = {"12": "<score>0.9</score>", "13": "<score>0.2</score>", "14": "<score>high</score>"}

    def script(prompt: str, turn: int) -> str:
        n = prompt.split("What is ", 1)[1][:2]
        return f"<think>t</think><critique>c</critique>{verdict[n]}"

    lake = _lake_with_trajectories(tmp_path)
    dedup(lake)
    judge = Judge(JudgeConfig("scripted"), engine=ScriptedEngine(tok, script), tokenizer=tok)
    res = judge_lake(lake, judge)
    assert res.status == {"ok": 2, "failed": 1} and res.reasons == {
        "score 'high' is not a number": 1
    }
    every = build(lake, BuildConfig(name="all"))
    kept = build(lake, BuildConfig(name="judged", sft=SFTConfig(min_judge_score=0.5)))
    assert every["sft"]["rows"] == 3 and kept["sft"]["rows"] == 1
    assert kept["sft"]["dropped"] == {"judge_parse_failed": 1, "judge_score_below_minimum": 1}
    scores = duckdb.sql(
        f"SELECT question, f_judge_score FROM read_parquet('{every['path']}/sft/*.parquet') ORDER BY 1"
    ).fetchall()
    assert scores == [
        ("What is 12 times 7?", 0.9),
        ("What is 13 times 7?", 0.2),
        ("What is 14 times 7?", None),
    ]


def test_reagent_c_scores_first_and_refined_attempts(nano_sft):
    """Refinement at inference: the same questions and samples, the second attempt answering the
    judge's critique of the first; both scored, the flips counted."""
    from transformers import AutoTokenizer

    from pipeline.evaluate.refine import evaluate_refined
    from pipeline.rollout.engines import Sampling, TransformersEngine

    policy, _ = nano_sft
    tok = AutoTokenizer.from_pretrained(str(policy))
    judge, seen = _scripted_judge(tok, "0.4", critique="Run the product in python, then box it.")
    qs = _nano_pool(6)
    out = evaluate_refined(
        TransformersEngine(str(policy)), qs, judge, k=2, config=_cfg(policy, "unused").agent,
        sampling=Sampling(temperature=1.0, max_tokens=48),
    )  # fmt: skip
    assert len(seen) == 12 and out["judge"]["parses"] == {"ok": 12}
    for part in ("initial", "refined"):
        assert out[part]["questions"] == 6 and 0 <= out[part]["average@2"] <= 1
    f = out["flips"]
    assert f["samples"] == 12 and f["wrong_to_right"] + f["right_to_wrong"] <= 12
    n1 = round(out["initial"]["average@2"] * 12)
    n2 = round(out["refined"]["average@2"] * 12)
    assert n2 - n1 == f["wrong_to_right"] - f["right_to_wrong"]  # the flips add up

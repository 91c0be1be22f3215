"""The mission on a real pretrained model, CI-sized: `flow run --real --quick` imports
SmolLM2-135M-Instruct from its packaged GGUF file, fine-tunes it on ToRA's python-tool solutions
and nano trajectories, labels real and nano questions with K=4 live rollouts, builds, trains
GRPO-TCR and evaluates on held-out nano and GSM8K questions: every stage, on tiny budgets.

What it shows (the learning itself is measured at full size: docs/training.md):
* the prompts the loop sampled from are the model's chat template, token for token, with the
  python tool declared the Hermes way;
* a turn stops at ``<|im_end|>``; masks mark the policy's own tokens, never a tool's output;
* the trainer logged the sampler/trainer mismatch (TIS) on every step;
* the lake's evals table holds the SFT policy and the trained one on both held-out sets."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import require_real_model, require_shared


@pytest.fixture(scope="module")
def real_mission(tmp_path_factory, sandbox_available, smollm2) -> Path:
    require_real_model()
    shared = require_shared()
    cwd = tmp_path_factory.mktemp("real-mission")
    # the session's import (tests/test_model_import.py checks it) where the mission looks for
    # it: the mission's import stage finds it by its sha256 instead of importing again (~40 s)
    shutil.copytree(smollm2, cwd / "data/lake/models" / smollm2.name, copy_function=os.link)
    old, env = os.getcwd(), os.environ.get("FLOW_SHARED_DATA")
    os.chdir(cwd)
    os.environ["FLOW_SHARED_DATA"] = str(shared)
    try:
        from flows.cli import app

        res = CliRunner().invoke(app, ["run", "--real", "--quick"])
        assert res.exit_code == 0, res.output[-4000:]
    finally:
        os.chdir(old)
        if env is None:
            os.environ.pop("FLOW_SHARED_DATA", None)
        else:
            os.environ["FLOW_SHARED_DATA"] = env
    return cwd / "data/lake"


def _q(lake: Path, sql: str) -> list[dict]:
    from pipeline.lake import Lake
    from pipeline.lake.query import query

    return query(Lake(str(lake)), sql).to_pylist()


def test_every_stage_ran_on_the_imported_model(real_mission):
    models = list((real_mission / "models").iterdir())
    assert len(models) == 1 and (models[0] / "import.json").exists()
    record = json.loads((models[0] / "import.json").read_text())
    assert record["architecture"] == "LlamaForCausalLM"
    sft = json.loads(
        next((real_mission / "runs").glob("sft-*/checkpoint-latest/config.json")).read_text()
    )
    assert sft["architectures"] == ["LlamaForCausalLM"] and sft["num_hidden_layers"] == 30


def test_rollouts_are_the_templates_tokens_stopped_at_im_end_and_masked(real_mission):
    from transformers import AutoTokenizer

    from flows.mission import MissionConfig
    from pipeline.rollout.agent import PYTHON_TOOL, head_messages

    agent = MissionConfig.real(quick=True).agent
    rows = _q(
        real_mission,
        "SELECT r.*, q.question FROM rollouts r JOIN (SELECT question_id, any_value(question) question FROM questions GROUP BY 1) q USING (question_id)",
    )
    assert rows and {r["sample"] for r in rows} == {0, 1, 2, 3}  # K=4
    policy = Path(rows[0]["policy"])  # as the run named it, from its working folder
    tok = AutoTokenizer.from_pretrained(str(real_mission.parents[1] / policy))
    end = tok.convert_tokens_to_ids("<|im_end|>")
    for r in rows:
        text = tok.apply_chat_template(
            head_messages(r["question"], agent.system_prompt),
            tools=[PYTHON_TOOL],
            tokenize=False,
            add_generation_prompt=True,
        )
        assert r["prompt_ids"] == tok(text, add_special_tokens=False).input_ids
        assert len(r["mask"]) == len(r["response_ids"])
        if r["finish_reason"] == "answer":  # the policy stopped: its last token is the stop
            assert r["response_ids"][-1] == end and r["mask"][-1] == 1
        messages = json.loads(r["messages"])
        for m in messages:
            if m["role"] == "tool" and len(m["content"]) > 3:  # a tool's output is never trained
                own = tok.decode(
                    [t for t, k in zip(r["response_ids"], r["mask"], strict=True) if k]
                )
                assert m["content"] not in own


def test_training_logged_tis_and_the_evals_table_holds_both_policies_on_both_sets(real_mission):
    (metrics,) = list((real_mission / "runs").glob("demo-v*-grpo-*/metrics.jsonl"))
    steps = [json.loads(x) for x in metrics.read_text().splitlines() if "reward_mean" in x]
    assert len(steps) == 1
    for s in steps:
        assert "tis_weight_mean" in s and "logp_mismatch_mean" in s and s["logp_reported_frac"] > 0
    evals = _q(
        real_mission,
        "SELECT DISTINCT stage, eval_set FROM evals WHERE slice = 'all' ORDER BY 1, 2",
    )
    assert [(e["stage"], e["eval_set"]) for e in evals] == [
        ("grpo", "gsm8k_heldout"),
        ("grpo", "nano_eval"),
        ("sft", "gsm8k_heldout"),
        ("sft", "nano_eval"),
    ]

"""The trainer's guards and defaults, each on the real loop with a tiny model: the clip acts by
default, a group of one and a nan reward cannot silently ruin the weights, TIS scores the
truncated distribution the engine sampled, flat groups are counted once, the policy's own agent
loop travels with it, SFT batches are cut anew each epoch. Each test failed on the trainer as
it was."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from pipeline.rollout.agent import AgentConfig
from pipeline.rollout.policy_loop import LOOP_FILE, read_loop
from trainer.loss import group_advantages
from trainer.metrics import warnings_for
from trainer.sft import LengthBatches
from trainer.train import TrainConfig, agent_config, train

PROMPTS = [{"question_id": f"q{i}", "question": f"Say {i}."} for i in range(4)]
ONE_TURN = AgentConfig(max_turns=1, max_response_tokens=8, sandbox_workers=0)


def run(model: str, out: Path, reward=lambda e, q: float(e.sample), **kw) -> list[dict]:
    kw = {
        "steps": 1, "prompts_per_step": 2, "group_size": 4, "max_tokens": 8, "agent": ONE_TURN,
        "rollout_backend": "transformers", "use_overlong": False,
    } | kw  # fmt: skip
    return train(TrainConfig(model=model, out=str(out), **kw), PROMPTS, reward)


def test_the_clip_acts_with_the_default_minibatches(tiny_model, tmp_path):
    """With one minibatch every update is at ratio 1 (the clip never binds); the default
    minibatches move the policy off the rollouts within the step, and at a large step size
    the clip-higher bounds are hit on both sides."""
    assert TrainConfig(model="m", out="o").minibatches > 1
    (one,) = run(tiny_model, tmp_path / "one", minibatches=1, lr=0.05)
    assert one["approx_kl"] == 0.0 and one["clip_frac_low"] == one["clip_frac_high"] == 0.0
    (m,) = run(tiny_model, tmp_path / "default", lr=0.05)
    assert m["ratio_first"] == 1.0 and m["ratio_last"] != 1.0
    assert m["approx_kl"] != 0.0
    assert m["clip_frac_low"] + m["clip_frac_high"] > 0, m


def test_a_group_of_one_is_refused_and_has_a_finite_advantage():
    with pytest.raises(ValueError, match="group_size must be at least 2"):
        TrainConfig(model="m", out="o", group_size=1)
    adv = group_advantages(torch.tensor([[1.0], [0.0]]))  # [G, 1]: verl's mean 0, std 1
    assert torch.isfinite(adv).all() and adv.flatten().tolist() == [1.0, 0.0]


def test_a_nan_reward_stops_the_run_before_any_weight_is_touched(tiny_model, tmp_path):
    with pytest.raises(FloatingPointError, match="non-finite"):
        run(tiny_model, tmp_path / "nan", reward=lambda e, q: math.nan if e.sample else 1.0)
    assert not (tmp_path / "nan/checkpoint-latest").exists()  # no nan checkpoint saved


@pytest.mark.parametrize("truncation", [{"top_k": 5}, {"top_p": 0.6}])
def test_tis_scores_the_truncated_distribution_the_engine_sampled(tiny_model, tmp_path, truncation):
    """The engine reports log-probs of its top-k / top-p distribution; the trainer's pi_old is
    taken under the same truncation, so the importance weights are 1 (they averaged 0.68 at
    top_k 20 when pi_old applied the temperature only)."""
    (m,) = run(tiny_model, tmp_path / "run", tis="on", group_size=4, max_tokens=12, **truncation)
    assert m["logp_reported_frac"] == 1.0
    assert m["logp_mismatch_max"] < 1e-4, m
    assert m["tis_weight_mean"] == pytest.approx(1.0, abs=1e-4)


def test_flat_groups_are_counted_once_without_dynamic_sampling(tiny_model, tmp_path):
    (m,) = run(tiny_model, tmp_path / "run", reward=lambda e, q: 0.0)
    assert m["zero_var_frac"] == 1.0  # 2 flat groups of 2 (it logged 0.5)


def test_the_beta_band_needs_a_beta():
    with pytest.raises(ValueError, match="beta > 0"):
        TrainConfig(model="m", out="o", entropy_band=(0.5, 1.5), entropy_band_adjusts="beta")
    with pytest.raises(ValueError, match="entropy_band"):
        TrainConfig(model="m", out="o", entropy_band=(1.5, 0.5))


def test_accuracy_zero_on_every_step_warns():
    class Tok:
        def __len__(self) -> int:
            return 1000

    step = {"entropy": 1.0, "tool_calls": 0, "accuracy": 0.0}
    assert not any("accuracy 0" in w for w in warnings_for(step, [step], Tok()))
    assert any("agent_loop.json" in w for w in warnings_for(step, [step, step], Tok()))
    assert not warnings_for(step, [step, step | {"accuracy": 0.1}], Tok())


def test_sft_batches_are_cut_anew_each_epoch_and_resume():
    lengths = [(i * 7919) % 97 for i in range(200)]
    s = LengthBatches(lengths, 8, seed=0, window=5)
    first = s.take(s.per_epoch)
    second = s.take(s.per_epoch)
    for epoch in (first, second):  # every example once per epoch
        assert sorted(i for b in epoch for i in b) == list(range(200))
    assert {tuple(b) for b in first} != {tuple(b) for b in second}
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in first)
    assert spread < 0.25 * 97 * len(first)  # still grouped by length
    again = LengthBatches(lengths, 8, seed=0, window=5)
    again.cursor = s.per_epoch
    assert again.take(3) == second[:3]


def rl_dataset(folder: Path) -> str:
    (folder / "rl").mkdir(parents=True)
    rows = [
        {"question_id": f"q{i}", "question": f"What is {i} + 1?", "ground_truth": str(i + 1),
         "answer_type": "integer"}
        for i in range(4)
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), folder / "rl" / "part-0.parquet")
    return str(folder)


def test_the_agent_loop_travels_with_the_policy(tiny_model, tmp_path):
    """SFT writes the loop it trained with beside the weights; without --max-turns/--tools,
    `python -m trainer` trains that loop (not the 4-turn declared-tool default) and its
    checkpoint carries it on; an explicit option still wins."""
    from trainer.sft import SFTTrainConfig, sft

    loop = AgentConfig(
        max_turns=3, max_response_tokens=96, system_prompt=None, declare_tools=False,
        sandbox_workers=0,
    )  # fmt: skip
    rows = [
        {"record_id": "r", "messages": [
            {"role": "user", "content": "What is 1 + 1?"},
            {"role": "assistant", "content": "The answer is 2."},
        ]}
    ]  # fmt: skip
    sft(SFTTrainConfig(out=str(tmp_path / "sft"), model=tiny_model, steps=1, agent=loop), rows)
    policy = tmp_path / "sft/checkpoint-latest"
    assert read_loop(policy).agent == loop
    assert agent_config(None, model=str(policy)) == loop
    assert agent_config(None, max_turns=2, model=str(policy)).max_turns == 2  # explicit wins
    data = rl_dataset(tmp_path / "data")
    out = tmp_path / "grpo"
    cmd = [sys.executable, "-m", "trainer", "--dataset", data, "--model", str(policy),
           "--out", str(out), "--steps", "1", "--prompts-per-step", "2", "--group-size", "2",
           "--max-tokens", "8", "--rollout-backend", "transformers"]  # fmt: skip
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    state = torch.load(out / "checkpoint-latest/trainer_state.pt", weights_only=False)
    assert state["config"]["agent"]["max_turns"] == 3
    assert state["config"]["agent"]["declare_tools"] is False
    saved = json.loads((out / "checkpoint-latest" / LOOP_FILE).read_text())
    assert saved["agent"]["max_turns"] == 3 and saved["max_tokens"] == 8

"""The trainer's real path: multi-turn by default, log-probs under the sampling
distribution, accuracy-based dynamic sampling, policy-token lengths, numerics, the paper's
schedules. Each test failed on the trainer as it was."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline.rollout.agent import SYSTEM, Episode
from trainer.episodes import default_reward, flat_group
from trainer.logprobs import token_logprobs
from trainer.loss import grpo_tcr_loss
from trainer.rewards import tool_bonus_paper
from trainer.train import TrainConfig, agent_config, band_adjust, eps_high_at


@pytest.fixture(scope="module")
def model(tiny_model):
    return AutoModelForCausalLM.from_pretrained(tiny_model)


def _ids(n: int = 2, t: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 300, (n, t), generator=g), torch.ones(n, t, dtype=torch.long)


def test_multi_turn_tools_are_the_default(tmp_path):
    assert TrainConfig(model="m", out="o").agent.max_turns > 1
    assert TrainConfig(model="m", out="o").rollout_backend == "auto"
    a = agent_config(None)
    assert a.max_turns == 4 and a.declare_tools and a.system_prompt == SYSTEM
    one = agent_config(None, tools="none")
    assert one.max_turns == 1 and not one.declare_tools
    # the dataset's own system prompt, from its manifest
    (tmp_path / "manifest.json").write_text(json.dumps({"config": {"system_prompt": "Be brief."}}))
    assert agent_config(str(tmp_path), max_turns=2).system_prompt == "Be brief."
    with pytest.raises(ValueError, match="tools"):
        agent_config(None, tools="bash")


def test_log_probs_are_taken_at_the_sampling_temperature(model):
    ids, attn = _ids()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        want = torch.log_softmax(logits / 0.6, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        got, _ = token_logprobs(model, ids, attn, temperature=0.6)
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, token_logprobs(model, ids, attn)[0], atol=1e-3)


def test_chunked_log_softmax_equals_the_whole_and_entropy_leaves_the_graph(model):
    ids, attn = _ids(t=20)
    whole, ent_whole = token_logprobs(model, ids, attn, with_entropy=True, chunk=10**6)
    parts, ent_parts = token_logprobs(model, ids, attn, with_entropy=True, chunk=3)
    assert torch.allclose(whole, parts, atol=1e-6) and torch.allclose(
        ent_whole, ent_parts, atol=1e-5
    )
    g1 = torch.autograd.grad(whole.sum(), model.lm_head.weight, retain_graph=True)[0]
    g2 = torch.autograd.grad(parts.sum(), model.lm_head.weight)[0]
    assert torch.allclose(g1, g2, atol=1e-6)
    # coefficient 0: the entropy is a metric, not part of the graph
    assert parts.requires_grad and not ent_parts.requires_grad
    _, ent = token_logprobs(model, ids, attn, with_entropy=True, entropy_grad=True)
    assert ent.requires_grad


def test_log_ratio_is_clamped_before_exp():
    logp = torch.tensor([[0.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-200.0, 0.0]])  # a ratio of e^200 overflows float32
    loss, m = grpo_tcr_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 2))
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(logp.grad).all()


def _episode(policy: int, tool: int, calls: int = 0, text: str = "\\boxed{4}") -> Episode:
    e = Episode("q", 0, [1, 2], mask=[1] * policy + [0] * tool, tool_calls=calls)
    e.response_ids = [5] * (policy + tool)
    e.messages = [{"role": "assistant", "content": text}]
    return e


def test_overlong_shaping_counts_only_the_policys_tokens():
    cfg = TrainConfig(model="m", out="o", l_max=100, l_cache=20)
    q = {"ground_truth": "4", "answer_type": "integer"}
    reward = default_reward(cfg)
    assert reward(_episode(50, 500), q) == 1.0  # long tool output: no penalty
    assert reward(_episode(120, 0), q) == 0.0  # the policy itself ran long: +1 - 1


def test_dynamic_sampling_filters_on_accuracy_not_reward():
    cfg = TrainConfig(model="m", out="o")
    varied = torch.tensor([1.0, 0.9, 1.1, 1.0])  # all correct, shaping makes rewards differ
    assert flat_group(cfg, varied, [True] * 4)  # DAPO: no signal about the answer
    assert not flat_group(cfg, varied, [True, False, True, True])
    by_reward = TrainConfig(model="m", out="o", dynamic_sampling_on="reward")
    assert not flat_group(by_reward, varied, [True] * 4)


def test_the_papers_eps_high_schedule():
    cfg = TrainConfig(model="m", out="o", steps=100, eps_high_schedule="paper")
    assert eps_high_at(cfg, 0) == pytest.approx(0.35)
    assert eps_high_at(cfg, 50) == pytest.approx(0.275)
    assert eps_high_at(cfg, 90) == pytest.approx(0.25)  # floored
    assert eps_high_at(TrainConfig(model="m", out="o"), 37) == 0.28  # constant by default


def test_the_entropy_band_adjusts_beta_as_the_paper_does():
    cfg = TrainConfig(
        model="m", out="o", entropy_band=(0.5, 1.5), entropy_band_adjusts="beta", beta=0.01
    )
    assert band_adjust(cfg, 0.1, 0.0, 0.01) == (0.0, pytest.approx(0.009))  # below: x0.9
    assert band_adjust(cfg, 2.0, 0.0, 0.01) == (0.0, pytest.approx(0.011))  # above: x1.1
    assert band_adjust(cfg, 1.0, 0.0, 0.01) == (0.0, 0.01)
    bonus = TrainConfig(model="m", out="o", entropy_band=(0.5, 1.5))
    assert band_adjust(bonus, 0.1, 0.0, 0.01)[0] > 0  # the entropy-bonus variant


def test_the_papers_tool_bonus():
    assert [tool_bonus_paper(n) for n in (0, 1, 5, 9)] == pytest.approx([0, 0.1, 0.5, 0.5])
    cfg = TrainConfig(
        model="m", out="o", use_tool_bonus=True, tool_bonus="paper", use_overlong=False
    )
    q = {"ground_truth": "4", "answer_type": "integer"}
    assert default_reward(cfg)(_episode(10, 0, calls=7), q) == pytest.approx(1.5)
    assert TrainConfig(model="m", out="o").use_tool_bonus is False  # off by default


def _one_step(model: str, tmp_path, group_size: int, tokens: int, **kw) -> dict:
    """One training step of 2 single-turn prompts on transformers rollouts: its metrics."""
    from pipeline.rollout.agent import AgentConfig
    from trainer.train import train

    cfg = TrainConfig(
        model=model,
        out=str(tmp_path / "run"),
        steps=1,
        prompts_per_step=2,
        group_size=group_size,
        max_tokens=tokens,
        agent=AgentConfig(max_turns=1, max_response_tokens=tokens, sandbox_workers=0),
        rollout_backend="transformers",
        use_overlong=False,
        **kw,
    )
    prompts = [{"question_id": f"q{i}", "question": f"Say {i}."} for i in range(2)]
    (m,) = train(cfg, prompts, lambda e, q: float(e.sample))
    return m


@pytest.mark.parametrize("precision", ["bf16", "none"])
def test_on_policy_ratio_is_exactly_one_under_autocast(tiny_model, tmp_path, precision):
    """pi_old is computed under the update's autocast: on-policy, r_t = 1 and KL = 0 (with
    pi_old in fp32 and the update in bf16, the first ratio was off by the bf16 rounding)."""
    m = _one_step(tiny_model, tmp_path, group_size=2, tokens=8, autocast=precision, minibatches=1)
    assert m["ratio_first"] == 1.0 and m["approx_kl"] == 0.0


KILLABLE = """
import sys
from pipeline.rollout.agent import AgentConfig
from trainer.train import TrainConfig, train
model, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
prompts = [{"question_id": f"q{i}", "question": f"Say {i}."} for i in range(4)]
agent = AgentConfig(max_turns=1, max_response_tokens=4, sandbox_workers=0)
cfg = TrainConfig(model=model, out=out, steps=steps, prompts_per_step=2, group_size=2,
                  max_tokens=4, agent=agent, rollout_backend="transformers", checkpoint_every=1,
                  use_overlong=False, lr=1e-3)
train(cfg, prompts, lambda e, q: float(e.sample))
"""


def test_kill_9_never_leaves_the_run_without_a_loadable_checkpoint(tiny_model, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    repo = os.path.dirname(os.path.dirname(__file__))
    out, steps = tmp_path / "run", 40
    cmd = [sys.executable, "-c", KILLABLE, tiny_model, str(out), str(steps)]
    latest = out / "checkpoint-latest"

    def saved_step() -> int:
        try:
            return torch.load(latest / "trainer_state.pt", weights_only=True)["step"]
        except (FileNotFoundError, RuntimeError, EOFError):
            return 0

    last = 0
    for delay in (0.0, 0.03, 0.11):  # kills at different points of the step/checkpoint cycle
        proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while saved_step() <= last and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
        # whatever the moment, checkpoint-latest is whole: the state and the weights load
        state = torch.load(latest / "trainer_state.pt", weights_only=True)
        assert state["step"] >= last + 1
        AutoModelForCausalLM.from_pretrained(latest)
        last = state["step"]
    assert last < steps
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, steps + 1))  # each step logged once
    assert saved_step() == steps
    assert sorted(p.name for p in out.glob("checkpoint-*")) == [
        f"checkpoint-{steps}",
        "checkpoint-latest",
    ]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_sampler_is_the_policy_that_is_scored(tiny_model, tmp_path, temperature):
    """The engine's own log-probs of what it sampled equal the trainer's log pi_old: same
    distribution (temperature applied in both, nothing inherited), so the mismatch is ~0."""
    m = _one_step(tiny_model, tmp_path, group_size=4, tokens=12, temperature=temperature)
    assert m["logp_reported_frac"] == 1.0
    assert m["logp_mismatch_max"] < 1e-4, m["logp_mismatch_max"]
    assert m["tis"] is False  # on by default with vLLM only


def test_truncated_importance_weights():
    from trainer.logprobs import mismatch

    old = torch.tensor([[0.0, -1.0, -2.0, -3.0]])
    eng = torch.tensor([[float("nan"), -1.5, -2.0, -0.5]])  # sampler log-probs; nan: unreported
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the last token is a tool token
    w, m = mismatch(old, eng, mask, cap=1.2)
    assert torch.allclose(w, torch.tensor([[1.0, 1.2, 1.0, 1.0]]))  # e^0.5 capped at 1.2
    assert m["logp_mismatch_max"] == 0.5 and m["logp_mismatch_mean"] == 0.25
    logp = torch.zeros(1, 4, requires_grad=True)
    plain, _ = grpo_tcr_loss(logp, logp.detach(), torch.tensor([1.0]), mask)
    weighted, _ = grpo_tcr_loss(logp, logp.detach(), torch.tensor([1.0]), mask, is_weight=w)
    assert weighted.item() == pytest.approx(plain.item() * (1 + 1.2 + 1) / 3)


def test_a_misspelt_option_fails_when_the_config_is_made():
    """Before any model loads (once a bad `tis` failed after the first rollouts, and a bad
    `tool_bonus` silently meant `capped`)."""
    for bad in (
        {"tis": "yes"},
        {"tool_bonus": "big"},
        {"rollout_backend": "hf"},
        {"autocast": "fp8"},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            TrainConfig(model="m", out="o", **bad)

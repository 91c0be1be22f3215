"""The GRPO-TCR loss and rewards against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.loss import group_advantages, grpo_tcr_loss
from trainer.rewards import ExternalScorer, outcome, overlong, tool_bonus


def t(x):
    return torch.tensor(x, dtype=torch.float64)


def test_group_advantages_and_zero_variance_groups():
    r = t([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    a = group_advantages(r, eps=0.0 + 1e-12)  # Bessel-corrected std by default, as TRL and verl
    s = math.sqrt(1 / 3)  # std of (1, 0, 0, 1) with n - 1
    assert torch.allclose(a[0], t([0.5, -0.5, -0.5, 0.5]) / s)
    b = group_advantages(r, eps=1e-12, unbiased=False)
    assert torch.allclose(b[0], t([1.0, -1.0, -1.0, 1.0]))
    assert torch.all(a[1] == 0)  # zero variance: no signal
    assert torch.allclose(group_advantages(r, std_norm=False)[0], t([0.5, -0.5, -0.5, 0.5]))


def test_clip_higher_is_asymmetric():
    logp_old = t([[0.0, 0.0]])
    mask = t([[1.0, 1.0]])
    # ratio 1.5 on both tokens
    logp = logp_old + math.log(1.5)
    # positive advantage: clipped at 1 + 0.28
    loss, m = grpo_tcr_loss(logp, logp_old, t([1.0]), mask)
    assert loss.item() == pytest.approx(-1.28) and m["clip_frac_high"] == 1.0
    # ratio 0.5, negative advantage: clipped at 1 - 0.2 -> -min(-0.5, -0.8) = 0.8
    logp = logp_old + math.log(0.5)
    loss, m = grpo_tcr_loss(logp, logp_old, t([-1.0]), mask)
    assert loss.item() == pytest.approx(0.8) and m["clip_frac_low"] == 1.0
    # inside the band nothing is clipped: -(r * A)
    logp = logp_old + math.log(1.1)
    loss, _ = grpo_tcr_loss(logp, logp_old, t([2.0]), mask)
    assert loss.item() == pytest.approx(-2.2)


def test_token_level_not_sequence_level_weighting():
    # sequence 0: 1 token with loss -1; sequence 1: 3 tokens with loss +1 each
    logp = torch.zeros(2, 3, dtype=torch.float64)
    mask = t([[1, 0, 0], [1, 1, 1]])
    loss, _ = grpo_tcr_loss(logp, logp.clone(), t([1.0, -1.0]), mask)
    assert loss.item() == pytest.approx((-1 + 3) / 4)  # token-level: 0.5
    # the original GRPO's sequence level (plain GRPO in bench/ablation.py): ((-1) + (+1)) / 2
    seq, _ = grpo_tcr_loss(logp, logp.clone(), t([1.0, -1.0]), mask, loss_agg="sequence")
    assert seq.item() == pytest.approx(0.0)
    seq, _ = grpo_tcr_loss(logp, logp.clone(), t([1.0, 1.0]), mask, loss_agg="sequence", n_seqs=4)
    assert seq.item() == pytest.approx((-1 - 1) / 4)  # over the whole batch's sequences
    # across accumulation steps: the denominator is the whole batch's token count
    loss_half, _ = grpo_tcr_loss(logp[:1], logp[:1].clone(), t([1.0]), mask[:1], n_tokens=4)
    assert loss_half.item() == pytest.approx(-1 / 4)


def test_tool_tokens_are_masked_out():
    logp = torch.zeros(1, 4, dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 4, dtype=torch.float64)
    mask = t([[1, 0, 0, 1]])  # tokens 1-2 came from a tool
    loss, m = grpo_tcr_loss(logp, old, t([1.0]), mask)
    loss.backward()
    assert (
        logp.grad[0, 1] == 0 and logp.grad[0, 2] == 0 and logp.grad[0, 0] != 0 and m["tokens"] == 2
    )


def test_dual_clip_bounds_negative_advantage_loss():
    old = t([[0.0]])
    logp = old + math.log(5.0)  # ratio 5 with A = -1: plain loss 5
    loss, _ = grpo_tcr_loss(logp, old, t([-1.0]), t([[1.0]]))
    assert loss.item() == pytest.approx(5.0)
    loss, _ = grpo_tcr_loss(logp, old, t([-1.0]), t([[1.0]]), dual_clip=3.0)
    assert loss.item() == pytest.approx(3.0)


def test_k3_kl_and_entropy_terms():
    old = t([[0.0]])
    logp = t([[math.log(0.5)]])
    ref = t([[math.log(0.25)]])
    loss, m = grpo_tcr_loss(logp, logp.clone(), t([0.0]), t([[1.0]]), ref_logp=ref, beta=0.1)
    k3 = math.exp(math.log(0.5)) - math.log(0.5) - 1  # r = ref/pi = 0.5
    assert m["kl_ref"] == pytest.approx(k3) and loss.item() == pytest.approx(0.1 * k3)
    loss, _ = grpo_tcr_loss(old, old, t([0.0]), t([[1.0]]), entropy=t([[2.0]]), ent_coef=0.01)
    assert loss.item() == pytest.approx(-0.02)


def test_overlong_shaping_three_pieces():
    assert overlong(100, 1000, 200) == 0.0  # <= L_max - L_cache
    assert overlong(900, 1000, 200) == pytest.approx(-0.5)  # (800 - 900) / 200
    assert overlong(1000, 1000, 200) == pytest.approx(-1.0)
    assert overlong(1001, 1000, 200) == -1.0


def test_outcome_tool_bonus_and_external_scorer():
    assert (
        outcome("so \\boxed{42}", "42", "integer") == 1.0
        and outcome("\\boxed{41}", "42", "integer") == -1.0
    )
    assert (
        tool_bonus(10, 0) == 0.2 and tool_bonus(3, 3) == 0.0
    )  # bounded, below the outcome's range
    judge = ExternalScorer(lambda q, r: (1.0, "good"), lam=0.2)
    assert judge.mix(-1.0, "q", "r") == (pytest.approx(-0.6), "good")

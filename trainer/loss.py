"""GRPO-TCR loss: group advantages, clip-higher, token-level averaging, optional dual-clip, KL
(k3) and entropy terms. The body reads like the formulas in ../shared/DESIGN.md."""

from __future__ import annotations

import torch

MAX_LOG_RATIO = 20.0  # |log r_t| beyond this is clamped before exp (no inf, no nan)


def group_advantages(
    rewards: torch.Tensor, eps: float = 1e-6, std_norm: bool = True, unbiased: bool = True
) -> torch.Tensor:
    """A_i = (R_i - mean_g R) / (std_g R + eps).  rewards: [G, K] -> [G, K]. The std is
    Bessel-corrected by default, as in TRL and verl (``unbiased=False``: the population std).
    A group of one has no baseline: as verl does, its mean is 0 and its std 1 (A_i = R_i), where
    the Bessel-corrected std of one reward would be nan and turn every weight into nan."""
    if rewards.shape[1] == 1:
        return rewards.clone()  # [G, 1]
    mean = rewards.mean(dim=1, keepdim=True)  # [G, 1]
    centered = rewards - mean  # [G, K]
    if not std_norm:
        return centered
    std = rewards.std(dim=1, keepdim=True, unbiased=unbiased)  # [G, 1]
    return centered / (std + eps)


def grpo_tcr_loss(
    logp: torch.Tensor,  # [B, T] log pi_theta of the sampled tokens
    old_logp: torch.Tensor,  # [B, T] log pi_old (no grad)
    adv: torch.Tensor,  # [B] one advantage per sequence
    mask: torch.Tensor,  # [B, T] 1 on policy tokens, 0 on prompt / tool / padding
    eps_low: float = 0.20,
    eps_high: float = 0.28,
    dual_clip: float | None = None,  # c > 1: bound the loss of negative-advantage tokens by c*|A|
    ref_logp: torch.Tensor | None = None,  # [B, T] reference model, for the KL term
    beta: float = 0.0,
    entropy: torch.Tensor | None = None,  # [B, T] true entropy of the policy at each token
    ent_coef: float = 0.0,
    n_tokens: float | None = None,  # policy tokens of the whole batch (all accumulation steps)
    is_weight: torch.Tensor | None = None,  # [B, T] truncated importance weight pi_old / pi_sampler
    loss_agg: str = "token",  # token (GRPO-TCR, DAPO) | sequence (the original GRPO)
    n_seqs: float | None = None,  # sequences of the whole batch (sequence-level denominator)
) -> tuple[torch.Tensor, dict[str, float]]:
    mask = mask.to(logp.dtype)
    n = (
        mask.sum() if n_tokens is None else torch.as_tensor(n_tokens, dtype=logp.dtype)
    )  # token-level denominator
    A = adv[:, None]  # [B, 1] broadcast over the response tokens
    log_ratio = (logp - old_logp).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # [B, T]
    ratio = torch.exp(log_ratio)  # [B, T] r_t
    unclipped = ratio * A  # [B, T]
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * A  # [B, T] clip-higher
    l_t = -torch.min(unclipped, clipped)  # [B, T]
    if dual_clip is not None:
        l_t = torch.where(A < 0, torch.min(l_t, -dual_clip * A), l_t)  # [B, T]
    if is_weight is not None:  # TIS: min(pi_old / pi_sampler, C), no gradient
        l_t = l_t * is_weight.detach()
    if beta > 0 and ref_logp is not None:
        log_r = ref_logp - logp  # [B, T]
        kl = torch.exp(log_r) - log_r - 1  # [B, T] k3 estimator of KL(pi_theta || pi_ref)
        l_t = l_t + beta * kl
    else:
        kl = None
    if ent_coef and entropy is not None:
        l_t = l_t - ent_coef * entropy
    if loss_agg == "sequence":  # mean over each response's tokens, then over responses
        per_seq = (l_t * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)  # [B]
        rows = n_seqs if n_seqs is not None else (mask.sum(dim=1) > 0).sum()
        loss = per_seq.sum() / torch.as_tensor(rows, dtype=logp.dtype).clamp(min=1)
    else:  # token-level: sum over all policy tokens / their count
        loss = (l_t * mask).sum() / n.clamp(min=1)

    with torch.no_grad():
        m = mask.bool()
        low = ((ratio < 1 - eps_low) & (A < 0) & m).sum()  # clipped below (negative advantages)
        high = ((ratio > 1 + eps_high) & (A > 0) & m).sum()  # clipped above (positive advantages)
        tok = m.sum().clamp(min=1)
        metrics = {
            "loss": loss.item(),
            "clip_frac_low": (low / tok).item(),
            "clip_frac_high": (high / tok).item(),
            "approx_kl": ((old_logp - logp)[m].mean().item() if m.any() else 0.0),  # k1 vs pi_old
            "ratio_mean": (ratio[m].mean().item() if m.any() else 1.0),
            "tokens": m.sum().item(),
        }
        if kl is not None:
            metrics["kl_ref"] = kl[m].mean().item()
        if entropy is not None:
            metrics["entropy"] = entropy[m].mean().item() if m.any() else 0.0
    return loss, metrics

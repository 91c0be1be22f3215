"""Log-probabilities: the trainer's (under the sampling temperature, chunked, with the
entropy), the engine's aligned with them, and truncated importance sampling between the two."""

from __future__ import annotations

import math

import torch

from pipeline.rollout.agent import Episode
from trainer.config import TrainConfig


def autocast(config: TrainConfig, device_type: str):
    """One precision for pi_old, pi_ref and pi_theta."""
    on = config.autocast == "bf16" or (config.autocast == "auto" and device_type == "cuda")
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=on)


def token_logprobs(
    model,
    ids: torch.Tensor,
    attn: torch.Tensor,
    with_entropy: bool = False,
    keep: int | None = None,
    temperature: float = 1.0,
    chunk: int = 512,
    entropy_grad: bool = False,
    top_k: int = -1,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(token_t | tokens_<t) for t >= 1 under the sampling distribution (logits divided
    by the sampling temperature, as verl does), and the entropy of each next-token distribution.
    ids, attn: [B, T] -> [B, T-1]. With ``keep``, logits are computed for the last ``keep``
    positions only (the responses; prompt positions get 0). The fp32 log-softmax runs over
    ``chunk`` positions at a time, so no [B, T, V] fp32 tensor is ever whole; the entropy stays
    out of the autograd graph unless ``entropy_grad`` (its coefficient is not 0). With ``top_k``
    or ``top_p`` the distribution is the truncated one the engines sample and report (the same
    warpers, in vLLM's order): a token outside it has log-prob -1e4, not -inf."""
    T = ids.shape[1]
    if keep is None or keep >= T - 1:
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]  # [B, T-1, V]
        targets = ids[:, 1:]  # [B, T-1]
    else:
        logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep + 1).logits[
            :, :-1
        ]  # [B, keep, V]
        targets = ids[:, T - keep :]  # [B, keep]
    logps, ents = [], []
    for s in range(0, logits.shape[1], chunk):
        z = logits[:, s : s + chunk].float() / temperature  # [B, c, V] fp32
        z = truncate(z, top_k, top_p)  # [B, c, V], -inf outside the sampled support
        logp_all = torch.log_softmax(z, dim=-1)  # [B, c, V]
        lp = logp_all.gather(-1, targets[:, s : s + chunk, None]).squeeze(-1)  # [B, c]
        logps.append(lp.clamp(min=-1e4) if top_k > 0 or top_p < 1.0 else lp)
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                finite = logp_all.masked_fill(torch.isinf(logp_all), 0.0)  # 0·log 0 = 0
                ents.append(-(logp_all.exp() * finite).sum(-1))  # [B, c]
    logp = torch.cat(logps, dim=1)  # [B, K]
    ent = torch.cat(ents, dim=1) if with_entropy else None  # [B, K]
    if logp.shape[1] < T - 1:  # left-pad the prompt positions back to [B, T-1]
        pad = T - 1 - logp.shape[1]
        logp = torch.nn.functional.pad(logp, (pad, 0))
        ent = torch.nn.functional.pad(ent, (pad, 0)) if ent is not None else None
    return logp, ent


def truncate(z: torch.Tensor, top_k: int = -1, top_p: float = 1.0) -> torch.Tensor:
    """Logits [..., V] with the tokens top-k and then top-p leave out set to -inf: the
    transformers warpers the rollout engine runs (pipeline.rollout.engines.warpers)."""
    if top_k <= 0 and top_p >= 1.0:
        return z
    from transformers import TopKLogitsWarper, TopPLogitsWarper

    flat = z.reshape(-1, z.shape[-1])  # [N, V]
    if top_k > 0:
        flat = TopKLogitsWarper(top_k=top_k)(None, flat)
    if top_p < 1.0:
        flat = TopPLogitsWarper(top_p=top_p)(None, flat)
    return flat.reshape(z.shape)


def engine_logprobs(episodes: list[Episode], width: int) -> torch.Tensor:
    """The sampler's log-probs aligned with ``batch_tensors``' loss mask: [B, width-1]; nan where the
    engine reported none (and on prompt, tool and padding positions)."""
    out = torch.full((len(episodes), width), float("nan"))
    for i, e in enumerate(episodes):
        if e.logprobs and len(e.logprobs) == len(e.response_ids):
            start = len(e.prompt_ids)
            lp = torch.tensor(e.logprobs, dtype=torch.float32)
            lp[torch.tensor(e.mask) == 0] = float("nan")
            out[i, start : start + len(lp)] = lp
    return out[:, 1:]


def mismatch(old_logp: torch.Tensor, eng_logp: torch.Tensor, mask: torch.Tensor, cap: float):
    """(TIS weights [B, T-1], metrics) from the trainer's pi_old and the sampler's log-probs:
    weight min(exp(log pi_old - log pi_sampler), cap) on policy tokens the engine reported, 1
    elsewhere; the metrics are mean and max |delta log p| over those tokens."""
    known = torch.isfinite(eng_logp) & (mask > 0)
    delta = torch.where(known, old_logp - torch.nan_to_num(eng_logp), torch.zeros_like(old_logp))
    w = torch.where(known, torch.exp(delta.clamp(max=math.log(cap))), torch.ones_like(delta))
    n = int(known.sum())
    metrics = {
        "logp_mismatch_mean": float(delta.abs()[known].mean()) if n else None,
        "logp_mismatch_max": float(delta.abs()[known].max()) if n else None,
        "tis_weight_mean": float(w[known].mean()) if n else None,
        "logp_reported_frac": n / max(1, int((mask > 0).sum())),
    }
    return w, metrics


def batch_tensors(
    episodes: list[Episode], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids [B, T], attention [B, T], loss mask over predicted tokens [B, T-1] (policy tokens only)."""
    seqs = [e.prompt_ids + e.response_ids for e in episodes]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.float32)
    for i, (s, e) in enumerate(zip(seqs, episodes, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
        mask[i, len(e.prompt_ids) : len(s)] = torch.tensor(e.mask, dtype=torch.float32)
    return ids, attn, mask[:, 1:]


def empty_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An empty batch (ids [0, 2]): ``update`` turns each of its micro-batches into a 0 loss."""
    return (
        torch.zeros(0, 2, dtype=torch.long),
        torch.zeros(0, 2, dtype=torch.long),
        torch.zeros(0, 1),
    )

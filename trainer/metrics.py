"""A step's metrics: reduced over the ranks into the numbers every rank logs and decides on,
the warnings a user should see, and where they are written (metrics.jsonl, TensorBoard)."""

from __future__ import annotations

import json
import math

CURVES = ("reward_mean", "accuracy", "entropy", "clip_frac_high", "approx_kl", "response_len")


def warnings_for(m: dict, history: list[dict], tokenizer) -> list[str]:
    w = []
    if m["entropy"] < 0.05:
        w.append("entropy collapsed (< 0.05)")
    if m["entropy"] > 0.9 * math.log(len(tokenizer)):
        w.append("entropy near uniform: exploding")
    prev = [h.get("tool_calls", 0) for h in history[-5:]]
    if prev and max(prev) > 0.2 and m["tool_calls"] == 0:
        w.append("tool calls vanished")
    seen = [h["accuracy"] for h in history if "accuracy" in h] + [m["accuracy"]]
    if len(seen) >= 3 and not any(seen):
        w.append(
            f"accuracy 0 on all {len(seen)} steps: nothing is learnt; is this the agent loop the "
            "policy was trained with (its agent_loop.json: turns, tool declaration, tokens)?"
        )
    return w


def reduce_step(
    config, collected, episodes, rewards, mb_metrics: list[dict], mm: dict, world: int
) -> tuple[dict, int]:
    """(the step's statistics as means over all ranks, tokens generated on all ranks).

    Each entry is (sum, count) on this rank, reduced in one all-reduce, so every rank logs and
    decides (the entropy band) on the same global numbers."""
    from pipeline.evaluate.stage import episode_metrics
    from pipeline.verify import Verdict, extract_answer
    from trainer.distributed import global_max, global_means
    from trainer.episodes import policy_tokens

    groups = collected.groups
    # correctness as the step already judged it (``correct``, BFCL's rules included)
    agent_m = [
        episode_metrics(e, Verdict(ok, extract_answer(e.final_text), "train"))
        for _, ge, _, acc in groups
        for e, ok in zip(ge, acc, strict=True)
    ]
    r = rewards.flatten()
    n_mb = len(mb_metrics)
    n_eps = len(episodes)
    n_tok = sum(len(e.response_ids) for e in episodes)
    g = global_means(
        {
            "reward_mean": (r.sum().item(), r.numel()),
            "_reward_sq": ((r**2).sum().item(), r.numel()),
            "accuracy": (sum(a for g_ in groups for a in g_[3]), r.numel()),
            "entropy": (sum(x["entropy"] for x in mb_metrics), n_mb),
            "clip_frac_low": (sum(x["clip_frac_low"] for x in mb_metrics), n_mb),
            "clip_frac_high": (sum(x["clip_frac_high"] for x in mb_metrics), n_mb),
            "approx_kl": (sum(x["approx_kl"] for x in mb_metrics), n_mb),
            "ratio_first": (mb_metrics[0]["ratio_mean"], 1) if mb_metrics else (0.0, 0),
            # the last minibatch's ratio: how far the policy moved off the rollouts' within
            # the step (the first is exactly 1 on-policy)
            "ratio_last": (mb_metrics[-1]["ratio_mean"], 1) if mb_metrics else (0.0, 0),
            "grad_norm": (sum(x.get("grad_norm", 0.0) for x in mb_metrics), n_mb),
            "response_len": (n_tok, n_eps),
            "tool_calls": (sum(e.tool_calls for e in episodes), n_eps),
            "tool_errors": (sum(e.tool_errors for e in episodes), n_eps),
            # the agent metrics evaluation reports (pipeline.evaluate), per step
            "turns": (sum(e.turns for e in episodes), n_eps),
            "format_rate": (sum(a["formatted"] for a in agent_m), len(agent_m)),
            "verified_by_tool": (sum(a["verified"] for a in agent_m), len(agent_m)),
            "recovery_rate": (
                sum(a["correct"] for a in agent_m if a["tool_errors"]),
                sum(1 for a in agent_m if a["tool_errors"]),
            ),
            "overlong_frac": (
                sum(policy_tokens(e) > config.l_max - config.l_cache for e in episodes),
                n_eps,
            ),
            # of the groups sampled: with dynamic sampling off, flat groups are kept too
            "zero_var_frac": (collected.zero_var, collected.drawn),
            "logp_mismatch_mean": (
                mm["logp_mismatch_mean"] or 0.0,
                int(mm["logp_mismatch_mean"] is not None),
            ),
            "tis_weight_mean": (
                mm["tis_weight_mean"] or 0.0,
                int(mm["tis_weight_mean"] is not None),
            ),
            "logp_reported_frac": (mm["logp_reported_frac"], int(bool(episodes))),
            "_tokens": (n_tok, 1),
        },
        world,
    )
    g["logp_mismatch_max"] = global_max(mm["logp_mismatch_max"], world)
    mean_r, mean_r2 = g.pop("reward_mean"), g.pop("_reward_sq")
    tokens = g.pop("_tokens") * world
    stats = {"reward_mean": mean_r, "reward_std": math.sqrt(max(0.0, mean_r2 - mean_r**2)), **g}
    return stats, tokens


def judge_metrics(config, js: dict, judged: bool, width: int) -> dict:
    """The judge's terms beside the rule reward, and Reagent-U's accuracies (this rank)."""
    m = {}
    if judged:
        m["judge_score_mean"] = js["score_sum"] / js["scored"] if js["scored"] else None
        m["judge_term_mean"] = js["term_sum"] / js["n"] if js["n"] else 0.0
        m["judge_failed_frac"] = js["failed"] / js["n"] if js["n"] else 0.0
    if config.refine:
        m["pool_size"] = width
        m["initial_accuracy"] = js["initial_correct"] / max(1, js["pairs"])
        m["refined_accuracy"] = js["refined_correct"] / max(1, js["pairs"])
    return m


def log_step(out, m: dict, writer, rank: int) -> None:
    """One logger (rank 0): a line of metrics.jsonl, and TensorBoard when installed."""
    if rank != 0:
        return
    with open(out / "metrics.jsonl", "a") as f:
        f.write(json.dumps(m) + "\n")
    if writer is None:
        return
    step = m["step"]
    for k, v in m.items():
        if isinstance(v, float):
            writer.add_scalar(k, v, step)
        elif isinstance(v, dict):  # e.g. the live pyramid: one curve per bin
            for kk, vv in v.items():
                if isinstance(vv, int | float) and not isinstance(vv, bool):
                    writer.add_scalar(f"{k}/{kk}", vv, step)

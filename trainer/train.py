"""A compact GRPO-TCR trainer (cleanrl-style: one config, one loop; the loss in loss.py).

Each step: take ``prompts_per_step`` questions from the dataset's RL shards (a seeded,
resumable stream, or the adaptive sampler), run ``group_size`` episodes each through the same
agent loop as labelling (the policy being trained, or a colocated vLLM engine holding its
weights), score them (composable rewards), drop groups without signal and draw more (dynamic
sampling), compute group advantages, recompute log pi_old with the current weights, weight each
token by min(pi_old / pi_sampler, C) (TIS), then update on minibatches with the token-level,
clip-higher loss. The parts: ``config`` (TrainConfig), ``episodes`` (the prompt stream, rewards,
groups), ``logprobs`` (log pi, TIS), ``loss`` (the formulas), ``distributed`` (reductions),
``metrics`` (what is logged), ``checkpoint`` (resume: model, optimizer, scheduler, RNG, stream).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch

from pipeline.rollout.engines import TransformersEngine
from pipeline.rollout.engines import close as close_engine
from pipeline.sandbox import Sandbox
from trainer.adaptive import AdaptiveSampler, merge_stats
from trainer.checkpoint import (
    checkpoint_due,
    keep_best,
    plot,
    save_train_state,
    set_rng_state,
    start_run,
    tensorboard,
    truncate_metrics,
)
from trainer.config import ROLLOUT_BACKENDS, TOOLS, TrainConfig, agent_config
from trainer.distributed import gather, global_sum, init_distributed
from trainer.episodes import (
    RewardFn,
    collect_groups,
    default_reward,
    load_prompts,
    make_stream,
)
from trainer.logprobs import (
    autocast,
    batch_tensors,
    empty_batch,
    engine_logprobs,
    mismatch,
    token_logprobs,
)
from trainer.loss import group_advantages, grpo_tcr_loss
from trainer.metrics import CURVES, judge_metrics, log_step, reduce_step, warnings_for

__all__ = ["ROLLOUT_BACKENDS", "TOOLS", "TrainConfig", "agent_config", "train", "update"]


def eps_high_at(config: TrainConfig, step: int) -> float:
    """ε_high for this step: constant, linear to ``eps_high_end``, or the paper's schedule."""
    total = max(1, config.steps)
    if config.eps_high_schedule == "paper":
        return max(0.35 - 0.15 * step / total, 0.25)
    if config.eps_high_end is None:
        return config.eps_high
    return config.eps_high + (config.eps_high_end - config.eps_high) * step / max(1, total - 1)


def band_adjust(config: TrainConfig, entropy: float, ent_coef: float, beta: float):
    """(ent_coef, beta) after one step of the entropy-band controller."""
    if config.entropy_band is None:
        return ent_coef, beta
    lo, hi = config.entropy_band
    if config.entropy_band_adjusts == "beta":  # the paper: x0.9 below the band, x1.1 above
        return ent_coef, beta * 0.9 if entropy < lo else beta * 1.1 if entropy > hi else beta
    if entropy < lo:
        return ent_coef * 1.5 + 1e-4, beta
    return (ent_coef / 1.5 if entropy > hi else ent_coef), beta


def update(
    model,
    opt,
    ids,
    attn,
    mask,
    old_logp,
    adv,
    ref_logp,
    config: TrainConfig,
    eps_high: float,
    ent_coef: float,
    keep: int | None = None,
    beta: float | None = None,
    is_weight: torch.Tensor | None = None,
) -> list[dict]:
    """One optimizer step on a minibatch, in ``grad_accum`` micro-batches.

    The token-level denominator is the minibatch's policy-token count; under torch.distributed it
    is summed over all ranks (each rank holds its share of the minibatch), and the loss is scaled
    by the world size because DDP averages gradients: the update equals one process on the whole
    minibatch (tested with 2 gloo processes)."""
    import torch.distributed as dist

    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    n_tokens = mask.sum()
    n_seqs = (mask.sum(dim=1) > 0).sum().to(mask.dtype)  # sequence level: rows with policy tokens
    if world > 1:
        dist.all_reduce(n_tokens)
        dist.all_reduce(n_seqs)
    opt.zero_grad()
    metrics = []
    device_type = "cuda" if ids.is_cuda else "cpu"
    for micro in torch.arange(len(ids)).tensor_split(config.grad_accum):
        if micro.numel() == 0:  # this rank has fewer rows than micro-batches: it still joins
            with autocast(config, device_type):  # DDP's all-reduce, with a loss that weighs 0
                logp, _ = token_logprobs(
                    model,
                    torch.zeros(1, 2, dtype=torch.long, device=ids.device),
                    torch.ones(1, 2, dtype=torch.long, device=ids.device),
                )
            (logp.sum() * 0.0).backward()
            continue
        with autocast(config, device_type):
            logp, ent = token_logprobs(
                model,
                ids[micro],
                attn[micro],
                with_entropy=True,
                keep=keep,
                chunk=config.logprob_chunk,
                entropy_grad=ent_coef != 0,
                **sampled(config),
            )
        loss, lm = grpo_tcr_loss(
            logp,
            old_logp[micro],
            adv[micro],
            mask[micro],
            config.eps_low,
            eps_high,
            config.dual_clip,
            ref_logp[micro] if ref_logp is not None else None,
            config.beta if beta is None else beta,
            ent,
            ent_coef,
            n_tokens=n_tokens.item(),
            is_weight=is_weight[micro] if is_weight is not None else None,
            loss_agg=config.loss_agg,
            n_seqs=n_seqs.item(),
        )
        (loss * world).backward()
        metrics.append(lm)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
    if not torch.isfinite(grad_norm) or not all(math.isfinite(x["loss"]) for x in metrics):
        # (under DDP the gradients are all-reduced: every rank sees the same and stops here)
        raise FloatingPointError(
            f"non-finite loss or gradient (losses {[x['loss'] for x in metrics]}, gradient norm "
            f"{float(grad_norm)}): no update made and no checkpoint written; check the rewards "
            "and advantages of this batch (a nan reward, a group of one)"
        )
    opt.step()
    for x in metrics:
        x["grad_norm"] = float(grad_norm)
    return metrics


def sampled(config: TrainConfig) -> dict:
    """The distribution the engine sampled from (temperature, then top-k, then top-p), for
    pi_old, pi_ref and pi_theta alike: the ratio and the TIS weights compare like with like."""
    return {"temperature": config.temperature, "top_k": config.top_k, "top_p": config.top_p}


def _lr_lambda(warmup: int):
    return lambda step: min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0


def _load(config: TrainConfig, src: str, device: str, world: int):
    """(tokenizer, model, the module the optimizer steps (DDP-wrapped under torchrun), the
    reference policy for the KL term or None)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).to(device)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    trained = model
    if world > 1:  # torchrun: each rank samples its own prompts; gradients are all-reduced
        from torch.nn.parallel import DistributedDataParallel as DDP

        trained = DDP(model, device_ids=[torch.device(device).index] if "cuda" in device else None)
    ref = None
    if config.beta > 0:
        ref = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32)
        ref = ref.to(device).eval()
    return tokenizer, model, trained, ref


def _resume(latest, opt, sched, stream, world: int, rank: int) -> tuple[int, float, float | None]:
    """Restore optimizer, scheduler, RNG and the prompt stream: (step, ent_coef, beta)."""
    state = torch.load(latest / "trainer_state.pt", weights_only=True)
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    set_rng_state(state["rng"])
    if isinstance(stream, AdaptiveSampler):
        saved = state.get("adaptive") or []
        if len(saved) != world:
            raise ValueError(
                f"{latest} holds the adaptive sampler of {len(saved)} rank(s), this run has "
                f"{world}: resume with as many processes, or start a new --out"
            )
        stream.load(saved[rank])
    else:
        stream.cursor = state["cursor"]
    return state["step"], state["ent_coef"], state.get("beta")


def _rollout_engine(config: TrainConfig, policy, model, src: str, start: int):
    """(the engine that samples, its backend): the policy itself, or a colocated vLLM engine
    holding the trained weights (none is started for a finished run resumed)."""
    backend = config.rollout_backend
    if backend == "auto":
        from pipeline.rollout.engines import vllm_available

        backend = "vllm" if vllm_available() else "transformers"
    if backend != "vllm" or start >= config.steps:
        return policy, backend
    from pipeline.rollout.engines import VLLMEngine, push_weights

    engine = VLLMEngine(src, gpu_memory_utilization=config.vllm_gpu_memory, max_model_len=2048)
    push_weights(engine, model)
    return engine, backend


def sampler_states(stream, world: int) -> list[str] | None:
    """Every rank's adaptive sampler state (a collective: all ranks call it), or None."""
    return gather(stream.state(), world) if isinstance(stream, AdaptiveSampler) else None


def train(
    config: TrainConfig,
    prompts: list[dict] | None = None,
    reward_fn: RewardFn | None = None,
    on_step: Callable[[dict], None] | None = None,
    held_out: list[dict] | None = None,
    judge=None,
) -> list[dict]:
    """Run (or resume) training; returns the metrics of the steps run now. ``held_out``:
    questions (question_id, question, ground_truth, answer_type) evaluated every
    ``config.eval_every`` steps. ``judge``: a ``pipeline.judge.Judge`` already loaded (else
    one is loaded from ``config.judge`` when the config uses it)."""
    config.check_inputs(judge_loaded=judge is not None)
    out, latest, resume = start_run(config.out, config.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    world, rank = init_distributed(device)
    if device == "cuda":  # one GPU per rank (torchrun's LOCAL_RANK)
        import os

        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    src = str(latest) if resume else config.model
    tokenizer, model, trained, ref = _load(config, src, device, world)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(config.warmup_steps))
    rows = prompts if prompts is not None else load_prompts(config.dataset)
    if not rows:
        raise ValueError(
            f"no RL prompts in {config.dataset or 'the prompts given'}: the dataset's rl/ split "
            "is empty (its manifest says why: every labelled question was 0/K or K/K, or none "
            "had a verifiable ground truth)"
        )
    stream = make_stream(rows, config, rank, world)
    start, ent_coef, beta = 0, config.ent_coef, config.beta
    if resume:
        start, ent_coef, saved_beta = _resume(latest, opt, sched, stream, world, rank)
        beta = beta if saved_beta is None else saved_beta
        if rank == 0:
            truncate_metrics(out / "metrics.jsonl", start)
    reward_fn = reward_fn or default_reward(config)
    policy = TransformersEngine.from_model(model, tokenizer)  # samples the policy being trained
    engine, backend = _rollout_engine(config, policy, model, src, start)
    if judge is None and config.judge and (config.judge_weight or config.refine):
        from pipeline.judge.config import JudgeConfig
        from pipeline.judge.judge import Judge

        judge = Judge(JudgeConfig(config.judge, max_tokens=config.judge_max_tokens))
    writer = tensorboard(out)
    history = []
    # tools run in warm isolated interpreters kept for the whole run (max_turns 1: no tools)
    sandbox = (
        Sandbox(config.agent.sandbox, config.agent.sandbox_workers)
        if config.agent.max_turns > 1 and config.agent.sandbox_workers > 0
        else None
    )
    use_tis = config.tis == "on" or (config.tis == "auto" and backend == "vllm")
    width = config.group_size * (2 if config.refine else 1)  # Reagent-U pools 2K per question
    reached = start
    try:
        last_save = time.monotonic()
        for step in range(start, config.steps):
            t0 = time.perf_counter()
            eps_high = eps_high_at(config, step)
            if isinstance(stream, AdaptiveSampler):
                stream.begin(step)
                if global_sum(0 if stream.exhausted() else 1, world) == 0:
                    stop = {"step": step + 1, "stopped": "adaptive: every question has retired "
                            "(all-correct over its tracked groups); nothing is left to learn from"}  # fmt: skip
                    history.append(stop)
                    log_step(out, stop, None, rank)
                    break
            reached = step + 1  # the steps this run has gone through (for the checkpoint)
            # ---- rollouts, with dynamic sampling ------------------------------------------------
            got = collect_groups(engine, tokenizer, stream, config, reward_fn, judge, step, sandbox)
            groups = got.groups
            live = merge_stats(gather(stream.stats(), world)) if isinstance(stream, AdaptiveSampler) else {}  # fmt: skip
            if global_sum(len(groups), world) == 0:  # every rank decides the same: skip only
                m = {"step": step + 1, "skipped": "all groups had zero reward variance"} | live
                history.append(m)
                log_step(out, m, None, rank)  # the log says why the step did not update
                continue
            rewards = torch.stack([g[2] for g in groups]) if groups else torch.zeros(0, width)
            adv = group_advantages(rewards, unbiased=config.adv_std_unbiased).flatten()  # [G*K]
            episodes = [e for g in groups for e in g[1]]
            # a rank whose groups were all dropped still runs the update (its minibatches are
            # empty, so it joins every collective with a loss that weighs 0)
            ids, attn, mask = batch_tensors(episodes, policy.pad_id) if episodes else empty_batch()
            ids, attn, mask = ids.to(device), attn.to(device), mask.to(device)  # [B, T], [B, T-1]
            # ---- pi_old, pi_ref and the sampler's log-probs ------------------------------------
            keep = ids.shape[1] - min(len(e.prompt_ids) for e in episodes) if episodes else None
            with torch.no_grad():
                lp = dict(keep=keep, chunk=config.logprob_chunk, **sampled(config))
                if episodes:
                    with autocast(config, ids.device.type):  # the update's precision
                        old_logp, _ = token_logprobs(model, ids, attn, **lp)  # [B, T-1]
                        ref_logp = (
                            token_logprobs(ref, ids, attn, **lp)[0] if ref is not None else None
                        )
                else:
                    old_logp = torch.zeros(0, 1, device=device)
                    ref_logp = torch.zeros(0, 1, device=device) if ref is not None else None
            eng_logp = engine_logprobs(episodes, ids.shape[1]).to(device)  # [B, T-1], nan: none
            weights, mm = mismatch(old_logp, eng_logp, mask, config.tis_cap)  # TIS
            # ---- update ----------------------------------------------------------------------
            mb_metrics = []
            for _ in range(config.ppo_epochs):
                order = torch.randperm(len(episodes))
                for mb in order.tensor_split(config.minibatches):  # the same count on every rank
                    mb_metrics += update(
                        trained, opt, ids[mb], attn[mb], mask[mb], old_logp[mb],
                        adv[mb].to(device), ref_logp[mb] if ref_logp is not None else None,
                        config, eps_high, ent_coef, keep, beta, weights[mb] if use_tis else None,
                    )  # fmt: skip
            sched.step()  # warmup_steps counts training steps, whatever the minibatches
            if engine is not policy:  # the colocated engine samples the next step's episodes
                from pipeline.rollout.engines import push_weights

                push_weights(engine, model)
            dt = time.perf_counter() - t0
            # ---- metrics ---------------------------------------------------------------------
            stats, tokens = reduce_step(config, got, episodes, rewards, mb_metrics, mm, world)
            ent_coef, beta = band_adjust(config, stats["entropy"], ent_coef, beta)
            m = {
                "step": step + 1,
                **stats,
                "tis": use_tis,
                "eps_high": eps_high,
                "ent_coef": ent_coef,
                "beta": beta,
                "lr": sched.get_last_lr()[0],
                "step_time": dt,
                "tokens_per_s": tokens / dt,  # all ranks
                **live,  # adaptive difficulty: the live pyramid and entropy (all ranks)
            }
            if held_out and config.eval_every and (step + 1) % config.eval_every == 0 and rank == 0:
                m |= keep_best(
                    out / "checkpoint-best", model, tokenizer, held_out, config, step + 1
                )
            m |= judge_metrics(config, got.judge, judge is not None, width)
            m["warnings"] = warnings_for(m, history, tokenizer)
            history.append(m)
            log_step(out, m, writer, rank)  # the metrics are already reduced over the ranks
            if on_step:
                on_step(m)
            if checkpoint_due(step + 1, config, last_save, world):
                samplers = sampler_states(stream, world)  # every rank's, gathered on all
                if rank == 0:
                    save_train_state(latest, model, tokenizer, opt, sched, stream, step + 1,
                                     ent_coef, config, beta, samplers)  # fmt: skip
                last_save = time.monotonic()
    except BaseException:
        close_engine(engine)
        raise
    finally:
        if sandbox is not None:
            sandbox.close()
    try:
        samplers = sampler_states(stream, world)
        if rank == 0:
            save_train_state(latest, model, tokenizer, opt, sched, stream, reached, ent_coef,
                             config, beta, samplers)  # fmt: skip
            plot(out, CURVES)
        if world > 1:
            import gc

            import torch.distributed as dist

            # free DDP's reducer while its process group still lives: gloo's destructor can
            # wait forever on a peer that has already left
            del trained
            gc.collect()
            dist.barrier()
    finally:
        # a colocated vLLM engine is shut down now: left to the garbage collector, its shutdown
        # can run while the next engine of the process starts and tear down that one's groups.
        # After the last collective: vLLM's shutdown destroys its groups and the default group
        # of the process it shares with torchrun's ranks (the final barrier failed on every rank)
        close_engine(engine)
    if world > 1 and dist.is_initialized():
        dist.destroy_process_group()
    return history

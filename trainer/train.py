"""A compact GRPO-TCR trainer (cleanrl-style: one config, one loop, the loss inline in loss.py).

Each step: take ``prompts_per_step`` questions from the dataset's RL shards (a seeded,
resumable cursor), run ``group_size`` episodes each through the same agent loop as labelling
(with the policy being trained as the engine), score them (composable rewards), compute group
advantages, optionally drop zero-variance groups and refill (dynamic sampling), recompute
log pi_old with the current weights, then update on minibatches with the token-level,
clip-higher loss. Metrics go to ``metrics.jsonl`` (and TensorBoard when installed); checkpoints
hold model, optimizer, scheduler, RNG states and the data cursor, so a resumed run continues
exactly where it stopped.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from pipeline.evaluate.stage import episode_metrics
from pipeline.rollout.agent import AgentConfig, Episode, continue_from, run_episodes, run_started
from pipeline.rollout.engines import Sampling, TransformersEngine
from pipeline.rollout.engines import close as close_engine
from pipeline.sandbox import Sandbox
from pipeline.verify import Verdict, extract_answer
from trainer.adaptive import AdaptiveConfig, AdaptiveSampler, merge_stats
from trainer.checkpoint import (
    plot,
    rng_state,
    save_checkpoint,
    set_rng_state,
    start_run,
    tensorboard,
    truncate_metrics,
)
from trainer.loss import group_advantages, grpo_tcr_loss
from trainer.rewards import (
    format_reward,
    outcome,
    overlong,
    tool_bonus,
    tool_bonus_paper,
    with_judge,
)


@dataclass
class TrainConfig:
    model: str  # a local model folder
    out: str  # run folder: checkpoints, metrics.jsonl, plots
    dataset: str | None = None  # datasets/<name>/v<N> (its rl/ shards); or pass prompts directly
    steps: int = 100
    prompts_per_step: int = 8
    group_size: int = 8  # K samples per prompt
    lr: float = 1e-6
    warmup_steps: int = 0
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    eps_low: float = 0.20
    eps_high: float = 0.28
    # token: every policy token of the batch weighs the same (GRPO-TCR, DAPO) | sequence: each
    # response's mean token loss, averaged over responses (the original GRPO; bench/ablation.py)
    loss_agg: str = "token"
    eps_high_end: float | None = (
        None  # linear schedule of eps_high over training (e.g. 0.35 -> 0.25)
    )
    # named schedule: "paper" = max(0.35 - 0.15 * step / total, 0.25) (overrides the two above)
    eps_high_schedule: str | None = None
    dual_clip: float | None = None
    beta: float = 0.0  # KL to the initial policy (k3); no reference model is loaded at 0
    ent_coef: float = 0.0
    entropy_band: tuple[float, float] | None = None  # keep the entropy inside this band by...
    # ..."ent_coef": raising/lowering the entropy bonus (x1.5), or "beta": the paper's recipe,
    # beta x0.9 below the band and x1.1 above it (needs beta > 0)
    entropy_band_adjusts: str = "ent_coef"
    adv_std_unbiased: bool = True  # Bessel-corrected group std (TRL, verl)
    minibatches: int = 1  # optimizer steps per rollout batch
    grad_accum: int = 1  # micro-batches per optimizer step (token-level denominator spans them)
    max_tokens: int = 256  # per assistant turn
    # multi-turn tool use in the sandbox: the policy calls python, sees the result, answers
    agent: AgentConfig = field(default_factory=lambda: agent_config(None))
    l_max: int = 1024  # overlong shaping, over the policy's own tokens (tool output excluded)
    l_cache: int = 256
    use_overlong: bool = True
    use_tool_bonus: bool = False
    tool_bonus: str = "capped"  # capped: 0.1 per good call up to 0.2 | paper: 0.1 * min(calls, 5)
    use_format_reward: bool = False
    dynamic_sampling: bool = False
    dynamic_sampling_on: str = (
        "accuracy"  # accuracy: drop all-correct/all-wrong groups (DAPO) | reward
    )
    max_gen_batches: int = 3
    temperature: float = 1.0  # sampling temperature; log-probs are computed at the same one
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    logprob_chunk: int = 512  # positions per fp32 log-softmax chunk (never a whole [B, T, V])
    # truncated importance sampling between the rollout engine and the trainer: each policy
    # token's loss is weighted by min(pi_old / pi_sampler, tis_cap). auto: on with vLLM
    tis: str = "auto"  # auto | on | off
    tis_cap: float = 2.0
    seed: int = 0
    checkpoint_every: int = 0  # 0: only at the end
    # every this many steps, avg@eval_k on the held-out questions given to train(); the best
    # is kept as checkpoint-best (chosen by held-out accuracy, never by reward). 0: off
    eval_every: int = 0
    eval_k: int = 4
    # on function-calling questions (their own tools): format +1, arguments +1, result +2
    # instead of the outcome's +/-1
    function_call_reward: bool = True
    # auto: vllm where installed, else transformers (the trained model itself) | vllm | transformers
    rollout_backend: str = "auto"
    gradient_checkpointing: bool = False
    log_every: int = 1
    # autocast dtype of every forward (pi_old, pi_ref and the update alike, so the ratio is
    # exactly 1 on-policy): auto = bf16 on CUDA, none on CPU | bf16 | none
    autocast: str = "auto"
    vllm_gpu_memory: float = 0.5  # each rank's colocated vLLM engine: its share of its GPU
    # the reasoning reward model (pipeline/judge, docs/judge.md): a model folder or an
    # OpenAI-compatible URL. judge_weight = λ of Reagent-R (R = R_rule + λ·score); refine:
    # Reagent-U, each group pools K initial and K refined episodes (critique in their context)
    judge: str | None = None
    judge_weight: float = 0.0
    refine: bool = False
    judge_max_tokens: int = 256
    # adaptive difficulty (trainer/adaptive.py): each question's pass rate tracked over its last
    # adaptive_window groups; all-correct ones retire, all-wrong ones back off for
    # adaptive_backoff_steps (doubling); draws follow the dataset's pyramid. Off: the shuffled
    # epoch stream
    adaptive: bool = False
    adaptive_window: int = 2
    adaptive_backoff_steps: int = 2

    def __post_init__(self) -> None:
        """Every named option is checked here, so a typo fails before any model loads."""
        choices = {
            "rollout_backend": ROLLOUT_BACKENDS,
            "tis": ("auto", "on", "off"),
            "autocast": ("auto", "bf16", "none"),
            "dynamic_sampling_on": ("accuracy", "reward"),
            "entropy_band_adjusts": ("ent_coef", "beta"),
            "eps_high_schedule": (None, "paper"),
            "tool_bonus": ("capped", "paper"),
            "loss_agg": ("token", "sequence"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, not {getattr(self, name)!r}")
        if (self.judge_weight or self.refine) and not self.judge:
            raise ValueError("judge_weight and refine need a judge (a model folder or a URL)")


ROLLOUT_BACKENDS = ("auto", "vllm", "transformers")
TOOLS = ("python", "none")
RewardFn = Callable[[Episode, dict], float]
CURVES = ("reward_mean", "accuracy", "entropy", "clip_frac_high", "approx_kl", "response_len")


def policy_tokens(e: Episode) -> int:
    """Tokens the policy generated (tool results and template tokens excluded)."""
    return int(sum(e.mask))


def is_function_calling(q: dict) -> bool:
    return q.get("answer_type") == "function_calls" and bool(q.get("tools"))


def fc_reward(e: Episode, q: dict) -> float:
    """The function-calling reward (format +1, arguments +1, result +2) of an episode's calls."""
    from pipeline.evaluate.function_calls import decoded, question_reward

    output, parsed = decoded(e)
    return question_reward(q | {"dataset": (q.get("datasets") or ["simple"])[0]}, output, parsed)


def correct(e: Episode, q: dict) -> bool:
    if is_function_calling(q):
        return fc_reward(e, q) >= 4.0  # BFCL's verdict: only a right answer scores 4
    return outcome(e.final_text, q.get("ground_truth"), q.get("answer_type")) > 0


def episode_input(q: dict, i: int) -> tuple:
    """(id, question) for the agent loop; a function-calling question with its own tools."""
    qid = q.get("question_id", str(i))
    if is_function_calling(q):
        import orjson

        tools = q["tools"]
        return qid, q["question"], orjson.loads(tools) if isinstance(tools, str) else tools
    return qid, q["question"]


def autocast(config: TrainConfig, device_type: str):
    """One precision for pi_old, pi_ref and pi_theta."""
    on = config.autocast == "bf16" or (config.autocast == "auto" and device_type == "cuda")
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=on)


def flat_group(config: TrainConfig, rewards: torch.Tensor, acc: list[bool]) -> bool:
    """A group without signal. DAPO filters on accuracy: all right or all wrong teaches nothing
    about the answer, even when shaping terms (overlong, tool bonus) make the rewards differ."""
    if config.dynamic_sampling_on == "accuracy":
        return len(set(acc)) <= 1
    return bool(rewards.std(unbiased=False) == 0)


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


def default_reward(config: TrainConfig) -> RewardFn:
    def fn(e: Episode, q: dict) -> float:
        if is_function_calling(q) and config.function_call_reward:
            r = fc_reward(e, q)
        else:
            r = outcome(e.final_text, q.get("ground_truth"), q.get("answer_type"))
        if config.use_overlong:
            r += overlong(policy_tokens(e), config.l_max, config.l_cache)
        if config.use_tool_bonus:
            r += (
                tool_bonus_paper(e.tool_calls)
                if config.tool_bonus == "paper"
                else tool_bonus(e.tool_calls, e.tool_errors)
            )
        if config.use_format_reward:
            r += format_reward(e.final_text)
        return r

    return fn


def judged(judge, qs: list[dict], eps: list[Episode], k: int) -> list:
    """The judge's parsed verdict of each episode (``k`` per question, in order)."""
    from pipeline.judge.judge import Case

    cases = [
        Case(str(j), qs[j // k]["question"], qs[j // k].get("tools"), e.messages)
        for j, e in enumerate(eps)
    ]
    return [v.parsed for v in judge.judge(cases)]


def refine_episodes(
    engine, tokenizer, qs: list[dict], eps: list[Episode], verdicts: list, k: int,
    config: TrainConfig, step: int, sandbox,
) -> list[Episode]:  # fmt: skip
    """Reagent-U's second attempts: each episode's whole conversation, then the judge's critique
    as a user turn, then the policy again. The refined episode's prompt is that context, so its
    log-probs (sampling and update alike) are taken against it, as the paper defines."""
    from pipeline.judge.prompt import refine_message

    items = []
    for j, (e, v) in enumerate(zip(eps, verdicts, strict=True)):
        msgs = [*e.messages, refine_message((v.critique if v is not None else None) or "")]
        item = episode_input(qs[j // k], j // k)
        items.append((e.question_id, msgs, *item[2:]))
    started = continue_from(tokenizer, items, config.agent, index_offset=1_000_000)
    sampling = Sampling(
        config.temperature, config.top_p, config.max_tokens, config.seed + step + 7919, config.top_k
    )
    return run_started(engine, tokenizer, started, config.agent, sampling, sandbox)


def token_logprobs(
    model,
    ids: torch.Tensor,
    attn: torch.Tensor,
    with_entropy: bool = False,
    keep: int | None = None,
    temperature: float = 1.0,
    chunk: int = 512,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(token_t | tokens_<t) for t >= 1 under the sampling distribution (logits divided
    by the sampling temperature, as verl does), and the entropy of each next-token distribution.
    ids, attn: [B, T] -> [B, T-1]. With ``keep``, logits are computed for the last ``keep``
    positions only (the responses; prompt positions get 0). The fp32 log-softmax runs over
    ``chunk`` positions at a time, so no [B, T, V] fp32 tensor is ever whole; the entropy stays
    out of the autograd graph unless ``entropy_grad`` (its coefficient is not 0)."""
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
        logp_all = torch.log_softmax(z, dim=-1)  # [B, c, V]
        logps.append(logp_all.gather(-1, targets[:, s : s + chunk, None]).squeeze(-1))  # [B, c]
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                ents.append(-(logp_all.exp() * logp_all).sum(-1))  # [B, c]
    logp = torch.cat(logps, dim=1)  # [B, K]
    ent = torch.cat(ents, dim=1) if with_entropy else None  # [B, K]
    if logp.shape[1] < T - 1:  # left-pad the prompt positions back to [B, T-1]
        pad = T - 1 - logp.shape[1]
        logp = torch.nn.functional.pad(logp, (pad, 0))
        ent = torch.nn.functional.pad(ent, (pad, 0)) if ent is not None else None
    return logp, ent


def _engine_logprobs(episodes: list[Episode], width: int) -> torch.Tensor:
    """The sampler's log-probs aligned with ``_batch``'s loss mask: [B, width-1]; nan where the
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


def _batch(episodes: list[Episode], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


class Prompts:
    """A seeded, epoch-shuffled stream of questions with a resumable cursor."""

    def __init__(self, rows: list[dict], seed: int):
        self.rows, self.seed, self.cursor = rows, seed, 0

    def take(self, n: int) -> list[dict]:
        out = []
        for _ in range(n):
            epoch, pos = divmod(self.cursor, len(self.rows))
            order = list(range(len(self.rows)))
            random.Random(self.seed + epoch).shuffle(order)
            out.append(self.rows[order[pos]])
            self.cursor += 1
        return out


def agent_config(dataset: str | None, max_turns: int = 4, tools: str = "python") -> AgentConfig:
    """The agent a run trains: ``max_turns`` turns with the sandboxed python tool (``tools=
    "none"``: one turn, no tool declared), prompted with the dataset's own system prompt (its
    manifest's ``config.system_prompt``), so the policy is trained on the prompt its data has."""
    if tools not in TOOLS:
        raise ValueError(f"tools must be one of {TOOLS}, not {tools!r}")
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    kw: dict = {}
    manifest = Path(dataset) / "manifest.json" if dataset else None
    if manifest is not None and manifest.exists():
        cfg = json.loads(manifest.read_text()).get("config", {})
        if "system_prompt" in cfg:
            kw["system_prompt"] = cfg["system_prompt"]
    if tools == "none":
        return AgentConfig(max_turns=1, declare_tools=False, sandbox_workers=0, **kw)
    return AgentConfig(max_turns=max_turns, max_response_tokens=1024, **kw)


def load_prompts(dataset: str) -> list[dict]:
    import pyarrow.dataset as pads

    return pads.dataset(str(Path(dataset) / "rl"), format="parquet").to_table().to_pylist()


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
                temperature=config.temperature,
                chunk=config.logprob_chunk,
                entropy_grad=ent_coef != 0,
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
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
    opt.step()
    return metrics


def _lr_lambda(warmup: int):
    return lambda step: min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0


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
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, latest, resume = start_run(config.out, config.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    world, rank = _init_distributed(device)
    if device == "cuda":  # one GPU per rank (torchrun's LOCAL_RANK)
        import os

        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    src = str(latest) if resume else config.model
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
        ref = (
            AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32)
            .to(device)
            .eval()
        )
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
        state = torch.load(latest / "trainer_state.pt", weights_only=True)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        start, ent_coef = state["step"], state["ent_coef"]
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
        beta = state.get("beta", beta)
        if rank == 0:
            truncate_metrics(out / "metrics.jsonl", start)
    reward_fn = reward_fn or default_reward(config)
    policy = TransformersEngine.from_model(model, tokenizer)  # samples the policy being trained
    pad = policy.pad_id
    engine = policy
    backend = config.rollout_backend
    if backend == "auto":
        from pipeline.rollout.engines import vllm_available

        backend = "vllm" if vllm_available() else "transformers"
    if backend == "vllm" and start < config.steps:  # a finished run resumed starts no engine
        from pipeline.rollout.engines import VLLMEngine, push_weights

        engine = VLLMEngine(src, gpu_memory_utilization=config.vllm_gpu_memory, max_model_len=2048)
        push_weights(engine, model)
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
    reached = start
    try:
        for step in range(start, config.steps):
            t0 = time.perf_counter()
            eps_high = eps_high_at(config, step)
            if isinstance(stream, AdaptiveSampler):
                stream.begin(step)
                if _global_sum(0 if stream.exhausted() else 1, world) == 0:
                    stop = {"step": step + 1, "stopped": "adaptive: every question has retired "
                            "(all-correct over its tracked groups); nothing is left to learn from"}  # fmt: skip
                    history.append(stop)
                    if rank == 0:
                        with open(out / "metrics.jsonl", "a") as f:
                            f.write(json.dumps(stop) + "\n")
                    break
            reached = step + 1  # the steps this run has gone through (for the checkpoint)
            # ---- rollouts (with dynamic sampling) ----------------------------------------------
            groups: list[tuple[dict, list[Episode], torch.Tensor, list[bool]]] = []
            zero_var = gen_batches = 0
            js = dict.fromkeys(
                ("scored", "failed", "score_sum", "term_sum", "n", "initial_correct")
                + ("refined_correct", "pairs"),
                0,
            )
            while len(groups) < config.prompts_per_step and gen_batches < (
                config.max_gen_batches if config.dynamic_sampling else 1
            ):
                qs = stream.take(config.prompts_per_step - len(groups))
                if not qs:  # the adaptive sampler has nothing more in play this step
                    break
                eps = run_episodes(
                    engine,
                    tokenizer,
                    [episode_input(q, i) for i, q in enumerate(qs)],
                    config.group_size,
                    config.agent,
                    Sampling(
                        config.temperature,
                        config.top_p,
                        config.max_tokens,
                        config.seed + step,
                        config.top_k,
                    ),
                    sandbox=sandbox,
                )
                gen_batches += 1
                K = config.group_size
                verdicts = judged(judge, qs, eps, K) if judge is not None else [None] * len(eps)
                if config.refine:  # Reagent-U: each initial episode again, its critique in context
                    refined = refine_episodes(
                        engine, tokenizer, qs, eps, verdicts, K, config, step, sandbox
                    )
                    r_verdicts = (
                        judged(judge, qs, refined, K)
                        if config.judge_weight
                        else [None] * len(refined)
                    )
                for i, q in enumerate(qs):
                    ge, gv = eps[i * K : (i + 1) * K], verdicts[i * K : (i + 1) * K]
                    if config.refine:  # one pool of 2K: initial, then refined
                        ge = ge + refined[i * K : (i + 1) * K]
                        gv = gv + r_verdicts[i * K : (i + 1) * K]
                    rule = [reward_fn(e, q) for e in ge]
                    scores = [v.score if v is not None else None for v in gv]
                    r = torch.tensor(
                        with_judge(rule, scores, config.judge_weight), dtype=torch.float32
                    )
                    acc = [correct(e, q) for e in ge]
                    if isinstance(stream, AdaptiveSampler):  # the initial K: the policy's own
                        stream.observe(q, sum(acc[:K]), K)
                    if judge is not None:
                        js["scored"] += sum(x is not None for x in scores)
                        js["failed"] += sum(v is not None and v.score is None for v in gv)
                        js["score_sum"] += sum(x for x in scores if x is not None)
                        js["term_sum"] += sum(x - y for x, y in zip(r.tolist(), rule, strict=True))
                        js["n"] += len(ge)
                    if config.refine:
                        js["initial_correct"] += sum(acc[:K])
                        js["refined_correct"] += sum(acc[K:])
                        js["pairs"] += K
                    if flat_group(config, r, acc):
                        zero_var += 1
                        if config.dynamic_sampling:
                            continue
                    groups.append((q, ge, r, acc))
            # every rank takes the same decision: skip only when no rank has a group
            live = (
                merge_stats(_gather(stream.stats(), world))
                if isinstance(stream, AdaptiveSampler)
                else {}
            )
            if _global_sum(len(groups), world) == 0:
                history.append(
                    m := {"step": step + 1, "skipped": "all groups had zero reward variance"} | live
                )
                if rank == 0:  # the log says why the step did not update
                    with open(out / "metrics.jsonl", "a") as f:
                        f.write(json.dumps(m) + "\n")
                continue
            width = config.group_size * (2 if config.refine else 1)
            rewards = (
                torch.stack([g[2] for g in groups]) if groups else torch.zeros(0, width)
            )  # [G, K] (Reagent-U: [G, 2K], advantages normalised over the whole pool)
            adv = group_advantages(rewards, unbiased=config.adv_std_unbiased).flatten()  # [G*K]
            episodes = [e for g in groups for e in g[1]]
            # a rank whose groups were all dropped still runs the update (its minibatches are
            # empty, so it joins every collective with a loss that weighs 0)
            ids, attn, mask = _batch(episodes, pad) if episodes else _no_rows()
            ids, attn, mask = ids.to(device), attn.to(device), mask.to(device)
            with torch.no_grad():
                keep = (
                    ids.shape[1] - min(len(e.prompt_ids) for e in episodes) if episodes else None
                )  # response positions only
                lp = dict(keep=keep, temperature=config.temperature, chunk=config.logprob_chunk)
                if episodes:
                    with autocast(config, ids.device.type):  # the update's precision
                        old_logp, _ = token_logprobs(model, ids, attn, **lp)  # pi_old (trainer)
                        ref_logp = (
                            token_logprobs(ref, ids, attn, **lp)[0] if ref is not None else None
                        )
                else:
                    old_logp = torch.zeros(0, 1, device=device)
                    ref_logp = torch.zeros(0, 1, device=device) if ref is not None else None
            # sampler vs trainer: the engine's own log-probs of what it sampled against pi_old
            weights, mm = mismatch(
                old_logp, _engine_logprobs(episodes, ids.shape[1]).to(device), mask, config.tis_cap
            )
            use_tis = config.tis == "on" or (config.tis == "auto" and backend == "vllm")
            # ---- update ----------------------------------------------------------------------
            order = torch.randperm(len(episodes))
            mb_metrics = []
            for mb in order.tensor_split(config.minibatches):  # the same count on every rank
                mb_metrics += update(
                    trained,
                    opt,
                    ids[mb],
                    attn[mb],
                    mask[mb],
                    old_logp[mb],
                    adv[mb].to(device),
                    ref_logp[mb] if ref_logp is not None else None,
                    config,
                    eps_high,
                    ent_coef,
                    keep,
                    beta,
                    weights[mb] if use_tis else None,
                )
                sched.step()
            if (
                engine is not policy
            ):  # the colocated engine samples the next step from the new weights
                push_weights(engine, model)
            dt = time.perf_counter() - t0
            n_tok = sum(len(e.response_ids) for e in episodes)
            # correctness as the step already judged it (``correct``, BFCL's rules included)
            agent_m = [
                episode_metrics(e, Verdict(ok, extract_answer(e.final_text), "train"))
                for _, ge, _, acc in groups
                for e, ok in zip(ge, acc, strict=True)
            ]
            r = rewards.flatten()
            n_mb = len(mb_metrics)
            # (sum, count) on this rank -> means over all ranks: every rank logs and decides
            # (the entropy band) on the same global numbers
            g = _global_means(
                {
                    "reward_mean": (r.sum().item(), r.numel()),
                    "_reward_sq": ((r**2).sum().item(), r.numel()),
                    "accuracy": (sum(a for g_ in groups for a in g_[3]), r.numel()),
                    "entropy": (sum(x["entropy"] for x in mb_metrics), n_mb),
                    "clip_frac_low": (sum(x["clip_frac_low"] for x in mb_metrics), n_mb),
                    "clip_frac_high": (sum(x["clip_frac_high"] for x in mb_metrics), n_mb),
                    "approx_kl": (sum(x["approx_kl"] for x in mb_metrics), n_mb),
                    "ratio_first": (mb_metrics[0]["ratio_mean"], 1) if mb_metrics else (0.0, 0),
                    "response_len": (n_tok, len(episodes)),
                    "tool_calls": (sum(e.tool_calls for e in episodes), len(episodes)),
                    "tool_errors": (sum(e.tool_errors for e in episodes), len(episodes)),
                    # the agent metrics evaluation reports (pipeline.evaluate), per step
                    "turns": (sum(e.turns for e in episodes), len(episodes)),
                    "format_rate": (sum(a["formatted"] for a in agent_m), len(agent_m)),
                    "verified_by_tool": (sum(a["verified"] for a in agent_m), len(agent_m)),
                    "recovery_rate": (
                        sum(a["correct"] for a in agent_m if a["tool_errors"]),
                        sum(1 for a in agent_m if a["tool_errors"]),
                    ),
                    "overlong_frac": (
                        sum(policy_tokens(e) > config.l_max - config.l_cache for e in episodes),
                        len(episodes),
                    ),
                    "zero_var_frac": (zero_var, zero_var + len(groups)),
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
            g["logp_mismatch_max"] = _global_max(mm["logp_mismatch_max"], world)
            mean_r, mean_r2 = g.pop("reward_mean"), g.pop("_reward_sq")
            tokens = g.pop("_tokens") * world
            entropy = g["entropy"]
            ent_coef, beta = band_adjust(config, entropy, ent_coef, beta)
            m = {
                "step": step + 1,
                "reward_mean": mean_r,
                "reward_std": math.sqrt(max(0.0, mean_r2 - mean_r**2)),
                **g,
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
            if judge is not None:  # the judge's terms, beside the rule reward (this rank)
                m["judge_score_mean"] = js["score_sum"] / js["scored"] if js["scored"] else None
                m["judge_term_mean"] = js["term_sum"] / js["n"] if js["n"] else 0.0
                m["judge_failed_frac"] = js["failed"] / js["n"] if js["n"] else 0.0
            if config.refine:
                m["pool_size"] = width
                m["initial_accuracy"] = js["initial_correct"] / max(1, js["pairs"])
                m["refined_accuracy"] = js["refined_correct"] / max(1, js["pairs"])
            m["warnings"] = _warnings(m, history, tokenizer)
            history.append(m)
            if rank == 0:  # one logger; the metrics are already reduced over the ranks
                with open(out / "metrics.jsonl", "a") as f:
                    f.write(json.dumps(m) + "\n")
            if writer is not None and rank == 0:
                for k, v in m.items():
                    if isinstance(v, float):
                        writer.add_scalar(k, v, step + 1)
                    elif isinstance(v, dict):  # e.g. the live pyramid: one curve per bin
                        for kk, vv in v.items():
                            if isinstance(vv, int | float) and not isinstance(vv, bool):
                                writer.add_scalar(f"{k}/{kk}", vv, step + 1)
            if on_step:
                on_step(m)
            if config.checkpoint_every and (step + 1) % config.checkpoint_every == 0:
                samplers = _sampler_states(stream, world)  # every rank's, gathered on all
                if rank == 0:
                    _checkpoint(
                        latest, model, tokenizer, opt, sched, stream, step + 1, ent_coef, config,
                        beta, samplers,
                    )  # fmt: skip
    finally:
        if sandbox is not None:
            sandbox.close()
        # a colocated vLLM engine is shut down now: left to the garbage collector, its shutdown
        # can run while the next engine of the process starts and tear down that one's groups
        close_engine(engine)
    samplers = _sampler_states(stream, world)
    if rank == 0:
        _checkpoint(
            latest,
            model,
            tokenizer,
            opt,
            sched,
            stream,
            reached,
            ent_coef,
            config,
            beta,
            samplers,
        )
        plot(out, CURVES)
    if world > 1:
        import gc

        import torch.distributed as dist

        # free DDP's reducer while its process group still lives: gloo's destructor can wait
        # forever on a peer that has already left
        del trained
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
    return history


def make_stream(rows: list[dict], config: TrainConfig, rank: int, world: int):
    """The prompt stream: the seeded epoch shuffle, or with ``config.adaptive`` the adaptive
    sampler over this rank's share of the questions (the same seed on every rank)."""
    if not config.adaptive:
        return Prompts(rows, config.seed + 1_000_003 * rank)
    mine = rows[rank::world]
    if not mine:
        raise ValueError(f"{len(rows)} RL prompts cannot give each of {world} ranks one")
    adaptive = AdaptiveConfig.for_dataset(
        config.dataset, window=config.adaptive_window, backoff_steps=config.adaptive_backoff_steps
    )
    return AdaptiveSampler(mine, adaptive, config.seed)


def _gather(obj, world: int) -> list:
    """``obj`` from every rank, in rank order ([obj] in one process)."""
    if world == 1:
        return [obj]
    import torch.distributed as dist

    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def _sampler_states(stream, world: int) -> list[str] | None:
    """Every rank's adaptive sampler state (a collective: all ranks call it), or None."""
    return _gather(stream.state(), world) if isinstance(stream, AdaptiveSampler) else None


def _no_rows() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An empty batch (ids [0, 2]): ``update`` turns each of its micro-batches into a 0 loss."""
    return (
        torch.zeros(0, 2, dtype=torch.long),
        torch.zeros(0, 2, dtype=torch.long),
        torch.zeros(0, 1),
    )


def _global_sum(x: float, world: int) -> float:
    if world == 1:
        return x
    import torch.distributed as dist

    t = torch.tensor([float(x)], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item()


def _global_max(x: float | None, world: int) -> float | None:
    if world > 1:
        import torch.distributed as dist

        t = torch.tensor([-1.0 if x is None else float(x)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        x = None if t.item() < 0 else t.item()
    return x


def _global_means(pairs: dict[str, tuple[float, float]], world: int) -> dict[str, float | None]:
    """{key: sum over ranks of the sums / sum over ranks of the counts}, one all-reduce for
    all keys (the same keys on every rank); None where no rank counted anything."""
    keys = sorted(pairs)
    t = torch.tensor([[float(pairs[k][0]), float(pairs[k][1])] for k in keys], dtype=torch.float64)
    if world > 1:
        import torch.distributed as dist

        dist.all_reduce(t)
    return {k: (s / n if n else None) for k, (s, n) in zip(keys, t.tolist(), strict=True)}


def _init_distributed(device: str) -> tuple[int, int]:
    """(world size, rank); initializes the process group when launched by torchrun."""
    import os

    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo")
    return world, (dist.get_rank() if world > 1 else 0)


def _warnings(m: dict, history: list[dict], tokenizer) -> list[str]:
    w = []
    if m["entropy"] < 0.05:
        w.append("entropy collapsed (< 0.05)")
    if m["entropy"] > 0.9 * math.log(len(tokenizer)):
        w.append("entropy near uniform: exploding")
    prev = [h.get("tool_calls", 0) for h in history[-5:]]
    if prev and max(prev) > 0.2 and m["tool_calls"] == 0:
        w.append("tool calls vanished")
    return w


def keep_best(
    best: Path, model, tokenizer, held_out: list[dict], config: TrainConfig, step: int
) -> dict:
    """avg@k of the model being trained on the held-out questions; saved as ``best`` (with
    ``held_out.json``) when it beats the best so far, which survives a resume."""
    from pipeline.evaluate import evaluate

    sampling = Sampling(
        config.temperature, config.top_p, config.max_tokens, config.seed, config.top_k
    )
    r = evaluate(
        TransformersEngine.from_model(model, tokenizer),
        held_out,
        k=config.eval_k,
        config=config.agent,
        sampling=sampling,
    )
    acc = r[f"average@{config.eval_k}"]
    record = best / "held_out.json"
    so_far = json.loads(record.read_text())["accuracy"] if record.exists() else -1.0
    if acc <= so_far:
        return {"held_out_accuracy": acc, "best_step": json.loads(record.read_text())["step"]}
    tmp = best.with_name(".checkpoint-best.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "held_out.json").write_text(
        json.dumps({"step": step, "accuracy": acc, "k": config.eval_k})
    )
    if best.exists():
        shutil.rmtree(best)
    tmp.rename(best)
    return {"held_out_accuracy": acc, "best_step": step}


def _checkpoint(
    latest: Path,
    model,
    tokenizer,
    opt,
    sched,
    stream: Prompts | AdaptiveSampler,
    step: int,
    ent_coef: float,
    config: TrainConfig,
    beta: float = 0.0,
    samplers: list[str] | None = None,
) -> None:
    state = {
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "rng": rng_state(),
        "cursor": getattr(stream, "cursor", 0),
        "adaptive": samplers,
        "step": step,
        "ent_coef": ent_coef,
        "beta": beta,
        "config": asdict(config),
    }
    save_checkpoint(latest, model, tokenizer, state, step)

"""The trainer's configuration: one dataclass with every option (its default and why), the
rollout backends and tool modes, and the agent a run trains."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.rollout.agent import AgentConfig
from pipeline.rollout.policy_loop import read_loop, turn_tokens  # noqa: F401 (re-exported)

ROLLOUT_BACKENDS = ("auto", "vllm", "transformers")
TOOLS = ("python", "none")


@dataclass
class TrainConfig:
    """Every option of a GRPO-TCR run, with its default and why; checked when constructed, so
    a typo fails before a model loads. The defaults are the paper's (token-level loss,
    ε_low 0.2 / ε_high 0.28, overlong shaping, β 0); ``flow train`` and ``python -m trainer``
    pass what the user set."""

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
    # optimizer steps per rollout batch (verl's train_batch / ppo_mini_batch_size): the first
    # minibatch updates at ratio 1, the later ones off-policy, where the clip acts
    minibatches: int = 4
    ppo_epochs: int = 1  # passes over the rollout batch (each in ``minibatches`` shuffled parts)
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
        if self.group_size < 2:
            raise ValueError(
                f"group_size must be at least 2, not {self.group_size}: GRPO's advantage is a "
                "reward against the mean of its group, and a group of one has no baseline"
            )
        for name in ("steps", "prompts_per_step", "minibatches", "ppo_epochs", "grad_accum"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.entropy_band is not None:
            lo, hi = self.entropy_band
            if not 0 <= lo < hi:
                raise ValueError(
                    f"entropy_band must be (low, high) with 0 <= low < high, not {self.entropy_band}"
                )
        if self.entropy_band_adjusts == "beta" and (self.entropy_band is None or self.beta <= 0):
            raise ValueError(
                "entropy_band_adjusts='beta' scales beta (x0.9 / x1.1): it needs an entropy_band "
                f"and beta > 0 (beta is {self.beta}; 0 stays 0 whatever the band says)"
            )
        if not 0 < self.top_p <= 1 or self.top_k == 0 or self.top_k < -1:
            raise ValueError(
                f"top_p must be in (0, 1] and top_k -1 (off) or >= 1, not {self.top_p}, {self.top_k}"
            )
        if (self.judge_weight or self.refine) and not self.judge:
            raise ValueError("judge_weight and refine need a judge (a model folder or a URL)")


def agent_config(
    dataset: str | None,
    max_turns: int | None = None,
    tools: str | None = None,
    model: str | None = None,
) -> AgentConfig:
    """The agent a run trains. With neither ``max_turns`` nor ``tools`` given and a policy that
    records its loop (``model``'s agent_loop.json, written by SFT and GRPO): that loop, the one
    the policy learnt. Otherwise ``max_turns`` turns (default 4) with the sandboxed python tool
    (``tools="none"``: one turn, no tool declared), prompted with the dataset's own system prompt
    (its manifest's ``config.system_prompt``), so the policy is trained on the prompt its data
    has."""
    if max_turns is None and tools is None and (loop := read_loop(model)) is not None:
        return loop.agent
    max_turns = 4 if max_turns is None else max_turns
    tools = "python" if tools is None else tools
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

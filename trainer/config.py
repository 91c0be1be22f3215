"""The trainer's configuration: one dataclass with every option (its default and why), the
rollout backends and tool modes, and the agent a run trains."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.rollout.agent import AgentConfig
from pipeline.rollout.policy_loop import read_loop, turn_tokens
from pipeline.terminal import plain

ROLLOUT_BACKENDS = ("auto", "vllm", "transformers")
TOOLS = ("python", "none")
COMMAND_LINE = (
    "dataset",
    "model",
    "out",
    "steps",
    "prompts_per_step",
    "group_size",
    "lr",
    "max_tokens",
    "max_turns",
    "tools",
    "minibatches",
    "ppo_epochs",
    "seed",
    "rollout_backend",
    "eval_every",
    "checkpoint_every",
    "checkpoint_minutes",
    "judge",
    "judge_weight",
    "refine",
    "adaptive",
)
"""The fields ``flow train`` and ``python -m trainer`` take as options (the rest: library)."""


@dataclass
class TrainConfig:
    """Every option of a GRPO-TCR run, with its default and why; checked when constructed, so
    a typo fails before a model loads. The defaults are the paper's (token-level loss,
    ε_low 0.2 / ε_high 0.28, overlong shaping, β 0); ``flow train`` and ``python -m trainer``
    pass what the user set."""

    model: str
    """The policy to train: a local model folder (the SFT policy)."""
    out: str = "runs/grpo-tcr"
    """Run folder: checkpoints, metrics.jsonl, curves.png; a rerun resumes from its
    checkpoint-latest."""
    dataset: str | None = None
    """A published dataset folder, <lake>/datasets/<name>/v<N> (its rl/ shards; on the command
    line its name, the newest version, or NAME/vN, also does); or pass prompts to train()
    directly."""
    steps: int = 100
    """Training steps: each samples prompts_per_step x group_size episodes and updates on them."""
    prompts_per_step: int = 8
    """Questions per step."""
    group_size: int = 8
    """Samples per question (K): the group the advantage is taken against."""
    lr: float = 1e-6
    """AdamW learning rate."""
    warmup_steps: int = 0
    """Linear learning-rate warmup steps."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Global gradient-norm clip."""
    eps_low: float = 0.20
    """Clip-higher's lower bound: the ratio is clipped at 1 - eps_low."""
    eps_high: float = 0.28
    """Clip-higher's upper bound: the ratio is clipped at 1 + eps_high (decoupled from eps_low, so
    rare tokens can grow).
    """
    loss_agg: str = "token"
    """Token: every policy token of the batch weighs the same (GRPO-TCR, DAPO) | sequence: each
    response's mean token loss, averaged over responses (the original GRPO; bench/ablation.py).
    """
    eps_high_end: float | None = None
    """Linear schedule of eps_high over training (e.g. 0.35 -> 0.25)."""
    eps_high_schedule: str | None = None
    """Named schedule: "paper" = max(0.35 - 0.15 * step / total, 0.25) (overrides the two above)."""
    dual_clip: float | None = None
    """Dual-clip c for negative advantages: the loss is bounded by c x |A| (None: off)."""
    beta: float = 0.0
    """KL to the initial policy (k3); no reference model is loaded at 0."""
    ent_coef: float = 0.0
    """Entropy bonus weight (0: off)."""
    entropy_band: tuple[float, float] | None = None
    """Keep the policy's entropy inside this (low, high) band by adjusting what
    entropy_band_adjusts names (None: off).
    """
    entropy_band_adjusts: str = "ent_coef"
    """What the entropy band moves: ent_coef (the entropy bonus, x1.5 / ÷1.5) | beta (the paper's
    recipe: beta x0.9 below the band and x1.1 above it; needs beta > 0).
    """
    adv_std_unbiased: bool = True
    """Bessel-corrected group std (TRL, verl)."""
    minibatches: int = 4
    """Optimizer steps per rollout batch (verl's train_batch / ppo_mini_batch_size): the first
    minibatch updates at ratio 1, the later ones off-policy, where the clip acts.
    """
    ppo_epochs: int = 1
    """Passes over the rollout batch (each in ``minibatches`` shuffled parts)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step (token-level denominator spans them)."""
    max_tokens: int | None = None
    """Tokens per assistant turn; None: what the policy was sampled with (its agent_loop.json),
    else 256."""
    max_turns: int | None = None
    """Agent turns per episode (tool call, result, ..., answer); None: the loop the policy was
    trained with (its agent_loop.json), else 4. Read when ``agent`` is not given."""
    tools: str | None = None
    """python (the sandboxed interpreter) | none (one turn, no tool); None: the policy's own
    loop, else python. Read when ``agent`` is not given."""
    agent: AgentConfig | None = None
    """The agent loop, whole; None: built from max_turns and tools with the dataset's system
    prompt, or (neither given) the loop the policy was trained with."""
    l_max: int = 1024
    """Overlong shaping, over the policy's own tokens (tool output excluded)."""
    l_cache: int = 256
    """Overlong shaping's soft zone: past l_max - l_cache policy tokens the reward falls linearly
    to -1 at l_max.
    """
    use_overlong: bool = True
    """Overlong reward shaping on the policy's own tokens."""
    use_tool_bonus: bool = False
    """Add the tool-call bonus to the reward (off: the outcome alone)."""
    tool_bonus: str = "capped"
    """Capped: 0.1 per good call up to 0.2 | paper: 0.1 * min(calls, 5)."""
    use_format_reward: bool = False
    """Add +0.1 when the final answer is in \\boxed{} (the format the verifier reads best)."""
    dynamic_sampling: bool = False
    """Drop groups with no reward variance and sample more (DAPO's dynamic sampling)."""
    dynamic_sampling_on: str = "accuracy"
    """Accuracy: drop all-correct/all-wrong groups (DAPO) | reward."""
    max_gen_batches: int = 3
    """Dynamic sampling: at most this many generation batches per step."""
    temperature: float = 1.0
    """Sampling temperature; log-probs are computed at the same one."""
    top_p: float = 1.0
    """Nucleus sampling (1: off); the trainer scores the same truncated distribution."""
    top_k: int = -1
    """Top-k sampling (-1: off); the trainer scores the same truncated distribution."""
    logprob_chunk: int = 512
    """Positions per fp32 log-softmax chunk (never a whole [B, T, V])."""
    tis: str = "auto"
    """Truncated importance sampling between the rollout engine and the trainer: each policy
    token's loss is weighted by min(pi_old / pi_sampler, tis_cap); auto (on with vLLM) | on |
    off.
    """
    tis_cap: float = 2.0
    """The cap C of truncated importance sampling."""
    seed: int = 0
    """Seed of the prompt order, the sampling and the initial RNG states."""
    checkpoint_every: int = 0
    """Save a checkpoint every this many steps (0: by time only, checkpoint_minutes)."""
    checkpoint_minutes: float = 10.0
    """Also save once this many minutes have passed since the last save (0: off): a killed or
    interrupted run resumes losing at most that much."""
    eval_every: int = 0
    """Every this many steps, avg@eval_k on the held-out questions given to train(); the best is
    kept as checkpoint-best, chosen by held-out accuracy, never by reward (0: off).
    """
    eval_k: int = 4
    """Samples per held-out question when evaluating."""
    function_call_reward: bool = True
    """On function-calling questions (their own tools): format +1, arguments +1, result +2 instead
    of the outcome's +/-1.
    """
    rollout_backend: str = "auto"
    """Auto: vllm where installed, else transformers (the trained model itself) | vllm |
    transformers.
    """
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, more time)."""
    log_every: int = 1
    """Log metrics every this many steps."""
    autocast: str = "auto"
    """Autocast dtype of every forward (pi_old, pi_ref and the update alike, so the ratio is
    exactly 1 on-policy): auto = bf16 on CUDA, none on CPU | bf16 | none.
    """
    vllm_gpu_memory: float = 0.5
    """Each rank's colocated vLLM engine: its share of its GPU."""
    judge: str | None = None
    """A reasoning reward model (pipeline/judge, docs/judge.md) for judge_weight and refine: a
    model folder or an OpenAI-compatible URL.
    """
    judge_weight: float = 0.0
    """Reagent-R: R = R_rule + λ·judge score, λ this weight (0: off)."""
    refine: bool = False
    """Reagent-U: each group pools K initial and K critique-refined episodes."""
    judge_max_tokens: int = 256
    """Tokens the judge may write per judgement."""
    adaptive: bool = False
    """Adaptive difficulty (trainer/adaptive.py): each question's pass rate is tracked; all-correct
    ones retire, all-wrong ones back off, draws follow the dataset's pyramid (off: the shuffled
    epoch stream).
    """
    adaptive_window: int = 2
    """Adaptive difficulty: groups a question's tracked pass rate averages over."""
    adaptive_backoff_steps: int = 2
    """Adaptive difficulty: steps an all-wrong question first sits out (doubling)."""

    def __post_init__(self) -> None:
        """Every named option is checked here, so a typo fails before any model loads; the
        loop and tokens per turn left to the policy are read from it here, once."""
        if self.tools not in (None, *TOOLS):
            raise ValueError(f"tools must be one of {TOOLS}, not {self.tools!r}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, not {self.max_turns}")
        if self.agent is None:
            self.agent = agent_config(self.dataset, self.max_turns, self.tools, self.model)
        if self.max_tokens is None:
            self.max_tokens = turn_tokens(self.model, None, 256)
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
        if self.eval_every < 0 or self.checkpoint_every < 0 or self.checkpoint_minutes < 0:
            raise ValueError(
                "eval_every and checkpoint_every count steps, checkpoint_minutes minutes (0: off)"
            )
        if (self.judge_weight or self.refine) and not self.judge:
            raise ValueError("judge_weight and refine need a judge (a model folder or a URL)")

    def check_inputs(self, judge_loaded: bool = False) -> None:
        """The files the run reads exist: the policy's folder, the dataset's rl/ split and the
        judge (unless the caller loaded one). Checked before any model loads (by ``train`` and
        by the command line)."""
        check_model_folder(self.model)
        if self.dataset is not None:
            check_dataset_split(self.dataset, "rl")
        if self.judge and not judge_loaded:
            from pipeline.judge.config import check_judge

            check_judge(self.judge)


NANO_SFT_LR = 1e-3
"""SFT learning rate of the nano policy from scratch: held-out avg@8 0.910 / 0.912 / 0.863 on
seeds 0-2 of the main job (copy jumps at steps 735 / 648 / 869), where 3e-3 gave 0.832 / 0.711 /
0.830 (jumps at 1,291-1,610; bench/nano_seeds.py, docs/training.md)."""


@dataclass
class SFTTrainConfig:
    out: str = "runs/sft"
    """Run folder: checkpoints, metrics.jsonl, sft_curves.png."""
    model: str | None = None
    """A local model folder; None: the nano policy, built from scratch."""
    dataset: str | None = None
    """A published dataset folder, <lake>/datasets/<name>/v<N> (its sft/ shards; on the command
    line its name, the newest version, or NAME/vN, also does); or pass rows directly."""
    steps: int = 300
    """Optimizer steps."""
    batch_size: int = 32
    """Trajectories per step."""
    micro_batch_size: int = 0
    """Trajectories per forward/backward pass (the gradient of the whole batch, accumulated;
    activations' memory grows with this); 0: the whole batch at once."""
    lr: float | None = None
    """Default (``learning_rate()``): ``NANO_SFT_LR`` for the nano policy, 1e-5 for a given
    model."""
    warmup_steps: int = 10
    """Linear learning-rate warmup steps."""
    schedule: str = "cosine"
    """Cosine (to 10% at ``steps``; a rerun with the same ``steps`` resumes exactly) | constant
    after warmup (a rerun with more steps continues exactly).
    """
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Global gradient-norm clip."""
    lora_rank: int = 0
    """0: full fine-tuning; r > 0: LoRA adapters (peft) of rank r on every linear layer, the
    base frozen; checkpoints hold the merged weights (an ordinary model folder) and the
    adapter (to resume)."""
    max_length: int = 2048
    """Longer trajectories are left out (counted), never cut."""
    max_turns: int = 4
    """Agent turns the rendering allows (tool call, result, ..., answer); read when ``agent`` is
    not given."""
    tools: str = "python"
    """python (the sandboxed interpreter) | none (one turn, no tool); read when ``agent`` is not
    given."""
    agent: AgentConfig | None = None
    """The prompt and tool rendering RL will use, whole; None: built from max_turns and tools
    with the dataset's system prompt."""
    seed: int = 0
    """Seed of the initial weights (the nano policy) and of the data order."""
    checkpoint_every: int = 0
    """Save a checkpoint every this many steps (0: by time only, checkpoint_minutes)."""
    checkpoint_minutes: float = 10.0
    """Also save once this many minutes have passed since the last save (0: off): a killed or
    interrupted run resumes losing at most that much."""
    nano: dict = field(
        default_factory=lambda: {
            "hidden": 128,
            "layers": 2,
            "heads": 4,
            "kv_heads": 2,
            "vocab": 400,
        }
    )
    """The nano policy (model=None): Qwen2 dimensions and the BPE vocabulary size."""

    def learning_rate(self) -> float:
        """``lr``, or the default for the policy being trained."""
        if self.lr is not None:
            return self.lr
        return NANO_SFT_LR if self.model is None else 1e-5

    def check_inputs(self) -> None:
        """The files the run reads exist: the base model's folder and the dataset's sft/ split."""
        if self.model is not None:
            check_model_folder(self.model)
        if self.dataset is not None:
            check_dataset_split(self.dataset, "sft")

    def __post_init__(self) -> None:
        if self.lora_rank < 0 or (self.lora_rank and self.model is None):
            raise ValueError(
                f"lora_rank must be 0 (full fine-tuning) or, with a pretrained model, > 0; "
                f"not {self.lora_rank} (the nano policy is trained whole from scratch)"
            )
        if self.agent is None:
            self.agent = agent_config(self.dataset, self.max_turns, self.tools)
        if self.micro_batch_size < 0:
            raise ValueError(f"micro_batch_size must be >= 0, not {self.micro_batch_size}")
        if self.schedule not in ("cosine", "constant"):
            raise ValueError(f"schedule must be cosine or constant, not {self.schedule!r}")


def check_model_folder(model: str, what: str = "model") -> None:
    """A model is a local folder here (no hub downloads at run time)."""
    if not Path(model).is_dir():
        raise ValueError(
            f"{what} {model} is not a model folder (hub names need the network: download the "
            "model first, or import a GGUF file with `flow model import`)"
        )


def check_dataset_split(dataset: str, split: str) -> None:
    """A published dataset folder with the split a trainer reads."""
    if not (Path(dataset) / split).is_dir():
        # a dataset's name where its folder was meant (flow run takes names): say the folder
        import os

        named = Path(os.environ.get("FLOW_LAKE") or "data/lake") / "datasets" / dataset
        versions = sorted(
            (p for p in named.glob("v*") if p.name[1:].isdigit()), key=lambda p: int(p.name[1:])
        )
        hint = f"; did you mean --dataset {versions[-1]} (its newest version)?" if versions else ""
        raise ValueError(
            f"dataset {dataset} has no {split}/ shards (a published dataset folder, "
            f"<lake>/datasets/<name>/v<N>; build one with `flow build`){hint}"
        )
    manifest = Path(dataset) / "manifest.json"
    if manifest.is_file():  # an empty split is refused here, not after the model loads
        import json

        info = json.loads(manifest.read_text()).get(split, {})
        if info.get("rows") == 0:
            raise ValueError(f"dataset {dataset}: the {split} split is empty; {_why_empty(info)}")


def _why_empty(info: dict) -> str:
    """What the manifest says about an empty split, and what to do."""
    dropped = plain({k.replace("_", " "): v for k, v in info.get("dropped", {}).items()})
    if "label_source" not in info:  # the sft split: correct trajectories
        return f"no correct trajectory was left ({dropped or 'none in the lake'})"
    supply = plain(info.get("supply", {}))
    return (
        f"of its {info.get('input_questions', 0)} questions labelled from "
        f"{info['label_source']} no pyramid could be kept (dropped: {dropped or 'none'}; "
        f"between 0/K and K/K: {supply or 'none'}). Label more questions or with a "
        "policy that solves some of them, or build from the recorded labels "
        "(`flow build --label-source recorded`)"
    )


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

"""What the main job runs on its defaults (`flow run`): the whole mission on the demo corpus
and the nano task family. ingest -> validate -> dedup -> sft (the nano policy, from scratch, on
the lake's correct trajectories) -> label (K live rollouts of that SFT policy, through vLLM
where installed, tool calls in the sandbox) -> build (0/K and K/K dropped, 30/50/20 from those
pass rates) -> train (GRPO-TCR from the SFT policy, multi-turn, tools) -> eval (the SFT policy
and the trained one on the held-out nano questions) -> one report.

Every stage uses one agent loop (``agent``), so SFT, labelling, training and evaluation see the
same prompt and tool rendering. ``MissionConfig.quick()`` is the CI-sized run."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from flows.runners import RunnerConfig
from pipeline.demo.nano import EVAL_SET
from pipeline.rollout.agent import SYSTEM, AgentConfig

STAGES = ("ingest", "validate", "dedup", "sft", "label", "build", "train", "eval")
"""The mission's stages, in order (``flow run``)."""
DATA_STAGES = ("ingest", "validate", "dedup", "label", "build")
"""The data stages (``flow run --data-only``, the scheduled deployments)."""


def nano_agent() -> AgentConfig:
    """The nano policy's loop: up to 3 turns (call, maybe a check, answer), no system prompt and
    no declared tool schema: the policy learns the tool from its SFT data, and a constant
    30-token prefix measurably delays the 2-layer policy's learning to copy numbers
    (docs/training.md)."""
    return AgentConfig(
        max_turns=3, max_response_tokens=192, system_prompt=None, declare_tools=False
    )


@dataclass
class MissionConfig:
    """Sizes and settings of the whole run; the defaults are the laptop demo (minutes on CPU)."""

    demo_dir: str = "data/demo"
    """The demo corpus with the nano family, written when missing."""
    nano: dict = field(default_factory=lambda: {"n_solved": 1800, "n_pool": 1800, "n_eval": 64})
    """The nano family written into the demo corpus (pipeline.demo.nano.write_nano's arguments)."""
    agent: AgentConfig = field(default_factory=nano_agent)
    """The one agent loop of every stage (SFT rendering, labels, training, evaluation)."""
    sft_steps: int = 3000
    """2,000 left the copy jump at the cosine tail (docs/training.md)."""
    sft_batch: int = 16
    """SFT batch size (trajectories per step). 16 and 32 gave the same held-out avg@8 over seeds
    0-2 (0.902 / 0.920 / 0.871 and 0.910 / 0.912 / 0.863, gaps 0.049 both) in ~60% of the time
    (bench/nano_seeds.py --batch, docs/training.md)."""
    k: int = 8
    """Rollouts per question for the difficulty labels."""
    temperature: float = 1.0
    """Labels, training and evaluation sample alike."""
    max_tokens: int = 64
    """Per assistant turn."""
    backend: str = "auto"
    """Labelling and evaluation engine: vLLM where installed."""
    label_datasets: tuple[str, ...] = ()
    """Label only questions of these pools (empty: every pool)."""
    label_limit: int | None = 1000
    """Label at most this many questions (None: all). The nano policy at lr 1e-3 solves most
    questions 8 of 8: all 1,921 (~4 min on two cores) gave 19-25 hard and pyramids of 95-130,
    1,000 (~2.5 min) 13-18 hard and pyramids of 65-88, after which GRPO-TCR reached the same
    held-out avg@8 from one SFT policy within noise (0.963 against 0.959-0.965; docs/training.md)."""
    rl_size: int | None = None
    """The RL dataset's requested size (None: the largest 30/50/20 pyramid the labels allow). A
    requested size takes each bin's share of it, or what a short bin has (reported per bin);
    without one, an empty bin leaves no pyramid at all."""
    train_steps: int = 45
    """GRPO-TCR steps (45 and 60 reached 0.959 and 0.965 held-out from the same SFT policy's
    0.902, within noise of each other; docs/training.md)."""
    prompts_per_step: int = 16
    """GRPO-TCR questions per step."""
    group_size: int = 8
    """GRPO-TCR samples per question (K)."""
    lr: float = 1e-4
    """GRPO-TCR learning rate."""
    train_backend: str = "auto"
    """GRPO-TCR's rollout engine: auto (vLLM where installed) | vllm | transformers."""
    train_options: dict = field(default_factory=lambda: {"warmup_steps": 5})
    """Any other TrainConfig fields of the GRPO-TCR stage."""
    eval_set: str = EVAL_SET
    """The held-out evaluation set of the before/after evaluation."""
    more_eval_sets: tuple[str, ...] = ()
    """Further held-out sets evaluated before and after (the real mission: a GSM8K slice)."""
    eval_k: int = 8
    """Samples per held-out question."""
    eval_limit: int | None = None
    """At most this many held-out questions (None: all)."""
    seed: int = 0
    """One seed for the nano policy's initial weights and SFT order, the rollouts' sampling and
    GRPO's stream (the nano policy's outcome spreads across seeds: docs/training.md).
    """
    base_model: str | None = None
    """What SFT starts from: None, the nano policy built from scratch; "smollm2", the packaged
    SmolLM2-135M-Instruct imported once into <lake>/models (flow model import); or a model
    folder."""
    lora_rank: int = 0
    """SFT with LoRA adapters of this rank (0: full fine-tuning)."""
    sft_lr: float | None = None
    """SFT learning rate (None: the SFT stage's default, ``trainer.config.NANO_SFT_LR`` for the
    nano policy, 1e-5 for a pretrained model)."""
    sft_max_length: int = 2048
    """SFT trajectories longer than this many tokens are left out (counted)."""
    sft_options: dict = field(default_factory=lambda: {"weight_decay": 0.1})
    """Any other SFTTrainConfig fields of the SFT stage (warmup_steps, schedule, ...). The
    default's weight decay: the nano policy's held-out avg@8 on seeds 0-2 went from 0.629 /
    0.662 / 0.781 without it to 0.832 / 0.711 / 0.830 (bench/nano_seeds.py,
    docs/training.md)."""
    shared_inputs: tuple[str, ...] = ()
    """Files or folders of real data ingested beside the demo corpus (paths under the shared
    data folder, FLOW_SHARED_DATA, default ../shared/data)."""
    heldout_gsm8k: int = 0
    """Questions of GSM8K test held out as the evaluation set gsm8k_heldout (written into the
    demo folder as a pool); the rest of GSM8K test is training data in this run, said as a
    warning (0: none)."""
    dedup_eval_sets: tuple[str, ...] | None = None
    """The evaluation sets dedup keeps out of training beside the registered ones (None: its
    defaults, which hold out all of GSM8K test)."""

    @classmethod
    def quick(cls) -> MissionConfig:
        """The CI-sized mission: the same stages on one difficulty level and mostly direct
        solves (a single template is learnt in a few hundred SFT steps), fewer questions,
        steps and rollouts."""
        return cls(
            demo_dir="data/demo-quick",
            nano={
                "n_solved": 1000,
                "n_pool": 1100,
                "n_eval": 24,
                "levels": [1],
                "weights": [17, 1, 1, 1],
            },
            # at NANO_SFT_LR the copy jump came at step ~250-380 on seeds 0-3: SFT avg@4 0.760 /
            # 0.740 / 0.771 / 0.792 (at 3e-3 seed 1's had not come by step 700: 0.0)
            sft_steps=700,
            sft_batch=32,  # the seeds above were measured at 32
            sft_options={},  # one level learns without weight decay
            label_limit=64,  # 512 live episodes: 43-52 of 64 questions mixed on those seeds
            # but only 0-2 hard (1-2 of 8): the largest 30/50/20 pyramid was 0 or 5 questions.
            # 16 asked for: easy 5, medium 8, hard 3 or what the hard bin has (short_bins)
            rl_size=16,
            train_steps=4,
            prompts_per_step=8,
            eval_k=4,
        )

    @classmethod
    def real(cls, quick: bool = False) -> MissionConfig:
        """The mission on a real pretrained model: SmolLM2-135M-Instruct, SFT on ToRA's
        python-tool solutions and the nano family, live labels of real questions (GSM8K,
        MATH-500) and nano ones, GRPO-TCR, evaluation on held-out nano and GSM8K questions.
        Sized for about an hour on 2 cores (``quick``: minutes, the CI test's size); where a
        stage cannot fit, questions, K and steps are cut, never a stage (docs/training.md)."""
        agent = AgentConfig(
            max_turns=3, max_response_tokens=512, system_prompt=SYSTEM, declare_tools=True
        )
        real = cls(
            demo_dir="data/demo-real",
            nano={"n_solved": 300, "n_pool": 300, "n_eval": 32, "levels": [1, 2]},
            agent=agent,
            base_model="smollm2",
            lora_rank=16,
            sft_steps=60,
            sft_batch=8,
            sft_lr=5e-4,
            sft_max_length=768,
            # 8 trajectories of up to 768 tokens at once took 21 GB (30 layers' activations)
            # and were killed on a 23 GB machine; 2 at a time: the same gradient
            sft_options={"micro_batch_size": 2},
            k=8,
            max_tokens=160,
            label_datasets=("nano_arith", "gsm8k/train", "math500"),
            label_limit=96,  # shared in turns by nano, GSM8K train and MATH-500: 32 each
            # ~9 min a step on 2 cores (32 rollouts, then 32 sequences of ~900 tokens through
            # 30 layers): 4 steps keep the whole mission near the hour
            train_steps=4,
            prompts_per_step=4,
            group_size=8,
            lr=1e-6,
            # 16 sequences of up to ~900 tokens per optimizer step through 30 layers at once
            # took 22.5 GB and were killed; 2 at a time (grad_accum 8): the same update
            train_options={"warmup_steps": 0, "minibatches": 2, "grad_accum": 8},
            eval_k=4,
            eval_limit=24,
            more_eval_sets=("gsm8k_heldout",),
            shared_inputs=("tora", "questions/gsm8k/train.jsonl", "questions/math500"),
            heldout_gsm8k=24,
            dedup_eval_sets=(),
        )
        if not quick:
            return real
        return replace(
            real,
            demo_dir="data/demo-real-quick",
            nano={"n_solved": 16, "n_pool": 16, "n_eval": 4, "levels": [1]},
            agent=replace(agent, max_turns=2, max_response_tokens=192),
            # 12 LoRA steps on the nano trajectories: a policy between 0/K and K/K on nano
            # questions (8 steps: 0-1 of 4 right, 14: mostly 3 of 4), so the build has RL rows
            sft_steps=12,
            sft_batch=4,
            sft_lr=1e-3,
            sft_max_length=512,
            sft_options={"warmup_steps": 2, "schedule": "constant"},
            k=4,
            max_tokens=48,
            label_datasets=("nano_arith",),
            # 6 questions x 4 (~17 s a question on one core): 8-9 of 10 came out between 0/4 and
            # 4/4 in two runs at 10, so the build has RL rows
            label_limit=6,
            rl_size=4,  # easy 1, medium 2, hard 1, each bin what it has (6 questions hold 0-2)
            train_steps=1,  # (74 s on one core: one shows the loop and its TIS metrics)
            prompts_per_step=1,
            group_size=4,
            backend="transformers",
            train_backend="transformers",
            train_options={"warmup_steps": 0, "minibatches": 2, "tis": "on"},
            eval_k=1,  # the evals rows of both policies on both sets, not their size
            eval_limit=1,
            shared_inputs=(),  # ToRA's long solutions would take the few SFT steps
            heldout_gsm8k=3,
        )

    def with_agent(self, **changes) -> MissionConfig:
        return replace(self, agent=replace(self.agent, **changes))


@dataclass(frozen=True)
class RunConfig:
    """What ``flow run`` runs: on which inputs, which stages, on which runner."""

    inputs: tuple[str, ...] = ()
    """Input files or folders (default: the demo corpus, written when missing)."""
    policy: str | None = None
    """A model folder: labels from its live rollouts instead of recorded attempts; in the
    mission it takes the SFT stage's place."""
    dataset: str = "demo"
    """The dataset name to publish (datasets/<name>/v<N>)."""
    data_only: bool = False
    """Only the data stages (ingest ... build), labelled from recorded attempts or from the
    policy's live rollouts; default: the whole mission (sft, live labels of the SFT policy,
    build, GRPO-TCR, eval)."""
    until: str | None = None
    """Stop after this stage (ingest validate dedup sft label build train eval)."""
    quick: bool = False
    """The CI-sized mission: fewer questions, steps and rollouts."""
    seed: int = 0
    """The mission's seed: nano weights, SFT order, rollouts, GRPO."""
    real: bool = False
    """The mission on a real pretrained model (SmolLM2-135M-Instruct, from the packaged GGUF)
    and real data (ToRA's python-tool solutions, GSM8K, MATH-500) beside the nano family; with
    quick, the CI-sized version (MissionConfig.real)."""
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    """Where the mapped work (files, signature partitions) runs."""

    def __post_init__(self) -> None:
        from pipeline.build.config import check_name

        check_name(self.dataset)
        known = DATA_STAGES if self.data_only else STAGES
        if self.until is not None and self.until not in known:
            raise ValueError(f"until must be one of {', '.join(known)}, not {self.until!r}")
        if self.real and self.data_only:
            raise ValueError("real is the whole mission on a real model; data_only runs none")
        if self.policy is not None and not Path(self.policy).is_dir():
            raise ValueError(f"policy {self.policy} is not a model folder")

    def mission(self) -> MissionConfig | None:
        """The mission's sizes (None: the data stages only)."""
        if self.data_only:
            return None
        if self.real:
            return replace(MissionConfig.real(quick=self.quick), seed=self.seed)
        return replace(MissionConfig.quick() if self.quick else MissionConfig(), seed=self.seed)

    def without_model_code(self) -> RunConfig:
        """The data stages only, up to ``until`` where it is one: what a run does when the
        sandbox for model code is unavailable."""
        until = self.until if self.until in DATA_STAGES else None
        return replace(self, data_only=True, until=until)

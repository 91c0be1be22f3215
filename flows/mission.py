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

from pipeline.demo.nano import EVAL_SET
from pipeline.rollout.agent import AgentConfig

STAGES = ("ingest", "validate", "dedup", "sft", "label", "build", "train", "eval")


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

    demo_dir: str = "data/demo"  # the demo corpus with the nano family, written when missing
    # the nano family written into the demo corpus (pipeline.demo.nano.write_nano's arguments)
    nano: dict = field(default_factory=lambda: {"n_solved": 1800, "n_pool": 1800, "n_eval": 64})
    agent: AgentConfig = field(default_factory=nano_agent)
    sft_steps: int = 3000  # 2,000 left the copy jump at the cosine tail (docs/training.md)
    sft_batch: int = 32
    k: int = 8  # rollouts per question for the difficulty labels
    temperature: float = 1.0  # labels, training and evaluation sample alike
    max_tokens: int = 64  # per assistant turn
    backend: str = "auto"  # labelling and evaluation engine: vLLM where installed
    # label at most this many questions (None: all); K=8 rollouts of 800 questions take ~2 min
    # on two cores, and the demo's pyramid needs no more
    label_limit: int | None = 800
    train_steps: int = 60
    prompts_per_step: int = 16
    group_size: int = 8
    lr: float = 1e-4
    train_backend: str = "auto"
    train_options: dict = field(default_factory=lambda: {"warmup_steps": 5})
    eval_set: str = EVAL_SET
    eval_k: int = 8
    eval_limit: int | None = None
    # one seed for the nano policy's initial weights and SFT order, the rollouts' sampling and
    # GRPO's stream (the nano policy's outcome spreads across seeds: docs/training.md)
    seed: int = 0

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
            sft_steps=700,  # as the nano_sft fixture: 19-20 of 20 solved on seeds 0-3
            label_limit=160,
            train_steps=6,
            prompts_per_step=8,
            eval_k=4,
        )

    def with_agent(self, **changes) -> MissionConfig:
        return replace(self, agent=replace(self.agent, **changes))

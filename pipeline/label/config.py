"""The label stage's options: K, the policy, the engine, sampling and the agent's limits."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

import orjson

from pipeline.judge.config import JudgeConfig
from pipeline.label.errors import LabelError
from pipeline.lake.ids import digest
from pipeline.rollout.agent import AgentConfig
from pipeline.rollout.engines import Sampling
from pipeline.rollout.policy_loop import read_loop, turn_tokens


@dataclass
class LabelConfig:
    """Options of the label stage."""

    k: int = 8
    """Rollouts per question (K): a question's pass rate is correct / K."""
    policy: str | None = None
    """Model folder for live rollouts; None: labels from the recorded attempts."""
    backend: str = "auto"
    """The rollout engine: auto (vllm where installed) | vllm | transformers."""
    max_tokens: int | None = None
    """Tokens per assistant turn; None: what the policy was sampled with (its agent_loop.json),
    else 512. Sets ``sampling.max_tokens``."""
    sampling: Sampling | None = None
    """The sampling distribution of the rollouts, whole; None: temperature 1, top-p 1, seed 0."""
    agent: AgentConfig | None = None
    """The agent loop the rollouts run (turns, tool rendering, sandbox limits); None: the loop
    the policy was trained with (its agent_loop.json), else the default loop."""
    batch_questions: int = 32
    """Questions per checkpointed part."""
    limit: int | None = None
    """At most this many questions labelled per policy and config."""
    datasets: tuple[str, ...] = ()
    """Label only questions of these pools (dataset or dataset/split; empty: every pool)."""
    include_eval: bool = False
    """Also label questions that belong to evaluation sets."""
    engines: int = 1
    """Engines labelling shards of the questions at once (one per GPU); more than one needs a
    policy. How the work is spread, not what it samples: not part of the labels' key."""
    judge: JudgeConfig | None = None
    """Then judge the live rollouts with this reasoning reward model (needs a policy)."""

    def __post_init__(self) -> None:
        """Checked, and what is left to the policy read from it, when constructed."""
        if self.k < 1:
            raise LabelError(f"k must be at least 1, not {self.k}")
        if self.engines < 1:
            raise LabelError(f"engines must be at least 1, not {self.engines}")
        if self.policy is not None and not Path(self.policy).is_dir():
            raise LabelError(
                f"policy {self.policy} is not a model folder (hub names need the network; "
                "download the model first)"
            )
        if not self.policy and self.judge is not None:
            raise LabelError("the judge scores live rollouts: give a policy (a model folder)")
        if not self.policy and self.engines > 1:
            raise LabelError("engines label live rollouts: give a policy (a model folder)")
        loop = read_loop(self.policy)
        if self.agent is None:
            self.agent = loop.agent if loop is not None else AgentConfig()
        if self.sampling is None:
            tokens = turn_tokens(self.policy, self.max_tokens, 512)
            self.sampling = Sampling(temperature=1.0, top_p=1.0, max_tokens=tokens)
        elif self.max_tokens is not None:
            self.sampling = replace(self.sampling, max_tokens=self.max_tokens)

    def check_inputs(self) -> None:
        """The judge is somewhere (before any engine starts; the policy is checked above)."""
        if self.judge is not None:
            self.judge.check_inputs()

    def config_json(self) -> str:
        """K, sampling and agent limits: what makes two labels comparable."""
        agent = {
            k: v
            for k, v in asdict(self.agent).items()
            # how the loop is run, not what it samples from
            if k not in ("tool_workers", "sandbox_workers", "schedule", "max_inflight")
        }
        blob = {"k": self.k, "sampling": asdict(self.sampling), "agent": agent}
        return orjson.dumps(blob, option=orjson.OPT_SORT_KEYS, default=str).decode()

    def config_key(self) -> str:
        return digest(self.config_json().encode(), 8)

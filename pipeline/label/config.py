"""The label stage's options: K, the policy, the engine, sampling and the agent's limits."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import orjson

from pipeline.lake.ids import digest
from pipeline.rollout.agent import AgentConfig
from pipeline.rollout.engines import Sampling


@dataclass
class LabelConfig:
    """Options of the label stage."""

    k: int = 8
    policy: str | None = None  # model folder; None = recorded labels from attempts
    backend: str = "auto"  # auto | vllm | transformers
    sampling: Sampling = field(
        default_factory=lambda: Sampling(temperature=1.0, top_p=1.0, max_tokens=512)
    )
    agent: AgentConfig = field(default_factory=AgentConfig)
    batch_questions: int = 32  # questions per checkpointed part
    limit: int | None = None  # at most this many questions labelled per policy and config
    include_eval: bool = False  # also label questions that belong to evaluation sets

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

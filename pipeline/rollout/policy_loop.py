"""The agent loop a policy was trained with, kept beside its weights (``agent_loop.json``).

A policy learns one loop: its turns, whether the tool schema is declared, its system prompt,
its tokens per turn. Scored through another loop, the same weights can go from 0.6 to 0.0, so
every checkpoint SFT or GRPO writes carries its loop, and training, labelling and evaluation
run that loop again unless told otherwise."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from pipeline.rollout.agent import AgentConfig
from pipeline.sandbox import SandboxConfig

LOOP_FILE = "agent_loop.json"


@dataclass(frozen=True)
class PolicyLoop:
    agent: AgentConfig
    max_tokens: int | None = None  # tokens per assistant turn it was sampled with (None: unknown)


def write_loop(folder: str | Path, agent: AgentConfig, max_tokens: int | None = None) -> None:
    """``folder/agent_loop.json`` (a checkpoint folder being written)."""
    record = {"agent": asdict(agent), "max_tokens": max_tokens}
    (Path(folder) / LOOP_FILE).write_text(json.dumps(record, indent=1) + "\n")


def read_loop(folder: str | Path | None) -> PolicyLoop | None:
    """The loop recorded beside a policy's weights, or None (a model from elsewhere)."""
    path = Path(folder) / LOOP_FILE if folder else None
    if path is None or not path.is_file():
        return None
    record = json.loads(path.read_text())
    agent = dict(record["agent"])
    box = {
        k: tuple(v) if isinstance(v, list) else v
        for k, v in agent.pop("sandbox", {}).items()
        if k in {f.name for f in fields(SandboxConfig)}
    }
    known = {f.name for f in fields(AgentConfig)}
    agent = AgentConfig(
        **{k: v for k, v in agent.items() if k in known}, sandbox=SandboxConfig(**box)
    )
    return PolicyLoop(agent, record.get("max_tokens"))


def turn_tokens(model: str | Path | None, given: int | None, default: int) -> int:
    """Tokens per assistant turn: ``given``, else what the policy was sampled with (its
    agent_loop.json), else ``default``."""
    if given is not None:
        return given
    loop = read_loop(model)
    return loop.max_tokens if loop is not None and loop.max_tokens else default

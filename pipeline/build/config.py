"""The build stage's options: which rows, in what balance, with which prompt, exported how."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipeline.build.errors import BuildError
from pipeline.build.select import SelectConfig
from pipeline.build.sft import SFTConfig
from pipeline.exports import ExportConfig
from pipeline.rollout.agent import SYSTEM

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass
class BuildConfig:
    """Options of the build stage."""

    name: str = "default"
    """Dataset name: published as datasets/<name>/v<N>."""
    select: SelectConfig = field(default_factory=SelectConfig)
    """The RL split: pass-rate bins, the pyramid's targets, size, seed, diversity."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """The SFT split: which real trajectories qualify."""
    label_source: str | None = None
    """The labels to balance on: recorded | rollouts (default: rollouts if any, else recorded)."""
    label_revision: str | None = None
    """Rollouts of this policy revision only (pipeline.label.model_revision); None: every
    revision's rollouts are summed (one policy labelled the lake).
    """
    shard_rows: int = 50_000
    """Rows per Parquet shard."""
    system_prompt: str | None = SYSTEM
    """One system prompt for the whole dataset: every RL prompt and every SFT conversation starts
    with it (None: no system message); the original is always kept in source_system_prompt.
    """
    keep_source_system_prompts: bool = False
    """Keep each trajectory's own system prompt in the SFT rows (e.g. tau-bench's domain policy)
    instead of the dataset's one prompt.
    """
    exports: ExportConfig = field(default_factory=ExportConfig)
    """How the TRL, verl and LLaMA-Factory exports spell what the frameworks disagree on."""

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.label_source not in (None, "recorded", "rollouts"):
            raise BuildError(
                f"label_source must be recorded or rollouts, not {self.label_source!r}"
            )
        if self.shard_rows < 1:
            raise BuildError(f"shard_rows must be at least 1, got {self.shard_rows}")


def check_name(name: str) -> str:
    if not NAME_RE.match(name) or ".." in name:
        raise BuildError(
            f"invalid dataset name {name!r}: use letters, digits, '_', '-', '.' (no path separators)"
        )
    return name

"""Options of the judge: which model judges, and how it samples."""

from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("auto", "vllm", "transformers", "openai")
TARGETS = ("trajectories", "rollouts")


@dataclass
class JudgeConfig:
    """``model``: a local model folder, or an OpenAI-compatible base URL (``http://…/v1``)."""

    model: str
    """The judge: a local model folder, or an OpenAI-compatible base URL (http://.../v1)."""
    served_model: str | None = None
    """The endpoint's model name (default: its first model)."""
    backend: str = "auto"
    """The judge's engine: auto (openai for a URL, else vllm where installed, else transformers) |
    vllm | transformers | openai.
    """
    max_tokens: int = 512
    """Tokens the judge may write (its thinking, critique and score)."""
    temperature: float = 0.0
    """A judge is read, not sampled: greedy by default."""
    seed: int = 0
    """Sampling seed of a local judge."""
    api_key_env: str = "OPENAI_API_KEY"
    """The endpoint's key is read from here, never stored."""
    workers: int = 8
    """Concurrent endpoint calls."""
    max_model_len: int = 4096
    """Local engines."""

    target: str = "trajectories"
    """What a judge run scores: trajectories (the valid ones) | rollouts (the labeller's)."""
    limit: int | None = None
    """Judge at most this many of the target's rows (None: all)."""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {self.backend!r}")
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, not {self.target!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be at least 1 (or None for all), not {self.limit}")

    def check_inputs(self) -> None:
        """The judge is somewhere: a local folder or a URL (checked before any engine starts)."""
        check_judge(self.model)

    @property
    def is_endpoint(self) -> bool:
        return self.model.startswith(("http://", "https://"))


def check_judge(model: str) -> None:
    """A judge is a local model folder or an OpenAI-compatible base URL."""
    import os

    if not model.startswith(("http://", "https://")) and not os.path.isdir(model):
        raise ValueError(f"no judge model folder {model!r} (give a local folder or an http(s) URL)")

